/*
 * Tree schedules.  All-reduce uses a double binary tree: two binary trees
 * over the same ranks, each carrying half of the buffer, laid out so that
 * the leaves of one are the inner nodes of the other (tree 0 puts rank r
 * at heap position r, tree 1 at position N-1-r).  Each half is reduced up
 * its tree and broadcast back down, slice by slice, so a small call takes
 * about 2 log2(N) hops instead of the ring's 2(N-1).  Broadcast and reduce
 * use one binary tree rooted at the root.
 *
 * On every link all up-going slices come before all down-going ones (their
 * ticks are offset by the number of slices): up depends only on children
 * and down only on parents, so no link can wait on itself.
 */
#include <stdlib.h>
#include <string.h>

#include "collectives/algorithms.h"
#include "core/comm.h"
#include "core/error.h"

struct tree_node {
  int parent;      /* rank, or -1 at the root */
  int children[2]; /* ranks, or -1 */
  int nchildren;
};

/* Rank at heap position p: 0 is the root, 2p+1 and 2p+2 the children. */
static struct tree_node heap_node(int n, int p, int (*rank_at)(int, int, int),
                                  int arg) {
  struct tree_node t = {.parent = p > 0 ? rank_at(n, (p - 1) / 2, arg) : -1,
                        .children = {-1, -1}};
  for (int c = 2 * p + 1; c <= 2 * p + 2 && c < n; c++)
    t.children[t.nchildren++] = rank_at(n, c, arg);
  return t;
}

static int rank_direct(int n, int p, int root) { return (p + root) % n; }
static int rank_mirror(int n, int p, int unused) { return n - 1 - p; }

void hoop__tree_allreduce_load(int nranks, int *max_sent, int *max_reduced) {
  *max_sent = *max_reduced = 0;
  for (int r = 0; r < nranks; r++) {
    int sent = 0, reduced = 0;
    /* Tree 0 puts r at heap position r, tree 1 at N-1-r (rank_mirror). */
    for (int tree = 0; tree < 2; tree++) {
      struct tree_node nd = heap_node(
          nranks, tree == 0 ? r : nranks - 1 - r,
          tree == 0 ? rank_direct : rank_mirror, 0);
      /* A half up to the parent and one down to each child. */
      sent += (nd.parent >= 0) + nd.nchildren;
      reduced += nd.nchildren;
    }
    *max_sent = sent > *max_sent ? sent : *max_sent;
    *max_reduced = reduced > *max_reduced ? reduced : *max_reduced;
  }
}

int hoop__tree_allreduce_hosts(int nranks, const int *host_index, int hosts,
                               struct hoop_tree_hosts *out) {
  int depth = 0; /* of the deepest heap position, N - 1 */
  while ((2 << depth) <= nranks)
    depth++;
  size_t stride = (size_t)depth + 1;
  int *sent = calloc((size_t)hosts, sizeof *sent);
  /* [host][crossings]: edges into the host's ranks that many crossings
   * below the root. */
  int *arrive = malloc(sizeof *arrive * (size_t)hosts * stride);
  /* Per heap position: its path up to the root. */
  struct path {
    int crossings, load;
  } *path = malloc(sizeof *path * (size_t)nranks);
  *out = (struct hoop_tree_hosts){0};
  if (sent == NULL || arrive == NULL || path == NULL) {
    free(sent);
    free(arrive);
    free(path);
    return -1;
  }
  for (int r = 0; r < nranks; r++) {
    for (int tree = 0; tree < 2; tree++) {
      struct tree_node nd = heap_node(
          nranks, tree == 0 ? r : nranks - 1 - r,
          tree == 0 ? rank_direct : rank_mirror, 0);
      int h = host_index[r];
      sent[h] += nd.parent >= 0 && host_index[nd.parent] != h;
      for (int c = 0; c < nd.nchildren; c++)
        sent[h] += host_index[nd.children[c]] != h;
      out->halves = sent[h] > out->halves ? sent[h] : out->halves;
    }
  }
  /*
   * A host's ranks as many crossings below the root get their slices off
   * the network together (the hops inside the host are quick next to it),
   * so each edge between hosts is loaded with all of those edges into its
   * lower end's host; a path's load sums its edges'.  Heap positions come
   * after their parents.
   */
  for (int tree = 0; tree < 2; tree++) {
    int (*rank_at)(int, int, int) = tree == 0 ? rank_direct : rank_mirror;
    memset(arrive, 0, sizeof *arrive * (size_t)hosts * stride);
    path[0] = (struct path){0, 0};
    for (int p = 1; p < nranks; p++) {
      int h = host_index[rank_at(nranks, p, 0)];
      int cross = host_index[rank_at(nranks, (p - 1) / 2, 0)] != h;
      path[p].crossings = path[(p - 1) / 2].crossings + cross;
      arrive[(size_t)h * stride + (size_t)path[p].crossings] += cross;
    }
    for (int p = 1; p < nranks; p++) {
      int h = host_index[rank_at(nranks, p, 0)];
      int cross = host_index[rank_at(nranks, (p - 1) / 2, 0)] != h;
      path[p].load =
          path[(p - 1) / 2].load +
          (cross ? arrive[(size_t)h * stride + (size_t)path[p].crossings] : 0);
      if (path[p].crossings > out->crossings)
        out->crossings = path[p].crossings;
      if (path[p].load > out->path_load)
        out->path_load = path[p].load;
    }
  }
  free(sent);
  free(arrive);
  free(path);
  return 0;
}

struct tree_part {
  struct tree_node node;
  int tree; /* 0 or 1: the key tie-breaker, so both ends agree */
  const char *send;
  char *recv; /* where sums collect (scratch on non-roots for reduce) */
  size_t bytes;
  int up, down; /* which phases this call needs */
};

/* Up: children's slices reduced into recv, then sent to the parent. */
static hoop_result_t add_up(struct hoop_plan *plan, const struct tree_part *t,
                            size_t at, size_t bytes, uint64_t key,
                            int32_t *result, int32_t *sent) {
  const struct tree_node *nd = &t->node;
  const char *src = t->send + at;
  *result = HOOP_NO_OP;
  *sent = HOOP_NO_OP;
  for (int c = 0; c < nd->nchildren; c++) {
    struct hoop_plan_op op = {
        .kind = HOOP_OP_RECV_REDUCE,
        .bytes = (uint32_t)bytes,
        .src = src,
        .dst = t->recv + at,
        .feed = HOOP_NO_OP,
        .after = *result,
        .key = key,
        .finish_avg = nd->parent < 0 && c == nd->nchildren - 1 &&
                      plan->op == HOOP_AVG,
    };
    HOOP_CHECK(hoop__plan_add(plan, nd->children[c], 0, &op, result));
    src = t->recv + at;
  }
  if (nd->parent < 0)
    return HOOP_SUCCESS;
  struct hoop_plan_op op = {.kind = HOOP_OP_SEND, .bytes = (uint32_t)bytes,
                            .src = src, .feed = *result,
                            .after = HOOP_NO_OP, .key = key};
  return hoop__plan_add(plan, nd->parent, 1, &op, sent);
}

/*
 * Down: the parent's slice (or, at the root, the finished sum) copied into
 * recv and sent on to the children.  `up_sent` must finish first: recv
 * may still hold what goes up.
 */
static hoop_result_t add_down(struct hoop_plan *plan,
                              const struct tree_part *t, size_t at,
                              size_t bytes, uint64_t key, int32_t feed,
                              int32_t up_sent, const char *root_src) {
  const struct tree_node *nd = &t->node;
  const char *src = root_src;
  if (nd->parent >= 0) {
    struct hoop_plan_op op = {.kind = HOOP_OP_RECV_COPY,
                              .bytes = (uint32_t)bytes, .dst = t->recv + at,
                              .feed = HOOP_NO_OP, .after = up_sent,
                              .key = key};
    HOOP_CHECK(hoop__plan_add(plan, nd->parent, 0, &op, &feed));
    src = t->recv + at;
  }
  for (int c = 0; c < nd->nchildren; c++) {
    struct hoop_plan_op op = {.kind = HOOP_OP_SEND, .bytes = (uint32_t)bytes,
                              .src = src, .feed = feed,
                              .after = HOOP_NO_OP, .key = key};
    HOOP_CHECK(hoop__plan_add(plan, nd->children[c], 1, &op, NULL));
  }
  return HOOP_SUCCESS;
}

/* Every link of the part, so headers are exchanged even with no data. */
static hoop_result_t open_links(struct hoop_plan *plan,
                                const struct tree_part *t) {
  const struct tree_node *nd = &t->node;
  int link;
  if (nd->parent >= 0) {
    if (t->up)
      HOOP_CHECK(hoop__plan_link(plan, nd->parent, 0, 1, &link));
    if (t->down)
      HOOP_CHECK(hoop__plan_link(plan, nd->parent, 0, 0, &link));
  }
  for (int c = 0; c < nd->nchildren; c++) {
    if (t->up)
      HOOP_CHECK(hoop__plan_link(plan, nd->children[c], 0, 0, &link));
    if (t->down)
      HOOP_CHECK(hoop__plan_link(plan, nd->children[c], 0, 1, &link));
  }
  return HOOP_SUCCESS;
}

static hoop_result_t build_part(struct hoop_plan *plan,
                                const struct tree_part *t, size_t slice) {
  size_t nslices = hoop__nslices(t->bytes, slice);
  HOOP_CHECK(open_links(plan, t));
  for (size_t j = 0; j < nslices; j++) {
    size_t at = j * slice, bytes = hoop__slice_len(t->bytes, slice, j);
    int32_t result = HOOP_NO_OP, sent = HOOP_NO_OP;
    if (t->up)
      HOOP_CHECK(add_up(plan, t, at, bytes, hoop__key(j, (uint32_t)t->tree),
                        &result, &sent));
    if (t->down) {
      /* The root of a broadcast sends its own input; of an all-reduce,
       * the sum it just finished (or its input when it had no children). */
      const char *root_src = t->up && t->node.nchildren > 0 ? t->recv + at
                                                             : t->send + at;
      HOOP_CHECK(add_down(plan, t, at, bytes,
                          hoop__key(nslices + j, (uint32_t)t->tree), result,
                          sent, root_src));
    }
  }
  return HOOP_SUCCESS;
}

hoop_result_t hoop__tree_build(struct hoop_plan *plan,
                               const struct hoop_call *call) {
  struct hoop_comm *comm = plan->comm;
  int n = comm->nranks, r = comm->rank;
  size_t esz = call->elem_size;
  if (call->coll == HOOP_COLL_ALLREDUCE) {
    size_t half = call->count / 2;
    for (int tree = 0; tree < 2; tree++) {
      size_t lo = tree == 0 ? 0 : half, hi = tree == 0 ? half : call->count;
      int pos = tree == 0 ? r : n - 1 - r;
      struct tree_part t = {
          .node = heap_node(n, pos, tree == 0 ? rank_direct : rank_mirror, 0),
          .tree = tree,
          .send = call->send + lo * esz,
          .recv = call->recv + lo * esz,
          .bytes = (hi - lo) * esz,
          .up = 1,
          .down = 1,
      };
      HOOP_CHECK(build_part(plan, &t, call->slice_bytes));
    }
    return HOOP_SUCCESS;
  }
  int pos = (r - call->root + n) % n;
  struct tree_part t = {
      .node = heap_node(n, pos, rank_direct, call->root),
      .send = call->send,
      .recv = call->recv,
      .bytes = call->bytes,
      .up = call->coll == HOOP_COLL_REDUCE,
      .down = call->coll == HOOP_COLL_BROADCAST,
  };
  /* A reduce's inner nodes need somewhere to sum that is not the result. */
  if (t.up && pos != 0 && t.node.nchildren > 0) {
    void *scratch;
    HOOP_CHECK(hoop__comm_scratch(comm, call->bytes, &scratch));
    t.recv = scratch;
  }
  return build_part(plan, &t, call->slice_bytes);
}
