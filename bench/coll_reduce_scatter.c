/*
 * hoop-bench -C reducescatter: rank r gets block r of the reduction.  As
 * in nccl-tests the size is the whole input array (count x N elements,
 * rounded down to a multiple of N) and the count column is per rank.
 */
#include "bench.h"

static void layout(size_t elems, int rank, int n, size_t esz,
                   struct bench_layout *out) {
  size_t per = elems / (size_t)n;
  *out = (struct bench_layout){
      .count = per,
      .send_elems = per * (size_t)n,
      .recv_elems = per,
      .bytes = per * (size_t)n * esz,
      .in_place_recv_off = (size_t)rank * per,
  };
}

static hoop_result_t run(const struct bench_call *c) {
  return hoop_reduce_scatter(c->comm, c->send, c->recv, c->count, c->dtype,
                             c->op, c->stream);
}

static size_t result_elems(const struct bench_ref *ref) { return ref->count; }

static double expected(const struct bench_ref *ref, size_t i) {
  return bench_reduced(ref, (size_t)ref->rank * ref->count + i);
}

const struct bench_coll bench_reduce_scatter = {
    .name = "reducescatter",
    .kind = HOOP_COLL_REDUCE_SCATTER,
    .reduces = 1,
    .in_place = 1,
    .algos = BENCH_ALGO(HOOP_ALGO_AUTO) | BENCH_ALGO(HOOP_ALGO_RING) |
             BENCH_ALGO(HOOP_ALGO_HIER),
    .bus_factor = bench_factor_spread,
    .bus_factor_text = "(N-1)/N",
    .layout = layout,
    .run = run,
    .result_elems = result_elems,
    .expected = expected,
    .model_bytes = bench_model_spread,
};
