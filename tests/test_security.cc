// What a stranger on this host or network, or a broken peer, can send a
// rank: each attack of docs/security.md is played here against real ranks,
// which must refuse it without a crash and still compute the right result.
// The parsers of every message that comes from outside are checked field by
// field in tests/test_wire.cc and fuzzed in tests/fuzz.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "harness.h"

extern "C" {
#include "core/bootstrap.h"
#include "core/error.h"
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

// Connects to `addr` (a rendezvous or data listener), retrying while
// nobody listens yet; -1 when nobody does within 10 s.
int connect_to(const hoop_addr &addr) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(addr.port);
  memcpy(&a.sin_addr, addr.ip, 4);
  for (int tries = 0; tries < 1000; tries++) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (sockaddr *)&a, sizeof a) == 0)
      return fd;
    close(fd);
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

// Sends `h` to the rendezvous of `uid`; returns the status of rank 0's
// reply, or -1 when rank 0 closed the connection without one.
int send_hello(const hoop_uid &uid, const hoop_hello &h) {
  int fd = connect_to(uid.root);
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
          RANK_EXPECT(log, status != HOOP_SUCCESS,
                      "rank 0 accepted a host name without its end");
        }
        hoop_config_t cfg = HOOP_CONFIG_INIT;
        cfg.timeout_ms = 20000;
        hoop_comm_t comm;
        hoop_result_t res = hoop_comm_init_rank(&comm, nranks, &id, rank, &cfg);
        if (res != HOOP_SUCCESS) {
          log.fail("init: %s: %s", hoop_result_name(res), hoop_last_error());
          return;
        }
        expect_sum(log, comm, rank, nranks);
        hoop_comm_destroy(comm);
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
