/* hoop-bench -C allreduce: every rank gets the reduction of all inputs. */
#include "bench.h"

static hoop_result_t run(const struct bench_call *c) {
  return hoop_allreduce(c->comm, c->send, c->recv, c->count, c->dtype, c->op,
                        c->stream);
}

static size_t result_elems(const struct bench_ref *ref) { return ref->count; }

static double expected(const struct bench_ref *ref, size_t i) {
  return bench_reduced(ref, i);
}

/* Each rank sends and receives 2(N-1)/N of the buffer over its link. */
static double factor(int n) { return 2.0 * (n - 1) / n; }

/*
 * The busiest link's bytes each way, as the cost model counts them: the
 * ring 2(N-1)/N of the buffer; the parameter server's root (N-1)K; over
 * CUDA IPC, one-shot reads (N-1)K from the peers; the double binary tree
 * a half-buffer to the parent and to each child in each tree (rank r sits
 * at heap position r in one and N-1-r in the other), at its busiest rank.
 * The hierarchical all-reduce: each host's link, shared by its ranks,
 * 2(M-1)/M of the buffer.  The model also charges the tree for its
 * measured efficiency; this column is bytes only.
 */
static double tree_busiest_halves(int n) {
  int most = 0;
  for (int r = 0; r < n; r++) {
    int halves = 0;
    for (int p = r, t = 0; t < 2; t++, p = n - 1 - r)
      halves += (p > 0) + (2 * p + 1 < n) + (2 * p + 2 < n);
    most = halves > most ? halves : most;
  }
  return most;
}

static double model_bytes(hoop_algo_t algo, int n, int hosts, double k) {
  switch (algo) {
  case HOOP_ALGO_HIER: return 2.0 * (hosts - 1) / hosts * k;
  case HOOP_ALGO_RING: return factor(n) * k;
  case HOOP_ALGO_PS: return (double)(n - 1) * k;
  case HOOP_ALGO_TREE: return tree_busiest_halves(n) * k / 2;
  case HOOP_ALGO_ONESHOT: return (double)(n - 1) * k;
  default: return 0;
  }
}

const struct bench_coll bench_allreduce = {
    .name = "allreduce",
    .kind = HOOP_COLL_ALLREDUCE,
    .reduces = 1,
    .in_place = 1,
    .algos = BENCH_ALGO(HOOP_ALGO_AUTO) | BENCH_ALGO(HOOP_ALGO_RING) |
             BENCH_ALGO(HOOP_ALGO_TREE) | BENCH_ALGO(HOOP_ALGO_PS) |
             BENCH_ALGO(HOOP_ALGO_HIER),
    .bus_factor = factor,
    .bus_factor_text = "2(N-1)/N",
    .layout = bench_layout_whole,
    .run = run,
    .result_elems = result_elems,
    .expected = expected,
    .model_bytes = model_bytes,
};
