// Joining a communicator: unique ids, hoop_comm_init_env with each
// launcher's variables (and a Slurm batch script that forgot srun), the
// interface setting HOOP_SOCKET_IFNAME, rank 0's INFO banner, and the
// rendezvous's errors (wrong sizes, missing ranks, bad arguments), each of
// which must be clear and bounded in time.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "harness.h"
#include "hoop_build_config.h"

extern "C" {
#include "core/log.h"
#include "core/socket.h"
}

using namespace hooptest;
using Output = hooptest::ShellOutput;

namespace {

// Checks a joined communicator end to end with one small all-reduce.
void expect_working(RankLog &log, hoop_comm_t comm, int want_rank,
                    int want_size) {
  int rank = -1, size = -1;
  RANK_EXPECT_OK(log, comm, hoop_comm_rank(comm, &rank));
  RANK_EXPECT_OK(log, comm, hoop_comm_size(comm, &size));
  RANK_EXPECT(log, rank == want_rank && size == want_size,
              "rank %d size %d", rank, size);
  int64_t v = rank + 1;
  RANK_EXPECT_OK(log, comm,
                 hoop_allreduce(comm, &v, &v, 1, HOOP_I64, HOOP_SUM, nullptr));
  RANK_EXPECT(log, v == (int64_t)size * (size + 1) / 2, "sum %lld",
              (long long)v);
}

// Leaves no launcher's variables but the job secret they all need.
void clear_launcher_env() {
  for (const char *name :
       {"HOOP_RANK", "HOOP_WORLD_SIZE", "HOOP_ROOT_ADDR", "RANK",
        "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid",
        "SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID", "SLURM_STEP_ID",
        "SLURM_STEPID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID",
        "SLURM_NODEID", "ENVIRONMENT", "HOOP_SOCKET_IFNAME"})
    unsetenv(name);
  set_test_token();
}

// Open MPI's variables as mpirun sets them for `rank` of `n` in the job
// named `job`, which give no address: the ranks meet through an id file.
void set_open_mpi_env(int rank, int n, const std::string &job) {
  setenv("OMPI_COMM_WORLD_RANK", std::to_string(rank).c_str(), 1);
  setenv("OMPI_COMM_WORLD_SIZE", std::to_string(n).c_str(), 1);
  setenv("PMIX_NAMESPACE", job.c_str(), 1);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       start)
      .count();
}

using EnvSetter = void (*)(int rank, int nranks, int port);

void init_env_case(int nranks, EnvSetter set) {
  int port = free_port();
  RunOptions opt;
  opt.init = false;
  opt.timeout_s = 60;
  RunResult r = run_ranks(
      nranks,
      [set, port](RankLog &log, hoop_comm_t, int rank, int n) {
        clear_launcher_env();
        set(rank, n, port);
        hoop_comm_t comm;
        hoop_result_t res = hoop_comm_init_env(&comm, nullptr);
        if (res != HOOP_SUCCESS) {
          log.fail("init_env: %s: %s", hoop_result_name(res),
                   hoop_last_error());
          return;
        }
        expect_working(log, comm, rank, n);
        hoop_comm_destroy(comm);
      },
      opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

TEST(Bootstrap, InitEnvFromHoopRunVariables) {
  init_env_case(3, [](int rank, int n, int port) {
    setenv("HOOP_RANK", std::to_string(rank).c_str(), 1);
    setenv("HOOP_WORLD_SIZE", std::to_string(n).c_str(), 1);
    setenv("HOOP_ROOT_ADDR", ("127.0.0.1:" + std::to_string(port)).c_str(),
           1);
  });
}

TEST(Bootstrap, InitEnvFromTorchrunVariables) {
  init_env_case(4, [](int rank, int n, int port) {
    setenv("RANK", std::to_string(rank).c_str(), 1);
    setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
    setenv("MASTER_ADDR", "localhost", 1);
    setenv("MASTER_PORT", std::to_string(port - 1).c_str(), 1);
  });
}

TEST(Bootstrap, InitEnvFromOpenMpiVariablesWithoutAddress) {
  init_env_case(3, [](int rank, int n, int port) {
    set_open_mpi_env(rank, n, "hooptest" + std::to_string(port));
  });
}

// The *.id files in dir, with their contents.
std::vector<std::pair<std::string, std::string>> id_files(
    const std::string &dir) {
  std::vector<std::pair<std::string, std::string>> files;
  DIR *d = opendir(dir.c_str());
  if (d == nullptr)
    return files;
  for (struct dirent *e; (e = readdir(d)) != nullptr;) {
    std::string name = e->d_name;
    if (name.size() > 3 && name.compare(name.size() - 3, 3, ".id") == 0) {
      std::ifstream in(dir + "/" + name, std::ios::binary);
      std::stringstream bytes;
      bytes << in.rdbuf();
      files.emplace_back(name, bytes.str());
    }
  }
  closedir(d);
  return files;
}

// A second hoop_comm_init_env in a job without an address must not read
// the first one's id file.  Rank 0 removes that file only once it is
// through its rendezvous, so ranks quick to start the second communicator
// could find it; here rank 1 copies the file while the first communicator
// forms and puts it back before the second, making that race certain.
TEST(Bootstrap, SecondInitEnvDoesNotReadTheFirstOnesIdFile) {
  char dir_template[] = "/tmp/hoop-initenv-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  std::string dir = dir_template;
  int port = free_port();
  RunOptions opt;
  opt.init = false;
  opt.timeout_s = 60;
  RunResult r = run_ranks(
      3,
      [&dir, port](RankLog &log, hoop_comm_t, int rank, int n) {
        clear_launcher_env();
        setenv("TMPDIR", dir.c_str(), 1);
        set_open_mpi_env(rank, n, "hooptest" + std::to_string(port));
        hoop_config_t cfg = HOOP_CONFIG_INIT;
        cfg.timeout_ms = 5000;
        std::atomic<bool> formed{false};
        std::vector<std::pair<std::string, std::string>> first_files;
        std::thread watcher;
        if (rank == 1)
          watcher = std::thread([&] {
            while (first_files.empty() && !formed.load()) {
              first_files = id_files(dir);
              usleep(200);
            }
          });
        hoop_comm_t a = nullptr, b = nullptr;
        hoop_result_t res = hoop_comm_init_env(&a, &cfg);
        formed = true;
        if (watcher.joinable())
          watcher.join();
        if (res != HOOP_SUCCESS) {
          log.fail("first init_env: %s: %s", hoop_result_name(res),
                   hoop_last_error());
          return;
        }
        expect_working(log, a, rank, n); // rank 0 has removed its file
        if (rank == 1) {
          RANK_EXPECT(log, first_files.size() == 1,
                      "saw %zu id files while the first communicator formed",
                      first_files.size());
          for (const auto &f : first_files) {
            std::ofstream out(dir + "/" + f.first, std::ios::binary);
            out << f.second;
          }
        }
        expect_working(log, a, rank, n); // the old file is back
        if (rank == 0)
          usleep(300000); // the others look for the second id first
        res = hoop_comm_init_env(&b, &cfg);
        if (res != HOOP_SUCCESS) {
          log.fail("second init_env: %s: %s", hoop_result_name(res),
                   hoop_last_error());
        } else {
          RANK_EXPECT(log, a != b, "the same communicator twice");
          int64_t va = 1, vb = rank;
          RANK_EXPECT_OK(log, b, hoop_allreduce(b, &vb, &vb, 1, HOOP_I64,
                                                HOOP_SUM, nullptr));
          RANK_EXPECT_OK(log, a, hoop_allreduce(a, &va, &va, 1, HOOP_I64,
                                                HOOP_SUM, nullptr));
          RANK_EXPECT(log, va == n && vb == n * (n - 1) / 2,
                      "sums %lld and %lld", (long long)va, (long long)vb);
          hoop_comm_destroy(b);
        }
        hoop_comm_destroy(a);
        if (rank == 1) {
          for (const auto &f : first_files)
            unlink((dir + "/" + f.first).c_str());
        }
      },
      opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
  // Rank 0 removed the second id file too.
  EXPECT_TRUE(id_files(dir).empty()) << id_files(dir)[0].first;
  rmdir(dir.c_str());
}

// What srun gives each task of a job step, here one started from a batch
// script (whose ENVIRONMENT=BATCH the step inherits).
TEST(Bootstrap, InitEnvFromSlurmVariables) {
  init_env_case(2, [](int rank, int n, int port) {
    setenv("SLURM_PROCID", std::to_string(rank).c_str(), 1);
    setenv("SLURM_NTASKS", std::to_string(n).c_str(), 1);
    setenv("SLURM_JOB_ID", std::to_string(port).c_str(), 1);
    setenv("SLURM_STEP_ID", "0", 1);
    setenv("SLURM_STEPID", "0", 1);
    setenv("SLURM_STEP_NUM_TASKS", std::to_string(n).c_str(), 1);
    setenv("SLURM_LOCALID", std::to_string(rank).c_str(), 1);
    setenv("SLURM_NODEID", "0", 1);
    setenv("ENVIRONMENT", "BATCH", 1);
  });
}

// sbatch's batch script is one process with the job's SLURM_NTASKS and
// SLURM_PROCID=0 but none of a job step's variables: the program started
// there without srun fails at once, saying so, instead of waiting the whole
// timeout for ranks that will never come.  A one-task job is whole.
TEST(Bootstrap, InitEnvInASlurmBatchScriptWithoutSrunFailsAtOnce) {
  RunResult r = run_alone([](RankLog &log) {
    clear_launcher_env();
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_NTASKS", "2", 1);
    setenv("SLURM_JOB_ID", std::to_string(free_port()).c_str(), 1);
    setenv("SLURM_LOCALID", "0", 1);
    setenv("SLURM_NODEID", "0", 1);
    setenv("ENVIRONMENT", "BATCH", 1);
    hoop_config_t cfg = HOOP_CONFIG_INIT;
    cfg.timeout_ms = 20000;
    hoop_comm_t comm;
    auto start = std::chrono::steady_clock::now();
    hoop_result_t res = hoop_comm_init_env(&comm, &cfg);
    double secs = seconds_since(start);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_USAGE, "got %s: %s",
                hoop_result_name(res), hoop_last_error());
    RANK_EXPECT(log, secs < 2.0, "took %.2f s", secs);
    const char *msg = hoop_last_error();
    RANK_EXPECT(log,
                strstr(msg, "SLURM_NTASKS=2, but only one process of "
                            "the job started; launch with srun") !=
                    nullptr,
                "message: %s", msg);
    setenv("SLURM_NTASKS", "1", 1);
    res = hoop_comm_init_env(&comm, &cfg);
    RANK_EXPECT(log, res == HOOP_SUCCESS, "one task: %s: %s",
                hoop_result_name(res), hoop_last_error());
    if (res == HOOP_SUCCESS) {
      expect_working(log, comm, 0, 1);
      hoop_comm_destroy(comm);
    }
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

TEST(Bootstrap, InitEnvWithoutVariablesSaysWhatIsMissing) {
  RunResult r = run_alone([](RankLog &log) {
    clear_launcher_env();
    hoop_comm_t comm;
    hoop_result_t res = hoop_comm_init_env(&comm, nullptr);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT, "got %s",
                hoop_result_name(res));
    RANK_EXPECT(log, strstr(hoop_last_error(), "HOOP_RANK") != nullptr,
                "message: %s", hoop_last_error());
    setenv("HOOP_RANK", "5", 1);
    setenv("HOOP_WORLD_SIZE", "2", 1);
    res = hoop_comm_init_env(&comm, nullptr);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT,
                "rank >= size: %s", hoop_result_name(res));
    setenv("HOOP_RANK", "0", 1);
    res = hoop_comm_init_env(&comm, nullptr);
    RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT,
                "no address: %s", hoop_result_name(res));
    RANK_EXPECT(log,
                strstr(hoop_last_error(), "HOOP_ROOT_ADDR") != nullptr,
                "message: %s", hoop_last_error());
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

TEST(Bootstrap, InitRankRejectsBadArguments) {
  hoop_unique_id_t id;
  ASSERT_EQ(hoop_get_unique_id(&id), HOOP_SUCCESS);
  hoop_comm_t comm;
  EXPECT_EQ(hoop_comm_init_rank(&comm, 0, &id, 0, nullptr),
            HOOP_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hoop_comm_init_rank(&comm, 2, &id, 2, nullptr),
            HOOP_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hoop_comm_init_rank(&comm, 2, &id, -1, nullptr),
            HOOP_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hoop_comm_init_rank(&comm, 2, nullptr, 0, nullptr),
            HOOP_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hoop_comm_init_rank(nullptr, 2, &id, 0, nullptr),
            HOOP_ERR_INVALID_ARGUMENT);
  hoop_unique_id_t garbage;
  memset(&garbage, 0x5a, sizeof garbage);
  EXPECT_EQ(hoop_comm_init_rank(&comm, 1, &garbage, 0, nullptr),
            HOOP_ERR_INVALID_ARGUMENT);
  EXPECT_NE(strstr(hoop_last_error(), "unique id"), nullptr)
      << hoop_last_error();
  hoop_config_t bad = HOOP_CONFIG_INIT;
  bad.version = 0;
  EXPECT_EQ(hoop_comm_init_rank(&comm, 1, &id, 0, &bad),
            HOOP_ERR_INVALID_ARGUMENT);
  hoop_config_t slices = HOOP_CONFIG_INIT;
  slices.slice_bytes = 10;
  EXPECT_EQ(hoop_comm_init_rank(&comm, 1, &id, 0, &slices),
            HOOP_ERR_INVALID_ARGUMENT);
  EXPECT_NE(strstr(hoop_last_error(), "slice_bytes"), nullptr);
}

TEST(Bootstrap, DisagreeingSizesFailClearly) {
  hoop_unique_id_t id;
  ASSERT_EQ(hoop_get_unique_id(&id), HOOP_SUCCESS);
  RunOptions opt;
  opt.init = false;
  hoop_config_t cfg = HOOP_CONFIG_INIT;
  cfg.timeout_ms = 5000;
  RunResult r = run_ranks(
      2,
      [&id, &cfg](RankLog &log, hoop_comm_t, int rank, int) {
        hoop_comm_t comm;
        // The shared id's rank 0 is the harness's first child.
        hoop_result_t res =
            hoop_comm_init_rank(&comm, rank == 0 ? 2 : 3, &id, rank, &cfg);
        RANK_EXPECT(log, res == HOOP_ERR_MISMATCH, "got %s: %s",
                    hoop_result_name(res), hoop_last_error());
        RANK_EXPECT(log, strstr(hoop_last_error(), "3 ranks") != nullptr,
                    "message: %s", hoop_last_error());
      },
      opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

TEST(Bootstrap, MissingRankTimesOutNamingIt) {
  hoop_unique_id_t id;
  ASSERT_EQ(hoop_get_unique_id(&id), HOOP_SUCCESS);
  RunOptions opt;
  opt.init = false;
  hoop_config_t cfg = HOOP_CONFIG_INIT;
  cfg.timeout_ms = 1500;
  RunResult r = run_ranks(
      2,
      [&id, &cfg](RankLog &log, hoop_comm_t, int rank, int) {
        hoop_comm_t comm;
        // Ranks 0 and 1 of 3 come; rank 2 never does.
        hoop_result_t res = hoop_comm_init_rank(&comm, 3, &id, rank, &cfg);
        RANK_EXPECT(log, res == HOOP_ERR_TIMEOUT, "got %s: %s",
                    hoop_result_name(res), hoop_last_error());
        if (rank == 0)
          RANK_EXPECT(log, strstr(hoop_last_error(), "rank(s) 2 of 3") !=
                               nullptr,
                      "message: %s", hoop_last_error());
      },
      opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
  EXPECT_LT(r.seconds, 6.0);
}

// Connects to 127.0.0.1:port, retrying while nobody listens yet; -1 when
// nobody does within 10 s.
int connect_loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons((uint16_t)port);
  for (int tries = 0; tries < 1000; tries++) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (sockaddr *)&a, sizeof a) == 0)
      return fd;
    close(fd);
    usleep(10000);
  }
  return -1;
}

// Connections to rank 0's rendezvous that never send a whole hello (one
// says nothing, one a few bytes of garbage) must not hold up the ranks: the
// rendezvous once read hellos one connection at a time, so the first such
// connection stalled every rank until the timeout.
TEST(Bootstrap, SilentConnectionsDoNotStallTheRendezvous) {
  const int nranks = 3, strays = 2;
  int port = free_port();
  RunOptions opt;
  opt.init = false;
  opt.timeout_s = 60;
  RunResult r = run_ranks(
      nranks + strays,
      [port](RankLog &log, hoop_comm_t, int rank, int) {
        if (rank >= nranks) {
          int fd = connect_loopback(port);
          RANK_EXPECT(log, fd >= 0, "stray %d could not connect", rank);
          if (fd < 0)
            return;
          if (rank == nranks + 1)
            RANK_EXPECT(log, write(fd, "garbage", 7) == 7, "garbage");
          // Rank 0 closes a stray once the job has formed (or drops it).
          pollfd p = {fd, POLLIN, 0};
          RANK_EXPECT(log, poll(&p, 1, 15000) == 1,
                      "stray %d was never closed", rank);
          close(fd);
          return;
        }
        clear_launcher_env();
        setenv("HOOP_RANK", std::to_string(rank).c_str(), 1);
        setenv("HOOP_WORLD_SIZE", std::to_string(nranks).c_str(), 1);
        setenv("HOOP_ROOT_ADDR",
               ("127.0.0.1:" + std::to_string(port)).c_str(), 1);
        // The strays connect first, so rank 0 accepts them before any rank.
        if (rank > 0)
          usleep(500000);
        hoop_config_t cfg = HOOP_CONFIG_INIT;
        cfg.timeout_ms = 20000;
        auto start = std::chrono::steady_clock::now();
        hoop_comm_t comm;
        hoop_result_t res = hoop_comm_init_env(&comm, &cfg);
        double secs = seconds_since(start);
        if (res != HOOP_SUCCESS) {
          log.fail("init_env: %s: %s", hoop_result_name(res),
                   hoop_last_error());
          return;
        }
        RANK_EXPECT(log, secs < 5.0, "joining took %.1f s", secs);
        expect_working(log, comm, rank, nranks);
        hoop_comm_destroy(comm);
      },
      opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

TEST(Bootstrap, ManyCommunicatorsCreatedAndDestroyed) {
  RunResult r = run_alone([](RankLog &log) {
    for (int i = 0; i < 200; i++) {
      hoop_comm_t comm = comm_alone(log);
      RANK_EXPECT_OK(log, nullptr, hoop_comm_destroy(comm));
    }
    // Nothing leaked: the process has its usual handful of fds.
    int open_fds = 0;
    for (int fd = 0; fd < 1024; fd++)
      open_fds += fcntl(fd, F_GETFD) != -1;
    RANK_EXPECT(log, open_fds < 20, "%d fds open", open_fds);
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

struct IfCase {
  const char *spec, *name;
  int want; // 1 selected, 0 not, -1 not a valid setting
};

// NCCL_SOCKET_IFNAME's forms: prefixes, "=" for whole names, "^" to
// exclude, comma-separated lists; and the settings that are no list.
TEST(SocketIfname, MatcherTakesNcclsForms) {
  const IfCase cases[] = {
      {"eth", "eth0", 1},         {"eth", "eth", 1},
      {"eth", "et", 0},           {"eth", "ens3", 0},
      {"eth0", "eth0.100", 1},    {"eth0,ib", "ib1", 1},
      {"eth0,ib", "eth1", 0},     {"eth0,ib", "eth0", 1},
      {"=eth0", "eth0", 1},       {"=eth0", "eth0.100", 0},
      {"=eth0", "eth", 0},        {"=eth0,eth1", "eth1", 1},
      {"=eth0,eth1", "eth2", 0},  {"^docker,lo", "lo", 0},
      {"^docker,lo", "docker0", 0}, {"^docker,lo", "lo2", 0},
      {"^docker,lo", "eth0", 1},  {"^eth,docker", "lo", 1},
      {"^eth,docker", "eth0", 0}, {"^=docker0", "docker0", 0},
      {"^=docker0", "docker1", 1}, {"^=docker0", "docker", 1},
      {"=^eth", "eth0", 0},       {"=^eth", "^eth", 1},
      {"", "eth0", -1},           {"^", "eth0", -1},
      {"=", "eth0", -1},          {"^=", "eth0", -1},
      {"eth,,lo", "lo", -1},      {",eth", "eth0", -1},
      {"eth,", "eth0", -1},       {"^=eth0,", "lo", -1},
  };
  for (const IfCase &c : cases) {
    const char *why = nullptr;
    EXPECT_EQ(hoop__iface_match(c.spec, c.name, &why), c.want)
        << "spec \"" << c.spec << "\", interface " << c.name;
    if (c.want < 0) {
      EXPECT_NE(why, nullptr) << c.spec;
    }
  }
}

// The interfaces of this host with an IPv4 address, lo first if present.
std::vector<std::string> ipv4_interfaces() {
  std::vector<std::string> names;
  ifaddrs *list;
  if (getifaddrs(&list) != 0)
    return names;
  for (ifaddrs *ifa = list; ifa != nullptr; ifa = ifa->ifa_next)
    if (ifa->ifa_addr != nullptr && ifa->ifa_addr->sa_family == AF_INET)
      names.push_back(ifa->ifa_name);
  freeifaddrs(list);
  return names;
}

// "^=a,b,c": every interface of this host but lo excluded, which leaves
// loopback (on this machine "^eth,docker" does the same); or every one,
// which leaves nothing.  "hoop-none" keeps the list from being empty.
std::string exclude_all(bool but_loopback) {
  std::set<std::string> names;
  ifaddrs *list;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs *ifa = list; ifa != nullptr; ifa = ifa->ifa_next)
      if (!but_loopback || std::string(ifa->ifa_name) != "lo")
        names.insert(ifa->ifa_name);
    freeifaddrs(list);
  }
  std::string spec = "^=hoop-none";
  for (const std::string &n : names)
    spec += "," + n;
  return spec;
}

std::string job(const std::string &env, int n) {
  return "env -u HOOP_TRANSPORT -u HOOP_ALGO -u HOOP_SOCKET_IFNAME " + env +
         " " + HOOP_RUN_PATH + " -n " + std::to_string(n) + " " +
         HOOP_EXAMPLE_PATH;
}

size_t count_of(const std::string &text, const std::string &what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1))
    n++;
  return n;
}

std::string read_file(const std::string &path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Each form that selects loopback here carries a whole job, every rank
// saying (at INFO) that the setting chose lo.
TEST(SocketIfname, JobsRunOverTheInterfaceItSelects) {
  std::vector<std::string> v4 = ipv4_interfaces();
  ASSERT_NE(std::find(v4.begin(), v4.end(), "lo"), v4.end())
      << "this host has no lo with an IPv4 address";
  for (const std::string &spec : {std::string("lo"), std::string("=lo"),
                                  std::string("lo,hoop-none"),
                                  exclude_all(true)}) {
    Output out = run_shell(job("HOOP_DEBUG=INFO HOOP_SOCKET_IFNAME='" + spec +
                                   "'",
                               3));
    EXPECT_EQ(out.status, 0) << spec << ": " << out.text;
    EXPECT_EQ(count_of(out.text, "(correct)"), 3u) << spec << out.text;
    EXPECT_EQ(count_of(out.text, "HOOP_SOCKET_IFNAME chose lo 127.0.0.1"),
              3u)
        << spec << ": " << out.text;
    EXPECT_NE(out.text.find("listening on lo 127.0.0.1:"), std::string::npos)
        << spec << ": " << out.text;
  }
}

// A setting that selects nothing, or is no list, stops every rank at once
// with a message that names the variable and lists what this host has.
TEST(SocketIfname, BadSettingFailsFastNamingTheVariable) {
  const std::string everything = exclude_all(false);
  const std::pair<std::string, std::string> cases[] = {
      {"hoop-none", "HOOP_SOCKET_IFNAME=hoop-none: no interface matches"},
      {"=l", "HOOP_SOCKET_IFNAME==l: no interface matches"},
      {everything, "HOOP_SOCKET_IFNAME=" + everything +
                       ": no interface matches"},
      {"eth,,lo", "HOOP_SOCKET_IFNAME=eth,,lo has an empty entry"},
      {"^", "HOOP_SOCKET_IFNAME=^ names no interface"},
  };
  for (const auto &[spec, says] : cases) {
    auto start = std::chrono::steady_clock::now();
    Output out = run_shell(job(std::string("HOOP_TIMEOUT_MS=60000 "
                                           "HOOP_SOCKET_IFNAME='") +
                                   spec + "'",
                               3));
    double secs = seconds_since(start);
    EXPECT_NE(out.status, 0) << spec << ": " << out.text;
    EXPECT_LT(secs, 10.0) << spec << ": " << out.text;
    EXPECT_NE(out.text.find(says), std::string::npos)
        << spec << ": " << out.text;
    if (says.find("no interface matches") != std::string::npos) {
      EXPECT_NE(out.text.find("interfaces here: "), std::string::npos)
          << out.text;
    }
  }
  Output out = run_shell(job("HOOP_SOCKET_IFNAME=hoop-none", 2));
  EXPECT_NE(out.text.find("lo 127.0.0.1"), std::string::npos) << out.text;
}

// Under mpirun or srun rank 0 publishes an id the others wait for; a bad
// setting must stop those others too, not only rank 0.
TEST(SocketIfname, BadSettingStopsRanksWaitingForTheIdFile) {
  int port = free_port();
  RunOptions opt;
  opt.init = false;
  hoop_config_t cfg = HOOP_CONFIG_INIT;
  cfg.timeout_ms = 20000;
  RunResult r = run_ranks(
      2,
      [port, &cfg](RankLog &log, hoop_comm_t, int rank, int n) {
        clear_launcher_env();
        set_open_mpi_env(rank, n, "hoopif" + std::to_string(port));
        setenv("HOOP_SOCKET_IFNAME", "hoop-none", 1);
        hoop_comm_t comm;
        hoop_result_t res = hoop_comm_init_env(&comm, &cfg);
        RANK_EXPECT(log, res == HOOP_ERR_INVALID_ARGUMENT, "got %s: %s",
                    hoop_result_name(res), hoop_last_error());
        RANK_EXPECT(log,
                    strstr(hoop_last_error(),
                           "HOOP_SOCKET_IFNAME=hoop-none") != nullptr,
                    "message: %s", hoop_last_error());
      },
      opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
  EXPECT_LT(r.seconds, 5.0);
}

// Under mpirun or srun, a config's socket_ifname must decide rank 0's id
// as well as every rank's listener: an environment setting that selects
// nothing once stopped rank 0 in making its id while rank 1 waited the
// whole timeout for the id file.  Each rank's INFO log must show the
// config's choice.
TEST(SocketIfname, ConfigFieldOverridesTheVariableUnderInitEnv) {
  int port = free_port();
  RunOptions opt;
  opt.init = false;
  hoop_config_t cfg = HOOP_CONFIG_INIT;
  cfg.timeout_ms = 20000;
  cfg.socket_ifname = "lo";
  RunResult r = run_ranks(
      2,
      [port, &cfg](RankLog &log, hoop_comm_t, int rank, int n) {
        clear_launcher_env();
        set_open_mpi_env(rank, n, "hoopcf" + std::to_string(port));
        setenv("HOOP_SOCKET_IFNAME", "hoop-none", 1);
        setenv("HOOP_DEBUG", "INFO", 1);
        hoop__log_level_init();
        // The log goes to stderr; a file catches it, and stderr comes back
        // before anything is reported.
        std::string path = "/tmp/hoop-ifname-" + std::to_string(getpid());
        fflush(stderr);
        int saved = dup(2);
        int fd = open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
        dup2(fd, 2);
        close(fd);
        hoop_comm_t comm = nullptr;
        hoop_result_t res = hoop_comm_init_env(&comm, &cfg);
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        std::string text = read_file(path);
        unlink(path.c_str());
        RANK_EXPECT(log, res == HOOP_SUCCESS, "got %s: %s",
                    hoop_result_name(res), hoop_last_error());
        if (res != HOOP_SUCCESS)
          return;
        RANK_EXPECT(log,
                    text.find("hoop_config_t.socket_ifname chose lo "
                              "127.0.0.1") != std::string::npos,
                    "log: %s", text.c_str());
        expect_working(log, comm, rank, n);
        hoop_comm_destroy(comm);
      },
      opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
  EXPECT_LT(r.seconds, 15.0);
}

// hoop_config_t's socket_ifname takes the same forms and overrides the
// variable; its messages name the field.
TEST(SocketIfname, ConfigFieldTakesTheSameForms) {
  hoop_unique_id_t id;
  ASSERT_EQ(hoop_get_unique_id(&id), HOOP_SUCCESS);
  hoop_comm_t comm;
  hoop_config_t cfg = HOOP_CONFIG_INIT;
  cfg.socket_ifname = "=lo";
  ASSERT_EQ(hoop_comm_init_rank(&comm, 1, &id, 0, &cfg), HOOP_SUCCESS)
      << hoop_last_error();
  EXPECT_EQ(hoop_comm_destroy(comm), HOOP_SUCCESS);
  ASSERT_EQ(hoop_get_unique_id(&id), HOOP_SUCCESS);
  cfg.socket_ifname = "eth,,lo";
  EXPECT_EQ(hoop_comm_init_rank(&comm, 1, &id, 0, &cfg),
            HOOP_ERR_INVALID_ARGUMENT);
  EXPECT_NE(strstr(hoop_last_error(),
                   "hoop_config_t.socket_ifname=eth,,lo has an empty entry"),
            nullptr)
      << hoop_last_error();
  const std::string everything = exclude_all(false);
  cfg.socket_ifname = everything.c_str();
  EXPECT_EQ(hoop_comm_init_rank(&comm, 1, &id, 0, &cfg),
            HOOP_ERR_INVALID_ARGUMENT);
  EXPECT_NE(strstr(hoop_last_error(), "no interface matches"), nullptr)
      << hoop_last_error();
}

// hoop_comm_get_algo reads back the setting a communicator starts with
// (HOOP_ALGO's) and then what hoop_comm_set_algo made it.
TEST(Bootstrap, AlgorithmSettingReadsBack) {
  RunResult r = run_alone([](RankLog &log) {
    setenv("HOOP_ALGO", "tree", 1);
    hoop_comm_t comm = comm_alone(log);
    hoop_algo_t algo = HOOP_ALGO_COUNT;
    RANK_EXPECT_OK(log, comm, hoop_comm_get_algo(comm, &algo));
    RANK_EXPECT(log, algo == HOOP_ALGO_TREE, "got %s",
                hoop_algo_name(algo));
    RANK_EXPECT_OK(log, comm, hoop_comm_set_algo(comm, HOOP_ALGO_PS));
    RANK_EXPECT_OK(log, comm, hoop_comm_get_algo(comm, &algo));
    RANK_EXPECT(log, algo == HOOP_ALGO_PS, "got %s",
                hoop_algo_name(algo));
    RANK_EXPECT(log,
                hoop_comm_get_algo(comm, nullptr) ==
                    HOOP_ERR_INVALID_ARGUMENT,
                "NULL accepted");
    hoop_comm_destroy(comm);
    RANK_EXPECT(log,
                hoop_comm_get_algo(comm, &algo) ==
                    HOOP_ERR_INVALID_USAGE,
                "a destroyed communicator answered");
  });
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

// The largest data cache of cpu0 as sysfs lists it, 0 if none is listed:
// the default size from which calls bypass the caches is half of it over
// the ranks on this machine.
size_t sysfs_last_level_cache() {
  size_t best = 0;
  for (int i = 0;; i++) {
    std::string dir =
        "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i);
    std::ifstream type_file(dir + "/type"), size_file(dir + "/size");
    std::string type, size;
    if (!(type_file >> type))
      return best;
    if (type == "Instruction" || !(size_file >> size))
      continue;
    size_t value = std::stoul(size);
    char unit = size.back();
    value <<= unit == 'K' ? 10 : unit == 'M' ? 20 : unit == 'G' ? 30 : 0;
    best = std::max(best, value);
  }
}

// Rank 0's INFO banner: one line with hoop's version, the transports to
// peers on its host and on others, where device buffers will go, the
// algorithm setting with where it came from, and from what size calls
// bypass the caches, and why.  Other ranks print none, and below INFO
// nobody does.
TEST(Banner, RankZeroSaysVersionTransportsAndAlgorithm) {
  const std::string head =
      std::string("INFO hoop ") + HOOP_VERSION_STRING + ": communicator ";
  Output out =
      run_shell(job("HOOP_DEBUG=INFO HOOP_ALGO=tree HOOP_COLD_BYTES=3M", 3));
  ASSERT_EQ(out.status, 0) << out.text;
  ASSERT_EQ(count_of(out.text, head), 1u) << out.text;
  std::string line = out.text.substr(out.text.find(head));
  line = line.substr(0, line.find('\n'));
  size_t start = out.text.rfind('\n', out.text.find(head));
  start = start == std::string::npos ? 0 : start + 1;
  EXPECT_EQ(out.text.compare(start, 4, "[0] "), 0) << out.text;
  for (const char *part :
       {", 3 ranks; transports from rank 0: this host shm x2, other hosts "
        "none; device buffers: ",
        HOOP_HAVE_CUDA ? "cuda_ipc, or staged" : "none (built without CUDA)",
        "; algorithm tree (HOOP_ALGO); calls from 3145728 bytes bypass the "
        "caches (HOOP_COLD_BYTES); listening on 127.0.0.1:"})
    EXPECT_NE(line.find(part), std::string::npos) << part << "\n" << line;

  out = run_shell(job("HOOP_DEBUG=INFO HOOP_TRANSPORT=tcp", 2));
  ASSERT_EQ(out.status, 0) << out.text;
  ASSERT_EQ(count_of(out.text, head), 1u) << out.text;
  line = out.text.substr(out.text.find(head));
  line = line.substr(0, line.find('\n'));
  for (const char *part :
       {"this host tcp x1, other hosts none (HOOP_TRANSPORT=tcp)",
        HOOP_HAVE_CUDA ? "device buffers: staged through host memory"
                       : "device buffers: none (built without CUDA)",
        "algorithm auto (default)"})
    EXPECT_NE(line.find(part), std::string::npos) << part << "\n" << line;
  size_t llc = sysfs_last_level_cache();
  std::string cold =
      llc > 0 ? "calls from " + std::to_string(llc / 4) +
                    " bytes bypass the caches (the last-level cache over "
                    "twice this machine's ranks)"
              : std::string("calls from 4194304 bytes bypass the caches "
                            "(cache size unknown)");
  EXPECT_NE(line.find(cold), std::string::npos) << cold << "\n" << line;

  out = run_shell(job("HOOP_DEBUG=WARN", 2));
  ASSERT_EQ(out.status, 0) << out.text;
  EXPECT_EQ(count_of(out.text, head), 0u) << out.text;
}

} // namespace
