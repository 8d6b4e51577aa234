// Ranks as threads of one forked child that talks HOOP_TRANSPORT=ib over
// the fake verbs (fake_verbs.h): what test_ib_fake.cc and the CUDA cases
// over ib in test_ib_cuda.cc share.
#ifndef HOOP_TESTS_FAKE_IB_RANKS_H
#define HOOP_TESTS_FAKE_IB_RANKS_H

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "fake_verbs.h"
#include "harness.h"

extern "C" {
#include "transport/ib.h"
}

namespace hooptest {

// A rank that frees its communicator itself (hoop_comm_abort) sets comm
// to nullptr.
using IbRankFn =
    std::function<void(RankLog &log, hoop_comm_t &comm, int rank, int nranks)>;

struct IbRun {
  // Set in the child before hoop (or CUDA) reads them.
  std::vector<std::pair<const char *, const char *>> env;
  std::function<void()> beside; // on the child's main thread meanwhile
  int timeout_s = 240;
};

// Runs fn as nranks ranks, threads of one forked child that talks ib
// over the fake, each thread calling hoop_comm_init_rank; in a child
// because hoop reads its environment once per process.  Every endpoint
// and region they made must be gone once every rank destroyed its
// communicator.
inline void run_ib(int nranks, const IbRankFn &fn, const IbRun &run = IbRun()) {
  RunOptions opt;
  opt.init = false;
  opt.timeout_s = run.timeout_s;
  RunResult r = run_ranks(
      1,
      [&](RankLog &log, hoop_comm_t, int, int) {
        for (const auto &e : run.env)
          setenv(e.first, e.second, 1);
        setenv("HOOP_TRANSPORT", "ib", 1);
        hoop__ib_set_verbs(fake_verbs());
        hoop__rdma_set_discover(fake_discover);
        size_t eps = fake_verbs_endpoints();
        size_t regions = fake_verbs_regions();
        hoop_unique_id_t id;
        if (hoop_get_unique_id(&id) != HOOP_SUCCESS) {
          log.fail("hoop_get_unique_id: %s", hoop_last_error());
          return;
        }
        std::vector<int> failed((size_t)nranks, 0);
        std::vector<std::thread> ranks;
        for (int rank = 0; rank < nranks; rank++) {
          ranks.emplace_back([&, rank] {
            fake_verbs_tag_thread(rank);
            RankLog mine(rank);
            hoop_comm_t comm = nullptr;
            hoop_result_t res =
                hoop_comm_init_rank(&comm, nranks, &id, rank, nullptr);
            if (res != HOOP_SUCCESS) {
              mine.fail("init: %s: %s", hoop_result_name(res),
                        hoop_last_error());
              failed[(size_t)rank] = 1;
              return;
            }
            const char *name = "";
            hoop_comm_transport(comm, rank, (rank + 1) % nranks, &name);
            RANK_EXPECT(mine, nranks == 1 || strcmp(name, "ib") == 0,
                        "transport %s", name);
            fn(mine, comm, rank, nranks);
            if (comm != nullptr)
              hoop_comm_destroy(comm);
            failed[(size_t)rank] = !mine.ok();
          });
        }
        if (run.beside)
          run.beside();
        for (std::thread &t : ranks)
          t.join();
        for (int rank = 0; rank < nranks; rank++)
          if (failed[(size_t)rank])
            log.fail("rank %d failed", rank);
        if (fake_verbs_endpoints() != eps || fake_verbs_regions() != regions)
          log.fail("left open: %zu endpoints, %zu memory regions",
                   fake_verbs_endpoints() - eps,
                   fake_verbs_regions() - regions);
      },
      opt);
  EXPECT_TRUE(r.all_ok()) << describe(r);
}

} // namespace hooptest

#endif // HOOP_TESTS_FAKE_IB_RANKS_H
