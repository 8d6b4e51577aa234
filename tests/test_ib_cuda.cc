// Device buffers over the ib transport: calls staged through pinned host
// memory (collectives/device_staged.c) and carried by ib's host
// collectives, against reference.h.  On the fake verbs (fake_verbs.h) the
// ranks are threads of one forked child sharing the one GPU, so a machine
// with a GPU and no RDMA device runs them; one case runs on the real verbs,
// with 2 forked ranks, where the machine also has an RDMA port that is
// ACTIVE.  Each case skips, naming what the machine lacks.
//
// Threads of one process share one CUDA context, in which a call that
// synchronises the device (cudaFree) or the legacy default stream
// (cudaMemset, cudaMemcpy) would wait for a peer's queued call, which may
// be waiting for this rank's next call.  So every rank allocates before
// any rank's first device call, moves its data only on its own
// non-blocking stream, and frees after a barrier behind every rank's last.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include "coll_check.h"
#include "fake_ib_ranks.h"
#include "gpu_probe.h"
#include "harness.h"
#include "reference.h"

extern "C" {
#include "transport/rdma.h"
}

using namespace hooptest;

namespace {

// About 3 MB of floats: more than ib's FIFO ring (8 slots of 256 KiB), and
// divisible by neither rank count.
const size_t kLarge = 3 * 1024 * 1024 / 4 + 1;
const size_t kCounts[] = {1, 1001, kLarge};

// Elements per rank's block in the calls that split or gather: the small
// counts as they are, the large one shared out so that the whole buffer
// stays about 3 MB.
size_t block_of(size_t count, int nranks) {
  return count == kLarge ? count / (size_t)nranks : count;
}

bool cuda_ok(RankLog &log, cudaError_t e, const std::string &what) {
  if (e != cudaSuccess)
    log.fail("%s: %s", what.c_str(), cudaGetErrorString(e));
  return e == cudaSuccess;
}

// One rank's stream and memory for all its calls: two device buffers of
// kLarge floats with room for a guard element on each side, and pinned
// host images, so that every copy is queued on the rank's stream like any
// other work (one to or from pageable memory goes through the driver's
// own staging, and may wait on more than its stream).
struct RankDevice {
  static const size_t kBytes = (kLarge + 2) * sizeof(float);
  cudaStream_t stream = nullptr;
  float *send = nullptr, *recv = nullptr; // a call's data from [1]
  float *host_in = nullptr, *host_out = nullptr;
  float *host_guards = nullptr; // the 4 guard elements a call copies out

  bool open(RankLog &log) {
    return cuda_ok(log, cudaSetDevice(0), "cudaSetDevice") &&
           cuda_ok(log,
                   cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                   "cudaStreamCreateWithFlags") &&
           cuda_ok(log, cudaMalloc((void **)&send, kBytes), "cudaMalloc") &&
           cuda_ok(log, cudaMalloc((void **)&recv, kBytes), "cudaMalloc") &&
           cuda_ok(log, cudaMallocHost((void **)&host_in, kBytes),
                   "cudaMallocHost") &&
           cuda_ok(log, cudaMallocHost((void **)&host_out, kBytes),
                   "cudaMallocHost") &&
           cuda_ok(log,
                   cudaMallocHost((void **)&host_guards, 4 * sizeof(float)),
                   "cudaMallocHost");
  }
  ~RankDevice() {
    cudaFreeHost(host_guards);
    cudaFreeHost(host_out);
    cudaFreeHost(host_in);
    cudaFree(recv);
    cudaFree(send);
    if (stream != nullptr)
      cudaStreamDestroy(stream);
  }
};

struct Call {
  Coll coll;
  size_t count; // allgather, reduce_scatter: one rank's block
  bool in_place;
  int root;
  uint64_t seed;
};

// One float-sum call on device buffers, its input copied in on the rank's
// stream just before it, its result and guards copied out just after.
void device_call(RankLog &log, hoop_comm_t comm, RankDevice &d, int rank,
                 int nranks, const Call &c) {
  const size_t esz = sizeof(float);
  size_t total = coll_blocks(c.coll) ? c.count * (size_t)nranks : c.count;
  std::string what = std::string(coll_name(c.coll)) + " of " +
                     std::to_string(c.count) +
                     (c.in_place ? " in place" : " out of place");
  Placement p = place(c.coll, c.in_place, (char *)(d.send + 1),
                      (char *)(d.recv + 1), esz, c.count, total, rank);
  fill_input(d.host_in, HOOP_F32, HOOP_SUM, c.seed, rank, p.in_first,
             p.in_n);
  if (!cuda_ok(log,
               cudaMemsetAsync(d.send, kCanary, (total + 2) * esz, d.stream),
               what + ": cudaMemsetAsync") ||
      !cuda_ok(log,
               cudaMemsetAsync(d.recv, kCanary, (total + 2) * esz, d.stream),
               what + ": cudaMemsetAsync") ||
      !cuda_ok(log,
               cudaMemcpyAsync(p.in, d.host_in, p.in_n * esz,
                               cudaMemcpyHostToDevice, d.stream),
               what + ": copying the input in"))
    return;
  hoop_result_t res = call_coll(comm, c.coll, p.in, p.out, c.count, HOOP_F32,
                                HOOP_SUM, c.root, d.stream);
  if (res != HOOP_SUCCESS) {
    log.fail("%s: %s: %s", what.c_str(), hoop_result_name(res),
             hoop_comm_last_error(comm));
    return;
  }
  // The guards bracket what each buffer holds in this call.
  size_t send_n = c.coll == Coll::AllGather ? c.count : total;
  size_t recv_n = c.coll == Coll::ReduceScatter ? c.count : total;
  const float *guards[] = {d.send, d.send + send_n + 1, d.recv,
                           d.recv + recv_n + 1};
  cudaError_t e = cudaMemcpyAsync(d.host_out, p.out, recv_n * esz,
                                  cudaMemcpyDeviceToHost, d.stream);
  for (int g = 0; g < 4 && e == cudaSuccess; g++)
    e = cudaMemcpyAsync(d.host_guards + g, guards[g], esz,
                        cudaMemcpyDeviceToHost, d.stream);
  if (e == cudaSuccess)
    e = cudaStreamSynchronize(d.stream);
  if (!cuda_ok(log, e, what + ": copying the result out"))
    return;
  if (!check_output(log, comm, what, (const char *)d.host_out,
                    {c.coll, HOOP_F32, HOOP_SUM, c.count, c.root, c.seed},
                    rank, nranks))
    return;
  const unsigned char *g = (const unsigned char *)d.host_guards;
  for (size_t b = 0; b < 4 * esz; b++) {
    if (g[b] != kCanary) {
      log.fail("%s: wrote outside its device buffer", what.c_str());
      break;
    }
  }
}

// Every call of `colls` at every count, in place and out of place, on
// device buffers; then the path they took must have been staging, the
// only one a forced host transport leaves.
void device_calls(RankLog &log, hoop_comm_t comm, int rank, int nranks,
                  const std::vector<Coll> &colls) {
  RankDevice d;
  if (!d.open(log))
    return;
  // No rank allocates once any has queued a call (see the top).
  RANK_EXPECT_OK(log, comm, hoop_barrier(comm));
  uint64_t seed = 1;
  for (Coll coll : colls) {
    for (size_t count : kCounts) {
      size_t n = coll_blocks(coll) ? block_of(count, nranks) : count;
      for (bool in_place : {false, true}) {
        device_call(log, comm, d, rank, nranks,
                    {coll, n, in_place, (int)(seed % (uint64_t)nranks), seed});
        seed++;
      }
    }
  }
  const char *path = nullptr;
  RANK_EXPECT_OK(log, comm, hoop_comm_device_path(comm, &path));
  RANK_EXPECT(log, path != nullptr && strcmp(path, "staged") == 0,
              "device calls went %s, expected staged",
              path != nullptr ? path : "(null)");
  // Nor frees while a peer's calls are still queued.
  RANK_EXPECT_OK(log, comm, hoop_barrier(comm));
}

struct Kind {
  const char *name;
  Coll coll;
};

const Kind kKinds[] = {
    {"AllreduceSumF32", Coll::AllReduce},
    {"BroadcastF32", Coll::Broadcast},
    {"AllgatherF32", Coll::AllGather},
    {"ReduceScatterSumF32", Coll::ReduceScatter},
};

class IbCuda : public ::testing::TestWithParam<std::tuple<int, size_t>> {};

// Counts 1, 1001 and about 3 MB, in place and not, with staging chunks
// of 1 MiB so that the large calls take several, two in flight at once.
TEST_P(IbCuda, DeviceBuffersOverFakeVerbsMatchTheReference) {
  REQUIRE_GPU();
  int nranks = std::get<0>(GetParam());
  Coll coll = kKinds[std::get<1>(GetParam())].coll;
  IbRun run;
  // Each rank's calls use three streams (its own and the staged path's
  // two), whose waits hold the hardware queue they are on; with more
  // streams than queues (8 by default) a wait could hold another rank's
  // copy queued behind it.
  run.env = {{"CUDA_DEVICE_MAX_CONNECTIONS", "32"},
             {"HOOP_CUDA_CHUNK_BYTES", "1048576"}};
  run_ib(
      nranks,
      [coll](RankLog &log, hoop_comm_t &comm, int rank, int n) {
        device_calls(log, comm, rank, n, {coll});
      },
      run);
}

INSTANTIATE_TEST_SUITE_P(
    Fake, IbCuda,
    ::testing::Combine(::testing::Values(2, 3),
                       ::testing::Range<size_t>(0, std::size(kKinds))),
    [](const ::testing::TestParamInfo<std::tuple<int, size_t>> &param) {
      return std::string(kKinds[std::get<1>(param.param)].name) + "_" +
             std::to_string(std::get<0>(param.param)) + "ranks";
    });

// Empty when this machine has an RDMA port that is ACTIVE, else what it
// has instead.  Asked in a child, so that no device is open in this
// process when it forks the ranks.
const std::string &active_port_missing() {
  static std::string why = ask_in_child([] {
    hoop_rdma_local_port *ports = nullptr;
    int n = 0;
    char text[400] = "";
    if (!hoop__rdma_discover(&ports, &n, text, sizeof text))
      return std::string("discovery failed: ") + text;
    std::string seen;
    for (int i = 0; i < n; i++) {
      if (ports[i].state == HOOP_PORT_ACTIVE) {
        free(ports);
        return std::string();
      }
      seen += std::string(i > 0 ? ", " : "") + ports[i].device + ":" +
              std::to_string(ports[i].port) + " is " +
              hoop__rdma_state_name(ports[i].state);
    }
    free(ports);
    return n == 0 ? std::string("no RDMA device: ") + text
                  : "no ACTIVE RDMA port (" + seen + ")";
  });
  return why;
}

// The real verbs: 2 ranks as processes on this machine's GPU and RDMA
// port, HOOP_TRANSPORT=ib, device all-reduces against the reference.
TEST(IbCudaVerbs, DeviceAllreduceOnTwoForkedRanks) {
  std::string missing;
  if (!gpu_missing().empty())
    missing = "a GPU (" + gpu_missing() + ")";
  if (!active_port_missing().empty())
    missing += (missing.empty() ? "" : " and ") +
               std::string("an RDMA device with an ACTIVE port (") +
               active_port_missing() + ")";
  if (!missing.empty())
    GTEST_SKIP() << "needs " << missing;
  hoop_unique_id_t id;
  ASSERT_EQ(hoop_get_unique_id(&id), HOOP_SUCCESS) << hoop_last_error();
  RunOptions opt;
  opt.init = false;
  RunResult r = run_ranks(
      2,
      [&id](RankLog &log, hoop_comm_t, int rank, int nranks) {
        setenv("HOOP_TRANSPORT", "ib", 1);
        hoop_comm_t comm = nullptr;
        hoop_result_t res =
            hoop_comm_init_rank(&comm, nranks, &id, rank, nullptr);
        if (res != HOOP_SUCCESS) {
          log.fail("init: %s: %s", hoop_result_name(res), hoop_last_error());
          return;
        }
        const char *name = "";
        hoop_comm_transport(comm, 0, 1, &name);
        RANK_EXPECT(log, strcmp(name, "ib") == 0, "transport %s", name);
        device_calls(log, comm, rank, nranks, {Coll::AllReduce});
        hoop_comm_destroy(comm);
      },
      opt);
  hoop_unique_id_release(&id);
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

} // namespace
