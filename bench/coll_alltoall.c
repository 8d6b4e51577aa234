/*
 * hoop-bench -C alltoall: block p of rank r's input lands in block r of
 * rank p's output.  As in nccl-tests the size is one rank's whole array
 * (count x N elements, rounded down to a multiple of N) and the count
 * column is one block.  hoop_alltoall has no in-place form (nccl-tests
 * does not check one either), so those columns read N/A.
 */
#include "bench.h"

static void layout(size_t elems, int rank, int n, size_t esz,
                   struct bench_layout *out) {
  size_t per = elems / (size_t)n;
  *out = (struct bench_layout){
      .count = per,
      .send_elems = per * (size_t)n,
      .recv_elems = per * (size_t)n,
      .bytes = per * (size_t)n * esz,
  };
}

static hoop_result_t run(const struct bench_call *c) {
  return hoop_alltoall(c->comm, c->send, c->recv, c->count, c->dtype,
                        c->stream);
}

/* Block p came from rank p, which sent its block number `rank`. */
static double expected(const struct bench_ref *ref, size_t i) {
  size_t p = i / ref->count;
  return bench_input(ref, (int)p,
                     (size_t)ref->rank * ref->count + i % ref->count);
}

const struct bench_coll bench_alltoall = {
    .name = "alltoall",
    .kind = HOOP_COLL_ALLTOALL,
    .algos = BENCH_ALGO(HOOP_ALGO_AUTO),
    .bus_factor = bench_factor_spread,
    .bus_factor_text = "(N-1)/N",
    .layout = layout,
    .run = run,
    .result_elems = bench_result_blocks,
    .expected = expected,
    .model_bytes = bench_model_spread,
};
