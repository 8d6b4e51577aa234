/*
 * hoop-bench -C allgather: every rank gets every rank's block.  As in
 * nccl-tests the size is the whole output array (count x N elements,
 * rounded down to a multiple of N) and the count column is per rank.
 */
#include "bench.h"

static void layout(size_t elems, int rank, int n, size_t esz,
                   struct bench_layout *out) {
  size_t per = elems / (size_t)n;
  *out = (struct bench_layout){
      .count = per,
      .send_elems = per,
      .recv_elems = per * (size_t)n,
      .bytes = per * (size_t)n * esz,
      .in_place_send_off = (size_t)rank * per,
  };
}

static hoop_result_t run(const struct bench_call *c) {
  return hoop_allgather(c->comm, c->send, c->recv, c->count, c->dtype,
                        c->stream);
}

/* Block p is rank p's input. */
static double expected(const struct bench_ref *ref, size_t i) {
  return bench_input(ref, (int)(i / ref->count), i % ref->count);
}

const struct bench_coll bench_allgather = {
    .name = "allgather",
    .kind = HOOP_COLL_ALLGATHER,
    .in_place = 1,
    .algos = BENCH_ALGO(HOOP_ALGO_AUTO) | BENCH_ALGO(HOOP_ALGO_RING) |
             BENCH_ALGO(HOOP_ALGO_HIER),
    .bus_factor = bench_factor_spread,
    .bus_factor_text = "(N-1)/N",
    .layout = layout,
    .run = run,
    .result_elems = bench_result_blocks,
    .expected = expected,
    .model_bytes = bench_model_spread,
};
