/* hoop-bench -C broadcast: every rank gets the root's buffer. */
#include "bench.h"

static hoop_result_t run(const struct bench_call *c) {
  return hoop_broadcast(c->comm, c->send, c->recv, c->count, c->dtype,
                        c->root, c->stream);
}

static size_t result_elems(const struct bench_ref *ref) { return ref->count; }

static double expected(const struct bench_ref *ref, size_t i) {
  return bench_input(ref, ref->root, i);
}

const struct bench_coll bench_broadcast = {
    .name = "broadcast",
    .kind = HOOP_COLL_BROADCAST,
    .rooted = 1,
    .in_place = 1,
    .algos = BENCH_ALGO(HOOP_ALGO_AUTO) | BENCH_ALGO(HOOP_ALGO_RING) |
             BENCH_ALGO(HOOP_ALGO_TREE),
    .bus_factor = bench_factor_one,
    .bus_factor_text = "1",
    .layout = bench_layout_whole,
    .run = run,
    .result_elems = result_elems,
    .expected = expected,
    .model_bytes = bench_model_chain_or_tree,
};
