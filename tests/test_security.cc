// What a stranger on this host or network, or a broken peer, can send a
// rank: each attack of docs/security.md is played here against real ranks,
// which must refuse it without a crash and still compute the right result.
// The parsers of every message that comes from outside are checked field by
// field in tests/test_wire.cc and fuzzed in tests/fuzz; the SHA-256 and
// HMAC under the handshake against published vectors at the end.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <dirent.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

extern "C" {
#include "core/auth.h"
#include "core/bootstrap.h"
#include "core/error.h"
#include "core/sha256.h"
#include "transport/shm.h"
#include "transport/transport.h"
}

using namespace hooptest;

namespace {

// A small all-reduce whose sum shows every rank took part.
void expect_sum(RankLog &log, hoop_comm_t comm, int rank, int nranks) {
  int64_t v = rank + 1;
  RANK_EXPECT_OK(log, comm,
                 hoop_allreduce(comm, &v, &v, 1, HOOP_I64, HOOP_SUM, nullptr));
  RANK_EXPECT(log, v == (int64_t)nranks * (nranks + 1) / 2, "sum %lld",
              (long long)v);
}

// The rest of a rank once its init (`what`) returned `res`: the all-reduce
// on `comm` when it joined, the reason when it did not.
void sum_if_joined(RankLog &log, const char *what, hoop_result_t res,
                   hoop_comm_t comm, int rank, int nranks) {
  if (res != HOOP_SUCCESS) {
    log.fail("%s: %s: %s", what, hoop_result_name(res), hoop_last_error());
    return;
  }
  expect_sum(log, comm, rank, nranks);
  hoop_comm_destroy(comm);
}

// Connects to `addr` (a rendezvous or data listener), retrying while
// nobody listens yet; -1 when nobody does within 10 s, or when a listener
// that no longer accepts leaves the connection hanging for 2 s.
int connect_to(const hoop_addr &addr) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(addr.port);
  memcpy(&a.sin_addr, addr.ip, 4);
  timeval limit = {2, 0};
  for (int tries = 0; tries < 1000; tries++) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
    if (connect(fd, (sockaddr *)&a, sizeof a) == 0)
      return fd;
    int err = errno;
    close(fd);
    if (err != ECONNREFUSED)
      return -1;
    usleep(10000);
  }
  return -1;
}

hoop_uid parse_id(const hoop_unique_id_t &id) {
  hoop_uid uid;
  EXPECT_EQ(hoop__uid_parse(&id, &uid), HOOP_SUCCESS);
  return uid;
}

// A hello as rank `rank` of `nranks` would send it, before the caller
// spoils a field.
hoop_hello make_hello(const hoop_uid &uid, int rank, int nranks) {
  hoop_hello h{};
  h.magic = HOOP_WIRE_MAGIC;
  h.version = HOOP_WIRE_VERSION;
  h.comm_id = uid.comm_id;
  h.rank = rank;
  h.nranks = nranks;
  h.info.addr = uid.root;
  h.info.addr.port = 1;
  h.info.rank = rank;
  h.info.pid = getpid();
  strcpy(h.info.hostname, "stranger");
  return h;
}

// Connects to `addr` and plays the dialler's side of the handshake as rank
// `from` wanting rank `to` on `channel`, with `key`: the job's, or a
// stranger's guess.  Returns the socket once the proof is sent, or -1 when
// the acceptor closed first or failed to prove itself.
int dial_as(const hoop_addr &addr, const hoop_auth_key &key, uint64_t comm_id,
            int from, int to, int channel) {
  int fd = connect_to(addr);
  if (fd < 0)
    return -1;
  hoop_handshake hs;
  hoop_auth_challenge ch;
  hoop_auth_proof proof;
  if (hoop__auth_handshake(comm_id, from, to, channel, &hs) != HOOP_SUCCESS ||
      write(fd, &hs, sizeof hs) != (ssize_t)sizeof hs ||
      recv(fd, &ch, sizeof ch, MSG_WAITALL) != (ssize_t)sizeof ch ||
      !hoop__auth_check_challenge(&key, &hs, &ch)) {
    close(fd);
    return -1;
  }
  hoop__auth_proof(&key, &hs, &ch, &proof);
  if (write(fd, &proof, sizeof proof) != (ssize_t)sizeof proof) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends `h` to the rendezvous of `uid` as a rank that holds its key;
// returns the status of rank 0's reply, or -1 when rank 0 closed the
// connection without one.
int send_hello(const hoop_uid &uid, const hoop_hello &h) {
  int fd = dial_as(uid.root, uid.key, uid.comm_id, h.rank, 0,
                   HOOP_RENDEZVOUS_CHANNEL);
  if (fd < 0)
    return -2;
  int status = -1;
  hoop_reply rep;
  if (write(fd, &h, sizeof h) == (ssize_t)sizeof h &&
      recv(fd, &rep, sizeof rep, MSG_WAITALL) == (ssize_t)sizeof rep)
    status = rep.status;
  close(fd);
  return status;
}

// The ports process `pid` listens on over TCP (from /proc: any local user
// can list listening ports, and a port scan finds them too).
std::vector<int> listening_ports(pid_t pid) {
  std::set<std::string> inodes;
  std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR *d = opendir(dir.c_str())) {
    for (struct dirent *e; (e = readdir(d)) != nullptr;) {
      char link[64] = "";
      ssize_t n = readlink((dir + "/" + e->d_name).c_str(), link,
                           sizeof link - 1);
      if (n > 8 && strncmp(link, "socket:[", 8) == 0)
        inodes.insert(std::string(link + 8, (size_t)n - 9));
    }
    closedir(d);
  }
  std::vector<int> ports;
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  std::getline(tcp, line);
  while (std::getline(tcp, line)) {
    std::istringstream f(line);
    std::string sl, local, remote, st, queues, timer, retr, uid, timeout,
        inode;
    f >> sl >> local >> remote >> st >> queues >> timer >> retr >> uid >>
        timeout >> inode;
    if (st == "0A" && inodes.count(inode))
      ports.push_back((int)strtol(local.substr(local.find(':') + 1).c_str(),
                                  nullptr, 16));
  }
  return ports;
}

// The data listener of rank process `pid` of the job `uid`, a child of
// this test: on the job's host, the port it listens on and this process
// does not (the children inherit the rendezvous sockets of every id this
// process made); port 0 when none turned up within 10 s.
hoop_addr data_address(const hoop_uid &uid, pid_t pid) {
  hoop_addr addr = uid.root;
  addr.port = 0;
  std::vector<int> ours = listening_ports(getpid());
  for (int tries = 0; tries < 1000; tries++) {
    for (int port : listening_ports(pid)) {
      if (std::find(ours.begin(), ours.end(), port) == ours.end()) {
        addr.port = (uint16_t)port;
        return addr;
      }
    }
    usleep(10000);
  }
  return addr;
}

// Forks a rank that joins `id` and checks an all-reduce; its exit code is
// 0 when the sum was right.
pid_t fork_rank(const hoop_unique_id_t &id, int rank, int nranks) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid != 0)
    return pid;
  RankLog log(rank);
  hoop_config_t cfg = HOOP_CONFIG_INIT;
  cfg.timeout_ms = 10000;
  hoop_comm_t comm;
  hoop_result_t res = hoop_comm_init_rank(&comm, nranks, &id, rank, &cfg);
  sum_if_joined(log, "init", res, comm, rank, nranks);
  _exit(log.ok() ? 0 : 1);
}

int exit_code(pid_t pid) {
  int status;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Whether the peer closes fd within `ms` without sending anything more.
bool closes_within(int fd, int ms) {
  pollfd p = {fd, POLLIN, 0};
  char byte;
  return poll(&p, 1, ms) == 1 && recv(fd, &byte, 1, 0) <= 0;
}

// A TCP relay between one dialler and `target` that records what the
// dialler sends, one chunk per read, as an eavesdropper on the path would
// see it.
class Recorder {
 public:
  explicit Recorder(const hoop_addr &target) : target_(target) {
    listen_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    bind(listen_, (sockaddr *)&a, sizeof a);
    getsockname(listen_, (sockaddr *)&a, &len);
    listen(listen_, 1);
    port_ = ntohs(a.sin_port);
  }
  ~Recorder() {
    if (thread_.joinable())
      thread_.join();
    close(listen_);
  }
  int port() const { return port_; }
  // Relays from now on.  Call it only after forking the ranks: a fork
  // while another thread starts or allocates can copy a held allocator
  // lock into the child, which ASan's allocator then waits on for ever.
  void start() { thread_ = std::thread([this] { relay(); }); }
  // What the dialler sent, once it is done.
  std::vector<std::string> chunks() {
    if (thread_.joinable())
      thread_.join();
    return chunks_;
  }

 private:
  void relay() {
    int in = accept(listen_, nullptr, nullptr);
    int out = connect_to(target_);
    pollfd p[2] = {{in, POLLIN, 0}, {out, POLLIN, 0}};
    char buf[4096];
    while (in >= 0 && out >= 0 && poll(p, 2, 20000) > 0) {
      if (p[0].revents) {
        ssize_t n = recv(in, buf, sizeof buf, 0);
        if (n <= 0)
          break;
        chunks_.emplace_back(buf, (size_t)n);
        if (write(out, buf, (size_t)n) != n)
          break;
      }
      if (p[1].revents) {
        ssize_t n = recv(out, buf, sizeof buf, 0);
        if (n <= 0 || write(in, buf, (size_t)n) != n)
          break;
      }
    }
    close(in);
    close(out);
  }
  hoop_addr target_;
  int listen_, port_;
  std::vector<std::string> chunks_;
  std::thread thread_;
};

// Sends `chunks` to `addr` in order, as they were recorded, letting the
// other side answer each; returns whether it accepted all of them and
// still holds the connection open (what it does with a rank).
bool replay(const hoop_addr &addr, const std::vector<std::string> &chunks) {
  int fd = connect_to(addr);
  bool open = fd >= 0;
  for (const std::string &c : chunks) {
    if (!open || write(fd, c.data(), c.size()) != (ssize_t)c.size()) {
      open = false;
      break;
    }
    pollfd p = {fd, POLLIN, 0};
    char buf[4096];
    if (poll(&p, 1, 500) == 1 && recv(fd, buf, sizeof buf, 0) <= 0)
      open = false;
  }
  open = open && !closes_within(fd, 3500);
  close(fd);
  return open;
}

// A job on a fresh id whose ranks join, tell the test so, and wait for its
// word before they run `work`: what the test does in between meets a
// formed job.
class Formed {
 public:
  using Work = std::function<void(RankLog &, hoop_comm_t, int rank)>;
  Formed(int nranks, const Work &work) {
    hoop_unique_id_t id;
    EXPECT_EQ(hoop_get_unique_id(&id), HOOP_SUCCESS);
    uid_ = parse_id(id);
    for (int r = 0; r < nranks; r++) {
      int ready[2], go[2];
      if (pipe(ready) != 0 || pipe(go) != 0)
        return;
      fflush(stdout);
      fflush(stderr);
      pid_t pid = fork();
      if (pid == 0) {
        RankLog log(r);
        hoop_config_t cfg = HOOP_CONFIG_INIT;
        cfg.timeout_ms = 10000;
        hoop_comm_t comm;
        if (hoop_comm_init_rank(&comm, nranks, &id, r, &cfg) != HOOP_SUCCESS)
          _exit(3);
        char byte = 1;
        if (write(ready[1], &byte, 1) != 1 || read(go[0], &byte, 1) != 1)
          _exit(4);
        work(log, comm, r);
        hoop_comm_destroy(comm);
        _exit(log.ok() ? 0 : 1);
      }
      close(ready[1]);
      close(go[0]);
      pids_.push_back(pid);
      ready_.push_back(ready[0]);
      go_.push_back(go[1]);
    }
  }
  ~Formed() {
    for (int fd : ready_)
      close(fd);
    for (int fd : go_)
      close(fd);
  }
  // Whether every rank joined within 20 s.
  bool joined() {
    for (int fd : ready_) {
      pollfd p = {fd, POLLIN, 0};
      char byte;
      if (poll(&p, 1, 20000) != 1 || read(fd, &byte, 1) != 1)
        return false;
    }
    return true;
  }
  pid_t pid(int rank) const { return pids_[(size_t)rank]; }
  const hoop_uid &uid() const { return uid_; }
  // Lets the ranks run their work; their exit codes.
  std::vector<int> run() {
    char byte = 1;
    for (int fd : go_)
      EXPECT_EQ(write(fd, &byte, 1), 1);
    std::vector<int> codes;
    for (pid_t pid : pids_)
      codes.push_back(exit_code(pid));
    return codes;
  }

 private:
  hoop_uid uid_;
  std::vector<pid_t> pids_;
  std::vector<int> ready_, go_;
};

// An all-reduce that rank 0 enters late, so that rank 1 sleeps in poll()
// meanwhile and serves its listener; it must be right and quick.
void late_sum(RankLog &log, hoop_comm_t comm, int rank) {
  if (rank == 0)
    usleep(300000);
  auto start = std::chrono::steady_clock::now();
  expect_sum(log, comm, rank, 2);
  double secs = std::chrono::duration<double>(
                    std::chrono::steady_clock::now() - start)
                    .count();
  RANK_EXPECT(log, secs < 2.5, "the all-reduce took %.1f s", secs);
  RANK_EXPECT(log, strstr(hoop_comm_last_error(comm), "stranger") == nullptr,
              "last error: %s", hoop_comm_last_error(comm));
}

// Open descriptors of process `pid`.
int count_fds(pid_t pid) {
  int n = 0;
  std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR *d = opendir(dir.c_str())) {
    for (struct dirent *e; (e = readdir(d)) != nullptr;)
      n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

} // namespace

// A host name that fills its 64 bytes without a NUL was taken as it came
// and later read past its end (ASan: heap-buffer-overflow in
// hoop__peer_desc).  Rank 0 must refuse the hello and the real rank 1 must
// still join.
TEST(Malformed, HelloWithUnterminatedHostNameIsRefused) {
  hoop_unique_id_t id;
  ASSERT_EQ(hoop_get_unique_id(&id), HOOP_SUCCESS);
  hoop_uid uid = parse_id(id);
  RunOptions opt;
  opt.init = false;
  opt.timeout_s = 60;
  RunResult r = run_ranks(
      2,
      [&](RankLog &log, hoop_comm_t, int rank, int nranks) {
        if (rank == 1) {
          hoop_hello h = make_hello(uid, 1, nranks);
          memset(h.info.hostname, 'A', sizeof h.info.hostname);
          int status = send_hello(uid, h);
          RANK_EXPECT(log, status == HOOP_ERR_MISMATCH,
                      "rank 0 answered a host name without its end with %d",
                      status);
        }
        hoop_config_t cfg = HOOP_CONFIG_INIT;
        cfg.timeout_ms = 20000;
        hoop_comm_t comm;
        hoop_result_t res = hoop_comm_init_rank(&comm, nranks, &id, rank, &cfg);
        sum_if_joined(log, "init", res, comm, rank, nranks);
      },
      opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// The shm offer's ring size 2^63 + 4096 made 4096 + 2 * ring wrap around to
// the 12 KiB of a real segment, so the size check passed and the first send
// wrote 2^63 bytes past the mapping.  Here the test is the lower rank that
// makes and offers such a segment to the transport of a higher rank.
TEST(Malformed, ShmOfferWhoseSizesWrapIsRefused) {
  const uint64_t ring = (1ULL << 63) + 4096;
  const uint64_t segment = 4096 + 2 * ring; // wraps to 12288
  char name[64];
  snprintf(name, sizeof name, "/hoop-%d-wrap", (int)getpid());
  int seg = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(seg, 0) << strerror(errno);
  ASSERT_EQ(ftruncate(seg, (off_t)segment), 0);
  auto *head = (uint64_t *)mmap(nullptr, segment, PROT_READ | PROT_WRITE,
                                MAP_SHARED, seg, 0);
  ASSERT_NE(head, MAP_FAILED);
  head[0] = 0x6d656d73706f6f68ULL; // the segment's magic, "hoopsmem"
  head[1] = ring;
  munmap(head, segment);
  close(seg);

  hoop_shm_offer offer{};
  snprintf(offer.name, sizeof offer.name, "%s", name);
  offer.segment_bytes = segment;
  offer.ring_bytes = ring;
  offer.slot_bytes = 4096;
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  ASSERT_EQ(write(sv[1], &offer, sizeof offer), (ssize_t)sizeof offer);

  // In a child: the unfixed transport crashed on its first send.
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    hoop_conn_setup setup{};
    setup.rank = 1;
    setup.peer = 0;
    setup.deadline = hoop__now_ms() + 5000;
    setup.slice_bytes = 256 * 1024;
    setup.peer_desc = "the test's lower rank";
    setup.open_socket = [](void *ctx, int *fd) {
      *fd = *(int *)ctx;
      return HOOP_SUCCESS;
    };
    setup.ctx = &sv[0];
    hoop_conn *conn = nullptr;
    hoop_result_t res = hoop__shm_transport.connect(&setup, &conn);
    if (res == HOOP_SUCCESS) {
      char bytes[64] = {0};
      iovec iov = {bytes, sizeof bytes};
      size_t sent;
      conn->ops->send(conn, &iov, 1, &sent);
      _exit(1);
    }
    bool named = strstr(hoop_last_error(), "malformed") != nullptr;
    _exit(res == HOOP_ERR_MISMATCH && named ? 0 : 2);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  shm_unlink(name);
  close(sv[0]);
  close(sv[1]);
  ASSERT_TRUE(WIFEXITED(status))
      << "the rank that was offered the segment died of signal "
      << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "1: the offer was accepted; 2: refused without saying why";
}

// A process that knows the job's address, and so its communicator id, but
// holds another secret asks to join as rank 2 before rank 2 comes.  Once
// it was taken in: it got the peer table, the ranks connected to it, and
// their all-reduce summed its numbers.  Now it is refused and the job
// computes the right sum.
TEST(Auth, ProcessWithAnotherSecretCannotJoinAsARank) {
  const int nranks = 3;
  int port = free_port();
  RunOptions opt;
  opt.init = false;
  opt.timeout_s = 60;
  RunResult r = run_ranks(
      nranks + 1,
      [port](RankLog &log, hoop_comm_t, int rank, int) {
        bool stranger = rank == nranks;
        setenv("HOOP_RANK", std::to_string(stranger ? 2 : rank).c_str(), 1);
        setenv("HOOP_WORLD_SIZE", std::to_string(nranks).c_str(), 1);
        setenv("HOOP_ROOT_ADDR", ("127.0.0.1:" + std::to_string(port)).c_str(),
               1);
        set_test_token();
        if (stranger)
          setenv("HOOP_AUTH_TOKEN", "a-guess-0123456789abcdef0123456789ab", 1);
        else if (rank == 2)
          usleep(1000000); // the stranger comes first
        hoop_config_t cfg = HOOP_CONFIG_INIT;
        cfg.timeout_ms = 15000;
        hoop_comm_t comm;
        hoop_result_t res = hoop_comm_init_env(&comm, &cfg);
        if (stranger) {
          RANK_EXPECT(log, res != HOOP_SUCCESS, "the stranger joined");
          if (res == HOOP_SUCCESS) {
            int64_t v = 100; // what it would add to the ranks' sum
            hoop_allreduce(comm, &v, &v, 1, HOOP_I64, HOOP_SUM, nullptr);
            hoop_comm_destroy(comm);
          }
          return;
        }
        sum_if_joined(log, "init", res, comm, rank, nranks);
      },
      opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// An eavesdropper records everything rank 1 sent to join a job, and plays
// it back to the next run of the same job (same address and secret: a
// restarted script) before the real rank 1 comes.  Once the recording
// joined in its place; now the answer to a new challenge is missing and
// the recording is dropped.
TEST(Auth, RecordedJoinIsRefusedInTheNextRun) {
  hoop_unique_id_t id;
  ASSERT_EQ(hoop_get_unique_id(&id), HOOP_SUCCESS);
  hoop_uid uid = parse_id(id);
  Recorder rec(uid.root);
  hoop_uid relayed = uid;
  relayed.root.port = (uint16_t)rec.port();
  hoop_unique_id_t via_relay = id;
  memcpy(via_relay.internal, &relayed, sizeof relayed);

  // The first run: rank 1 joins through the recording relay, which the
  // listening socket's backlog holds until the relay starts.
  pid_t first1 = fork_rank(via_relay, 1, 2);
  pid_t first0 = fork_rank(id, 0, 2);
  rec.start();
  ASSERT_EQ(exit_code(first0), 0);
  ASSERT_EQ(exit_code(first1), 0);
  std::vector<std::string> chunks = rec.chunks();
  ASSERT_FALSE(chunks.empty());

  // The second run: the recording comes first.
  pid_t second0 = fork_rank(id, 0, 2);
  bool taken = replay(uid.root, chunks);
  pid_t second1 = fork_rank(id, 1, 2);
  EXPECT_FALSE(taken) << "rank 0 kept the replayed connection as rank 1";
  EXPECT_EQ(exit_code(second0), 0);
  EXPECT_EQ(exit_code(second1), 0);
}

// A stranger on this host finds rank 1's data port while the job forms
// (rank 0 waits for rank 2) and dials it first, posing as rank 0: with a
// made-up proof, or with one recorded from an earlier exchange.  Rank 1
// once took the first such socket as rank 0's; now it closes it and takes
// the real rank 0's.  Over TCP, and over shm, whose segment is offered
// only on such a socket.
class AuthData
    : public ::testing::TestWithParam<std::tuple<const char *, bool>> {};

TEST_P(AuthData, StrangerPosingAsRankZeroOnADataPortIsRefused) {
  setenv("HOOP_TRANSPORT", std::get<0>(GetParam()), 1);
  bool recorded = std::get<1>(GetParam());
  hoop_unique_id_t id;
  ASSERT_EQ(hoop_get_unique_id(&id), HOOP_SUCCESS);
  hoop_uid uid = parse_id(id);
  pid_t ranks[3];
  ranks[0] = fork_rank(id, 0, 3);
  ranks[1] = fork_rank(id, 1, 3);
  hoop_addr data = data_address(uid, ranks[1]);
  ASSERT_NE(data.port, 0) << "rank 1 never listened";

  int fd = connect_to(data);
  ASSERT_GE(fd, 0);
  hoop_handshake hs;
  ASSERT_EQ(hoop__auth_handshake(uid.comm_id, 0, 1, 0, &hs), HOOP_SUCCESS);
  ASSERT_EQ(write(fd, &hs, sizeof hs), (ssize_t)sizeof hs);
  ranks[2] = fork_rank(id, 2, 3);
  hoop_auth_challenge ch;
  ASSERT_EQ(recv(fd, &ch, sizeof ch, MSG_WAITALL), (ssize_t)sizeof ch);
  hoop_auth_proof proof;
  if (recorded) {
    hoop_auth_challenge earlier;
    ASSERT_EQ(hoop__auth_challenge(&uid.key, &hs, &earlier), HOOP_SUCCESS);
    hoop__auth_proof(&uid.key, &hs, &earlier, &proof);
  } else {
    ASSERT_EQ(hoop__auth_random(&proof, sizeof proof), HOOP_SUCCESS);
  }
  ASSERT_EQ(write(fd, &proof, sizeof proof), (ssize_t)sizeof proof);
  EXPECT_TRUE(closes_within(fd, 5000))
      << "rank 1 answered a stranger's dial as rank 0";
  for (pid_t pid : ranks)
    EXPECT_EQ(exit_code(pid), 0);
  close(fd);
  unsetenv("HOOP_TRANSPORT");
}

INSTANTIATE_TEST_SUITE_P(
    Transports, AuthData,
    ::testing::Combine(::testing::Values("tcp", "shm"),
                       ::testing::Bool()),
    [](const ::testing::TestParamInfo<AuthData::ParamType> &p) {
      return std::string(std::get<0>(p.param)) +
             (std::get<1>(p.param) ? "_recorded" : "_madeup");
    });

// Ranks that meet at an address need a secret: without one the job is
// refused at once, saying how to give one; HOOP_AUTH=off runs it anyway.
TEST(Auth, JobWithoutSecretIsRefusedUnlessAuthIsOff) {
  int port = free_port();
  RunOptions opt;
  opt.init = false;
  opt.timeout_s = 60;
  RunResult r = run_ranks(
      2,
      [port](RankLog &log, hoop_comm_t, int rank, int nranks) {
        setenv("HOOP_RANK", std::to_string(rank).c_str(), 1);
        setenv("HOOP_WORLD_SIZE", std::to_string(nranks).c_str(), 1);
        setenv("HOOP_ROOT_ADDR", ("127.0.0.1:" + std::to_string(port)).c_str(),
               1);
        unsetenv("HOOP_AUTH_TOKEN");
        unsetenv("HOOP_AUTH_TOKEN_FILE");
        unsetenv("HOOP_AUTH");
        hoop_comm_t comm;
        auto start = std::chrono::steady_clock::now();
        hoop_result_t res = hoop_comm_init_env(&comm, nullptr);
        double secs = std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - start)
                          .count();
        RANK_EXPECT(log, res == HOOP_ERR_INVALID_USAGE, "got %s",
                    hoop_result_name(res));
        RANK_EXPECT(log, secs < 1, "refusing took %.1f s", secs);
        RANK_EXPECT(log, strstr(hoop_last_error(), "HOOP_AUTH_TOKEN") &&
                             strstr(hoop_last_error(), "HOOP_AUTH=off"),
                    "message: %s", hoop_last_error());
        setenv("HOOP_AUTH_TOKEN", "too-short", 1);
        res = hoop_comm_init_env(&comm, nullptr);
        RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT, "short: %s",
                    hoop_last_error());
        unsetenv("HOOP_AUTH_TOKEN");
        setenv("HOOP_AUTH", "off", 1);
        res = hoop_comm_init_env(&comm, nullptr);
        sum_if_joined(log, "HOOP_AUTH=off", res, comm, rank, nranks);
      },
      opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// A token file is taken only when it is the user's alone.
TEST(Auth, TokenFileMustBeReadableByItsOwnerAlone) {
  char path[] = "/tmp/hoop-token-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  std::string token = std::string(kTestToken) + "\n";
  ASSERT_EQ(write(fd, token.data(), token.size()), (ssize_t)token.size());
  close(fd);
  RunResult r = run_alone([&path](RankLog &log) {
    setenv("HOOP_RANK", "0", 1);
    setenv("HOOP_WORLD_SIZE", "1", 1);
    setenv("HOOP_ROOT_ADDR",
           ("127.0.0.1:" + std::to_string(free_port())).c_str(), 1);
    unsetenv("HOOP_AUTH_TOKEN");
    unsetenv("HOOP_AUTH");
    setenv("HOOP_AUTH_TOKEN_FILE", path, 1);
    hoop_comm_t comm;
    chmod(path, 0644);
    hoop_result_t res = hoop_comm_init_env(&comm, nullptr);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT,
                "a file others may read: %s", hoop_result_name(res));
    chmod(path, 0600);
    res = hoop_comm_init_env(&comm, nullptr);
    RANK_EXPECT(log, res == HOOP_SUCCESS, "mode 600: %s",
                hoop_last_error());
    if (res == HOOP_SUCCESS)
      hoop_comm_destroy(comm);
  });
  unlink(path);
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// hoop-run gives each job a secret of its own (the ranks share it), and
// keeps one the caller set.
TEST(Auth, HoopRunMakesEachJobASecret) {
  std::string cmd = std::string("env -u HOOP_AUTH_TOKEN -u HOOP_AUTH_TOKEN_FILE ") +
                    HOOP_RUN_PATH +
                    " -n 2 sh -c 'echo token=$HOOP_AUTH_TOKEN'";
  ShellOutput a = run_shell(cmd), b = run_shell(cmd);
  ASSERT_EQ(a.status, 0) << a.text;
  std::vector<std::string> tokens;
  for (const ShellOutput *o : {&a, &b}) {
    std::istringstream lines(o->text);
    for (std::string line; std::getline(lines, line);) {
      size_t at = line.find("] token=");
      std::string token = at == std::string::npos ? "" : line.substr(at + 8);
      if (token.size() == 64 &&
          token.find_first_not_of("0123456789abcdef") == std::string::npos)
        tokens.push_back(token);
    }
  }
  ASSERT_EQ(tokens.size(), 4u) << a.text << b.text;
  EXPECT_EQ(tokens[0], tokens[1]) << "the ranks of one job differ";
  EXPECT_NE(tokens[0], tokens[2]) << "two jobs had the same secret";
  ShellOutput kept = run_shell(std::string("HOOP_AUTH_TOKEN=") + kTestToken +
                               " " + HOOP_RUN_PATH +
                               " -n 1 sh -c 'echo $HOOP_AUTH_TOKEN'");
  EXPECT_NE(kept.text.find(kTestToken), std::string::npos) << kept.text;
}

// Idle connections to a rank's data port were read one at a time, each
// for up to a second, inside the next call that looked for failure
// notices: 20 of them stalled an all-reduce for 20 s and the job failed,
// blaming healthy ranks.  Now they cost the call nothing.
TEST(Flood, IdleConnectionsOnADataPortDoNotStallACall) {
  Formed job(2, late_sum);
  ASSERT_TRUE(job.joined());
  hoop_addr data = data_address(job.uid(), job.pid(1));
  ASSERT_NE(data.port, 0);
  std::vector<int> idle;
  for (int i = 0; i < 20; i++)
    idle.push_back(connect_to(data));
  ASSERT_EQ(write(idle[0], "hoop", 4), 4); // and one that stops short
  for (int code : job.run())
    EXPECT_EQ(code, 0);
  for (int fd : idle)
    close(fd);
}

// A flood of handshakes that look right (this job's id, a real rank) but
// never prove themselves, and some that name ranks far out of range, at
// the rendezvous while rank 0 waits for the others.  Rank 0 once kept
// every one open (descriptors 7 to 1,207); now it keeps a bounded number,
// and the ranks that come after the flood join at once.
TEST(Flood, HandshakesThatNeverProveThemselvesAreNotKept) {
  rlimit lim;
  getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, 4096);
  setrlimit(RLIMIT_NOFILE, &lim);
  const int strangers = (int)std::min<rlim_t>(1200, lim.rlim_cur - 300);
  hoop_unique_id_t id;
  ASSERT_EQ(hoop_get_unique_id(&id), HOOP_SUCCESS);
  hoop_uid uid = parse_id(id);
  pid_t rank0 = fork_rank(id, 0, 3);
  std::vector<int> fds;
  for (int i = 0; i < strangers; i++) {
    int fd = connect_to(uid.root);
    ASSERT_GE(fd, 0) << "connection " << i;
    hoop_handshake hs;
    int from = i % 100 == 0 ? (1 << 30) - 1 : 1;
    hoop__auth_handshake(uid.comm_id, from, 0, HOOP_RENDEZVOUS_CHANNEL, &hs);
    EXPECT_EQ(write(fd, &hs, sizeof hs), (ssize_t)sizeof hs);
    fds.push_back(fd);
  }
  usleep(300000); // rank 0 reads the last ones
  EXPECT_LT(count_fds(rank0), 200) << "rank 0 kept the strangers' sockets";
  auto start = std::chrono::steady_clock::now();
  pid_t rank1 = fork_rank(id, 1, 3), rank2 = fork_rank(id, 2, 3);
  EXPECT_EQ(exit_code(rank1), 0);
  EXPECT_EQ(exit_code(rank2), 0);
  double secs = std::chrono::duration<double>(
                    std::chrono::steady_clock::now() - start)
                    .count();
  EXPECT_EQ(exit_code(rank0), 0);
  EXPECT_LT(secs, 3.0) << "joining after the flood";
  for (int fd : fds)
    close(fd);
}

// A stranger sends rank 1 a failure notice in rank 0's name: once the job
// broke with the stranger's text.  Its seal is made up, or is a real one
// from another communicator of the same job (the same secret: a run before
// this one), whose session differs.  Both are ignored and the sum is right.
class Notice : public ::testing::TestWithParam<bool> {};

TEST_P(Notice, ForgedFailureNoticeIsIgnored) {
  bool other_session = GetParam();
  Formed job(2, late_sum);
  ASSERT_TRUE(job.joined());
  hoop_addr data = data_address(job.uid(), job.pid(1));
  ASSERT_NE(data.port, 0);
  int fd = connect_to(data);
  ASSERT_GE(fd, 0);
  const hoop_uid &uid = job.uid();
  hoop_handshake hs;
  ASSERT_EQ(hoop__auth_handshake(uid.comm_id, 0, 1, HOOP_NOTICE_CHANNEL, &hs),
            HOOP_SUCCESS);
  char text[HOOP_NOTICE_BYTES] = "a stranger says rank 0 failed";
  uint8_t seal[HOOP_AUTH_MAC_BYTES], session[HOOP_AUTH_NONCE_BYTES];
  ASSERT_EQ(hoop__auth_random(seal, sizeof seal), HOOP_SUCCESS);
  ASSERT_EQ(hoop__auth_random(session, sizeof session), HOOP_SUCCESS);
  if (other_session)
    hoop__auth_seal(&uid.key, &hs, session, text, sizeof text, seal);
  ASSERT_EQ(write(fd, &hs, sizeof hs), (ssize_t)sizeof hs);
  ASSERT_EQ(write(fd, seal, sizeof seal), (ssize_t)sizeof seal);
  ASSERT_EQ(write(fd, text, sizeof text), (ssize_t)sizeof text);
  for (int code : job.run())
    EXPECT_EQ(code, 0);
  close(fd);
}

INSTANTIATE_TEST_SUITE_P(Seals, Notice, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool> &p) {
                           return std::string(p.param ? "from_another_session"
                                                      : "made_up");
                         });

// The cryptography under the handshake, hoop's own (core/sha256.c):
// SHA-256 and HMAC-SHA256 against published vectors and against an
// implementation hoop shares nothing with, and the checks of auth.c.

namespace {

std::string hex(const uint8_t *bytes, size_t len) {
  std::string s;
  char two[3];
  for (size_t i = 0; i < len; i++) {
    snprintf(two, sizeof two, "%02x", bytes[i]);
    s += two;
  }
  return s;
}

std::string sha256_hex(const std::string &msg) {
  uint8_t digest[HOOP_SHA256_BYTES];
  hoop__sha256(msg.data(), msg.size(), digest);
  return hex(digest, sizeof digest);
}

// The same digest fed in pieces of `piece` bytes.
std::string sha256_pieces_hex(const std::string &msg, size_t piece) {
  hoop_sha256 s;
  hoop__sha256_init(&s);
  for (size_t at = 0; at < msg.size(); at += piece)
    hoop__sha256_update(&s, msg.data() + at,
                        std::min(piece, msg.size() - at));
  uint8_t digest[HOOP_SHA256_BYTES];
  hoop__sha256_final(&s, digest);
  return hex(digest, sizeof digest);
}

} // namespace

// FIPS 180-4's examples (NIST's "SHA256.pdf" and the one-million-'a'
// message of FIPS 180-2 appendix B.3), and the empty message.
TEST(Sha256, NistExamples) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb924"
                            "27ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223"
                               "b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(
      sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // In pieces of a prime size, so that they straddle every block boundary.
  EXPECT_EQ(sha256_pieces_hex(std::string(1000000, 'a'), 997),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Every length from empty to past three blocks, so that the padding is
// checked where the length fits the last block, where it needs another
// (55 and 56 bytes past a boundary) and at exact block ends; whole and in
// pieces that end on and off those boundaries.  The reference is
// coreutils' sha256sum, run on one file per message.
TEST(Sha256, EveryLengthTo200MatchesSha256sum) {
  const size_t longest = 200;
  std::vector<std::string> msgs;
  for (size_t len = 0; len <= longest; len++) {
    std::string m(len, '\0');
    for (size_t k = 0; k < len; k++)
      m[k] = (char)(uint8_t)(k * 37 + len);
    msgs.push_back(m);
  }
  char dir[] = "/tmp/hoop-sha256-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  for (size_t len = 0; len <= longest; len++) {
    std::ofstream(std::string(dir) + "/" + std::to_string(len),
                  std::ios::binary)
        << msgs[len];
  }
  std::vector<std::string> want(longest + 1);
  FILE *p = popen(("cd " + std::string(dir) + " && sha256sum -- *").c_str(),
                  "r");
  char digest[65], name[16];
  size_t listed = 0;
  while (p != nullptr && fscanf(p, "%64s %15s", digest, name) == 2) {
    size_t len = strtoul(name, nullptr, 10);
    if (len <= longest) {
      want[len] = digest;
      listed++;
    }
  }
  int status = p != nullptr ? pclose(p) : -1;
  for (size_t len = 0; len <= longest; len++)
    unlink((std::string(dir) + "/" + std::to_string(len)).c_str());
  rmdir(dir);
  ASSERT_EQ(status, 0) << "sha256sum failed";
  ASSERT_EQ(listed, longest + 1) << "sha256sum printed too few digests";
  for (size_t len = 0; len <= longest; len++) {
    EXPECT_EQ(sha256_hex(msgs[len]), want[len]) << len << " bytes";
    for (size_t piece : {1, 7, 55, 56, 63, 64, 65})
      EXPECT_EQ(sha256_pieces_hex(msgs[len], piece), want[len])
          << len << " bytes in pieces of " << piece;
  }
}

// RFC 4231's test cases 1-7: keys shorter than a block and of 131 bytes,
// longer than one (hashed first, cases 6 and 7), data shorter and longer
// than a block; case 5 is checked, as it is given, on its first 128 bits.
TEST(HmacSha256, Rfc4231) {
  struct Case {
    std::string key, data, mac;
  };
  std::string key4;
  for (char c = 1; c <= 25; c++)
    key4 += c;
  const std::string big_key(131, '\xaa');
  const Case cases[] = {
      {std::string(20, '\x0b'), "Hi There",
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {"Jefe", "what do ya want for nothing?",
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {std::string(20, '\xaa'), std::string(50, '\xdd'),
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {key4, std::string(50, '\xcd'),
       "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      {std::string(20, '\x0c'), "Test With Truncation",
       "a3b6167473100ee06e0c796c2955552b"},
      {big_key, "Test Using Larger Than Block-Size Key - Hash Key First",
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {big_key,
       "This is a test using a larger than block-size key and a larger than "
       "block-size data. The key needs to be hashed before being used by the "
       "HMAC algorithm.",
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  int number = 1;
  for (const Case &c : cases) {
    uint8_t mac[HOOP_SHA256_BYTES];
    hoop__hmac_sha256(c.key.data(), c.key.size(), c.data.data(), c.data.size(),
                      mac);
    EXPECT_EQ(hex(mac, c.mac.size() / 2), c.mac) << "test case " << number;
    number++;
  }
}

// The key a token gives is the one earlier builds, which hashed with
// libcrypto, gave, so that their ranks and these still form one job.
// Reference: printf 'hoop job secret v1\0%s' TOKEN | sha256sum.
TEST(Auth, KeyFromTokenIsUnchanged) {
  hoop_auth_key key;
  hoop__auth_key_from_token("0123456789abcdef0123456789abcdef", &key);
  EXPECT_EQ(hex(key.bytes, sizeof key.bytes),
            "74d218620406f73104c8641f0ea44c952cd983cb58925d44e237d58693d14ff9");
}

// Each check refuses its MAC with any one bit flipped (the comparison
// reads every byte), a MAC made for another role or channel, and one made
// under another token.
TEST(Auth, EveryBitOfAMacCounts) {
  hoop_auth_key key, other;
  hoop__auth_key_from_token("0123456789abcdef0123456789abcdef", &key);
  hoop__auth_key_from_token("0123456789abcdef0123456789abcdeF", &other);
  hoop_handshake hs;
  ASSERT_EQ(hoop__auth_handshake(42, 0, 1, 0, &hs), HOOP_SUCCESS);
  hoop_auth_challenge ch;
  ASSERT_EQ(hoop__auth_challenge(&key, &hs, &ch), HOOP_SUCCESS);
  hoop_auth_proof proof;
  hoop__auth_proof(&key, &hs, &ch, &proof);
  const char text[] = "rank 0 failed";
  uint8_t seal[HOOP_AUTH_MAC_BYTES];
  hoop__auth_seal(&key, &hs, ch.nonce, text, sizeof text, seal);

  ASSERT_TRUE(hoop__auth_check_challenge(&key, &hs, &ch));
  ASSERT_TRUE(hoop__auth_check_proof(&key, &hs, &ch, &proof));
  ASSERT_TRUE(hoop__auth_check_seal(&key, &hs, ch.nonce, text, sizeof text,
                                    seal));
  for (size_t bit = 0; bit < 8 * HOOP_AUTH_MAC_BYTES; bit++) {
    uint8_t flip = (uint8_t)(1u << (bit % 8));
    ch.mac[bit / 8] ^= flip;
    EXPECT_FALSE(hoop__auth_check_challenge(&key, &hs, &ch)) << "bit " << bit;
    ch.mac[bit / 8] ^= flip;
    proof.mac[bit / 8] ^= flip;
    EXPECT_FALSE(hoop__auth_check_proof(&key, &hs, &ch, &proof))
        << "bit " << bit;
    proof.mac[bit / 8] ^= flip;
    seal[bit / 8] ^= flip;
    EXPECT_FALSE(
        hoop__auth_check_seal(&key, &hs, ch.nonce, text, sizeof text, seal))
        << "bit " << bit;
    seal[bit / 8] ^= flip;
  }

  hoop_auth_challenge bounced = ch;
  memcpy(bounced.mac, proof.mac, sizeof bounced.mac);
  EXPECT_FALSE(hoop__auth_check_challenge(&key, &hs, &bounced));
  hoop_handshake elsewhere = hs;
  elsewhere.channel = 1;
  EXPECT_FALSE(hoop__auth_check_challenge(&key, &elsewhere, &ch));
  EXPECT_FALSE(hoop__auth_check_challenge(&other, &hs, &ch));
  EXPECT_FALSE(hoop__auth_check_proof(&other, &hs, &ch, &proof));
  EXPECT_FALSE(
      hoop__auth_check_seal(&other, &hs, ch.nonce, text, sizeof text, seal));
}
