/* hoop-bench -C reduce: the root gets the reduction of all inputs. */
#include "bench.h"

static hoop_result_t run(const struct bench_call *c) {
  return hoop_reduce(c->comm, c->send, c->recv, c->count, c->dtype, c->op,
                     c->root, c->stream);
}

/* Only the root's buffer is written; the others have nothing to check. */
static size_t result_elems(const struct bench_ref *ref) {
  return ref->rank == ref->root ? ref->count : 0;
}

static double expected(const struct bench_ref *ref, size_t i) {
  return bench_reduced(ref, i);
}

const struct bench_coll bench_reduce = {
    .name = "reduce",
    .kind = HOOP_COLL_REDUCE,
    .reduces = 1,
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
