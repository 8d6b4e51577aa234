/*
 * hoop-sim's model (sim.h): the library's plan builders, run for every rank
 * of a communicator that exists only in memory, and a discrete-event run
 * of the ops they make over per-host links.
 *
 * The plans are turned into flat arrays as each rank's is built, and the
 * plan freed: ops are renumbered so that each link's ops are contiguous
 * and in stream order (by key, as the engine sorts them), which makes
 * "the op before on the link" the previous number and a send's partner
 * receive the same position on the peer's link.  What stays per op is its
 * bytes, where its dependents start in one list, and a byte of flags and
 * pending dependencies: about 14 bytes with the dependents.
 */
#include "sim.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/algorithms.h"
#include "collectives/model.h"
#include "collectives/ring.h"
#include "core/comm.h"
#include "core/engine.h"
#include "core/types.h"

void hoop_sim_config_default(struct hoop_sim_config *cfg) {
  *cfg = (struct hoop_sim_config){
      .coll = HOOP_COLL_ALLREDUCE,
      .hosts = 1,
      .ranks_per_host = 8,
      .link_rate = 10e9 / 8,   /* 10 Gbit/s */
      .link_latency = 20e-6,   /* HOOP_ALPHA_NS's default */
      .shm_rate = 10e9,
      .shm_latency = 1e-6,
      .slice_bytes = 256 * 1024,
      .pipeline_bytes = 4 * 1024 * 1024,
      .oneshot_bytes = 256 * 1024,
      .nsocks = 1,
      .max_ops = (uint64_t)1 << 25,
  };
}

int hoop_sim_host_of(const struct hoop_sim_config *cfg, int rank) {
  return cfg->cyclic ? rank % cfg->hosts : rank / cfg->ranks_per_host;
}

static void set_err(char *err, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t len, const char *fmt, ...) {
  if (err == NULL || len == 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, len, fmt, ap);
  va_end(ap);
}

/* ---- the communicator in memory ---------------------------------------- */

static void comm_free(struct hoop_comm *c) {
  if (c == NULL)
    return;
  free(c->host_index);
  free(c->ring_order);
  free(c->ring_place);
  free(c->peers);
  free(c->scratch);
  pthread_mutex_destroy(&c->state_lock);
  free(c);
}

/*
 * The least of a communicator the builders and the cost model read: size,
 * the slice and pipeline settings, hosts and the ring's order (made by
 * topology.c from the published host hashes, as at init), the model's
 * inputs.  No peer has an address and no connection is ever made.
 */
static struct hoop_comm *comm_make(const struct hoop_sim_config *cfg,
                                   char *err, size_t errlen) {
  int n = cfg->hosts * cfg->ranks_per_host;
  struct hoop_comm *c = calloc(1, sizeof *c);
  if (c == NULL || pthread_mutex_init(&c->state_lock, NULL) != 0) {
    free(c);
    set_err(err, errlen, "out of memory for the communicator");
    return NULL;
  }
  c->nranks = n;
  c->peers = calloc((size_t)n, sizeof *c->peers);
  if (c->peers == NULL)
    goto out_free;
  for (int r = 0; r < n; r++) {
    c->peers[r].rank = r;
    /* Any value per host will do: hosts are numbered by lowest rank. */
    c->peers[r].host_hash =
        0x9e3779b97f4a7c15ull * (uint64_t)(hoop_sim_host_of(cfg, r) + 1);
  }
  if (hoop__comm_index_hosts(c) != HOOP_SUCCESS)
    goto out_free;
  c->nsocks = cfg->nsocks;
  c->slice_bytes = cfg->slice_bytes;
  c->pipeline_bytes = cfg->pipeline_bytes;
  c->oneshot_bytes = cfg->oneshot_bytes;
  c->algo = HOOP_ALGO_AUTO;
  c->alpha_s = cfg->model_alpha_s > 0 ? cfg->model_alpha_s
                                      : cfg->link_latency;
  c->host_alpha_s = cfg->model_host_alpha_s > 0 ? cfg->model_host_alpha_s
                                                : cfg->shm_latency;
  c->beta_s = cfg->model_link_beta_s > 0 ? cfg->model_link_beta_s
                                         : 1.0 / cfg->link_rate;
  c->host_beta_s = cfg->model_host_beta_s > 0 ? cfg->model_host_beta_s
                                              : 1.0 / cfg->shm_rate;
  c->host_cores = cfg->model_host_cores > 0 ? cfg->model_host_cores : 1;
  c->single_host = cfg->hosts == 1;
  c->host_memory = c->single_host;
  return c;
out_free:
  set_err(err, errlen, "out of memory for %d ranks' host table", n);
  comm_free(c);
  return NULL;
}

hoop_algo_t hoop_sim_auto_choice(const struct hoop_sim_config *cfg,
                                 size_t bytes) {
  struct hoop_comm *c = comm_make(cfg, NULL, 0);
  if (c == NULL)
    return HOOP_ALGO_AUTO;
  hoop_algo_t a = hoop__choose_algo(c, HOOP_ALGO_AUTO, cfg->coll, bytes);
  comm_free(c);
  return a;
}

/* ---- building one rank's plan ------------------------------------------ */

/*
 * Builders only do arithmetic on the buffers' addresses; nothing reads or
 * writes them, so the simulator passes addresses that map nothing.
 */
static char *fake_address(void) {
  return (char *)(uintptr_t)((uintptr_t)1 << 40);
}

static hoop_result_t build_rank(struct hoop_comm *comm, hoop_coll_t coll,
                                int rank, hoop_algo_t algo, size_t count,
                                struct hoop_plan *plan) {
  comm->rank = rank;
  hoop__plan_init(plan, comm, HOOP_F32, HOOP_SUM);
  char *buf = fake_address();
  /* In place: this rank's block of the whole buffer, for the halves. */
  char *own = buf + (size_t)rank * (count / (size_t)comm->nranks) * 4;
  struct hoop_call c = {
      .coll = coll, .setting = algo, .algo = algo,
      .send = coll == HOOP_COLL_ALLGATHER ? own : buf,
      .recv = coll == HOOP_COLL_REDUCE_SCATTER ? own : buf,
      .count = count, .bytes = count * 4,
      .dtype = HOOP_F32, .op = HOOP_SUM, .elem_size = 4, .root = 0,
      .slice_bytes = comm->slice_bytes / 4 * 4};
  return hoop__collective_build(plan, &c);
}

/*
 * The largest power of two the plan may be scaled by and keep its shape:
 * one slice per ring chunk, per tree half, per server piece.
 */
static uint64_t max_scale(const struct hoop_comm *comm, hoop_algo_t algo,
                          size_t count) {
  size_t slice = comm->slice_bytes / 4, unit = count;
  if (algo == HOOP_ALGO_RING)
    unit = count / (size_t)comm->nranks;
  else if (algo == HOOP_ALGO_HIER) /* a segment's chunk across hosts */
    unit = count / (size_t)comm->nranks / 8;
  else if (algo == HOOP_ALGO_TREE)
    unit = count / 2;
  else if (algo == HOOP_ALGO_PS && slice > HOOP_PS_PIECE_BYTES / 4)
    slice = HOOP_PS_PIECE_BYTES / 4;
  uint64_t s = 1;
  while (slice > 0 && (size_t)(s * 2) * slice <= unit)
    s *= 2;
  return s;
}

/*
 * Picks the scale: plans of a few ranks built at the largest scale give
 * ops and building work (ops times links: hoop__plan_add looks its link
 * up among the plan's, so a server of N-1 peers pays N per op), which
 * grow as 1/s; the least power of two that keeps both within budget.
 */
static hoop_result_t choose_scale(struct hoop_comm *comm, hoop_coll_t coll,
                                  hoop_algo_t algo, size_t count,
                                  uint64_t max_ops, uint64_t *scale) {
  int n = comm->nranks;
  uint64_t smax = max_scale(comm, algo, count);
  *scale = 1;
  if (smax == 1)
    return HOOP_SUCCESS;
  int sample[4] = {0, 1, n / 2, n - 1};
  double ops0 = 0, work0 = 0, ops_rest = 0, work_rest = 0;
  int nrest = 0;
  for (int i = 0; i < 4; i++) {
    if (i > 0 && (sample[i] == 0 || (i > 1 && sample[i] == sample[i - 1])))
      continue;
    struct hoop_plan plan;
    hoop_result_t res = build_rank(comm, coll, sample[i], algo,
                                   count / smax, &plan);
    double ops = plan.nops, work = (double)plan.nops * plan.nlinks;
    hoop__plan_free(&plan);
    HOOP_CHECK(res);
    if (i == 0) {
      ops0 = ops;
      work0 = work;
    } else {
      ops_rest += ops;
      work_rest += work;
      nrest++;
    }
  }
  double ops = ops0 + (nrest ? ops_rest / nrest * (n - 1) : 0);
  double work = work0 + (nrest ? work_rest / nrest * (n - 1) : 0);
  uint64_t s = 1;
  while (s < smax && (ops * (double)smax / (double)s > (double)max_ops ||
                      work * (double)smax / (double)s > 64.0 * max_ops))
    s *= 2;
  *scale = s;
  return HOOP_SUCCESS;
}

/* ---- the flat form of every rank's plan -------------------------------- */

struct sim_link {
  int rank, peer, channel, send;
  uint32_t first, nops; /* global op numbers [first, first + nops) */
  int partner;          /* the other end's link */
};

#define F_SEND 0x80u    /* the op is a send */
#define F_LAST 0x40u    /* the last op on its link */
#define F_PENDING 0x3fu /* dependencies not yet met */

struct sim {
  const struct hoop_sim_config *cfg;
  int n;
  double mult; /* bytes each op's byte stands for (the scale) */
  struct sim_link *links;
  size_t nlinks, links_cap;
  uint32_t *bytes;     /* [ops] */
  uint8_t *flags;      /* [ops] */
  uint32_t *dep_start; /* [ops + 1]: dependents of op g in dep[...] */
  uint32_t *dep;
  size_t nops, ndep;
  size_t bytes_cap, flags_cap, start_cap, dep_cap;
  /*
   * The plans' groups (engine.h), numbered across ranks: each rank's are
   * consecutive from group_base[rank], and its first complete[rank] are
   * complete.  member[g] is op g's group or NO_GROUP; gated[groups[x].
   * gated_start ...] are the ops whose gate is group x, which start once
   * their rank's groups up to x are complete.
   */
  uint32_t *member;            /* [ops] */
  struct sim_group *groups;    /* [ngroups + 1] */
  uint32_t *gated;
  uint32_t *group_base;        /* [n + 1] */
  uint32_t *complete;          /* [n] */
  size_t ngroups, ngated;
  size_t member_cap, groups_cap, gated_cap;
};

struct sim_group {
  uint32_t left; /* ops not complete */
  uint32_t rank;
  uint32_t gated_start;
};

#define NO_GROUP UINT32_MAX

static int grow(void **array, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap)
    return 0;
  size_t next = *cap ? *cap : 1024;
  while (next < need)
    next += next / 2;
  void *p = realloc(*array, next * elem);
  if (p == NULL)
    return -1;
  *array = p;
  *cap = next;
  return 0;
}

static void sim_free(struct sim *s) {
  free(s->links);
  free(s->bytes);
  free(s->flags);
  free(s->dep_start);
  free(s->dep);
  free(s->member);
  free(s->groups);
  free(s->gated);
  free(s->group_base);
  free(s->complete);
}

/* Records rank's groups and which of its ops wait on them. */
static int append_groups(struct sim *s, const struct hoop_plan *plan,
                         int rank, const uint32_t *l2g) {
  size_t g0 = s->ngroups, groups = plan->ngroups > 0 ? plan->ngroups - 1 : 0;
  size_t total = g0 + groups;
  if (grow((void **)&s->groups, &s->groups_cap, total + 1, sizeof *s->groups))
    return -1;
  s->group_base[rank] = (uint32_t)g0;
  s->group_base[rank + 1] = (uint32_t)total;
  size_t at = s->ngated;
  for (size_t x = 0; x < groups; x++) {
    s->groups[g0 + x] = (struct sim_group){.left = plan->group_ops[x + 1],
                                           .rank = (uint32_t)rank,
                                           .gated_start = (uint32_t)at};
    for (int i = 0; i < plan->nops; i++) {
      if (plan->ops[i].gate != x + 1)
        continue;
      if (grow((void **)&s->gated, &s->gated_cap, at + 1, sizeof *s->gated))
        return -1;
      s->gated[at++] = l2g[i];
    }
  }
  s->groups[total].gated_start = (uint32_t)at;
  s->ngated = at;
  s->ngroups = total;
  for (int i = 0; i < plan->nops; i++)
    s->member[l2g[i]] = plan->ops[i].group != 0
                            ? (uint32_t)(g0 + plan->ops[i].group - 1)
                            : NO_GROUP;
  return 0;
}

/* Appends one rank's built plan; frees nothing. */
static int append_plan(struct sim *s, const struct hoop_plan *plan, int rank,
                       char *err, size_t errlen) {
  size_t base = s->nops, total = base + (size_t)plan->nops;
  if (total >= UINT32_MAX) {
    set_err(err, errlen, "more than 2^32 ops: lower --max-ops");
    return -1;
  }
  if (grow((void **)&s->bytes, &s->bytes_cap, total, sizeof *s->bytes) ||
      grow((void **)&s->flags, &s->flags_cap, total, sizeof *s->flags) ||
      grow((void **)&s->dep_start, &s->start_cap, total + 1,
           sizeof *s->dep_start) ||
      grow((void **)&s->member, &s->member_cap, total, sizeof *s->member) ||
      grow((void **)&s->links, &s->links_cap, s->nlinks + (size_t)plan->nlinks,
           sizeof *s->links))
    goto out_nomem;
  uint32_t *l2g = malloc(sizeof *l2g * ((size_t)plan->nops + 1));
  uint32_t *fill = calloc((size_t)plan->nops + 1, sizeof *fill);
  struct hoop_keyed *k = NULL;
  if (l2g == NULL || fill == NULL)
    goto out_free;
  /* Each link's ops in stream order (as the engine sorts them). */
  size_t at = base;
  for (int li = 0; li < plan->nlinks; li++) {
    const struct hoop_link *l = &plan->links[li];
    struct sim_link *sl = &s->links[s->nlinks++];
    *sl = (struct sim_link){.rank = rank, .peer = l->peer,
                            .channel = l->channel, .send = l->send,
                            .first = (uint32_t)at, .nops = (uint32_t)l->nops,
                            .partner = -1};
    free(k);
    k = malloc(sizeof *k * ((size_t)l->nops + 1));
    if (k == NULL)
      goto out_free;
    for (int j = 0; j < l->nops; j++)
      k[j] = (struct hoop_keyed){plan->ops[l->ops[j]].key, l->ops[j]};
    qsort(k, (size_t)l->nops, sizeof *k, hoop__keyed_cmp);
    for (int j = 0; j < l->nops; j++) {
      const struct hoop_plan_op *o = &plan->ops[k[j].id];
      l2g[k[j].id] = (uint32_t)at;
      s->bytes[at] = o->bytes;
      s->flags[at] = (uint8_t)((l->send ? F_SEND : 0) |
                               (j == l->nops - 1 ? F_LAST : 0) |
                               ((j > 0) + (o->feed != HOOP_NO_OP) +
                                (o->after != HOOP_NO_OP) + !l->send +
                                (o->gate != 0)));
      at++;
    }
  }
  /* Dependents: who names each op as its feed or after (CSR). */
  for (int i = 0; i < plan->nops; i++) {
    const struct hoop_plan_op *o = &plan->ops[i];
    if (o->feed != HOOP_NO_OP)
      fill[l2g[o->feed] - base]++;
    if (o->after != HOOP_NO_OP)
      fill[l2g[o->after] - base]++;
  }
  size_t d = s->ndep;
  for (size_t j = 0; j < (size_t)plan->nops; j++) {
    s->dep_start[base + j] = (uint32_t)d;
    d += fill[j];
    fill[j] = 0;
  }
  if (d >= UINT32_MAX || grow((void **)&s->dep, &s->dep_cap, d, sizeof *s->dep))
    goto out_free;
  for (int i = 0; i < plan->nops; i++) {
    const struct hoop_plan_op *o = &plan->ops[i];
    int32_t on[2] = {o->feed, o->after};
    for (int w = 0; w < 2; w++) {
      if (on[w] == HOOP_NO_OP)
        continue;
      size_t j = l2g[on[w]] - base;
      s->dep[s->dep_start[base + j] + fill[j]++] = l2g[i];
    }
  }
  s->ndep = d;
  s->nops = total;
  s->dep_start[total] = (uint32_t)d;
  if (append_groups(s, plan, rank, l2g) != 0)
    goto out_free;
  free(k);
  free(l2g);
  free(fill);
  return 0;
out_free:
  free(k);
  free(l2g);
  free(fill);
out_nomem:
  set_err(err, errlen, "out of memory after %zu ops: lower --max-ops",
          s->nops);
  return -1;
}

static int link_key_cmp(const struct sim_link *a, int rank, int peer,
                        int channel, int send) {
  if (a->rank != rank)
    return a->rank < rank ? -1 : 1;
  if (a->peer != peer)
    return a->peer < peer ? -1 : 1;
  if (a->channel != channel)
    return a->channel < channel ? -1 : 1;
  return a->send == send ? 0 : (a->send < send ? -1 : 1);
}

static const struct sim_link *sort_base;

static int link_order_cmp(const void *pa, const void *pb) {
  const struct sim_link *a = &sort_base[*(const int *)pa];
  const struct sim_link *b = &sort_base[*(const int *)pb];
  return link_key_cmp(a, b->rank, b->peer, b->channel, b->send);
}

/*
 * Pairs every sending link with the peer's receiving one and checks that
 * both list the same ops: as many, of the same sizes, in the same order.
 */
static int pair_links(struct sim *s, char *err, size_t errlen) {
  int *order = malloc(sizeof *order * (s->nlinks + 1));
  if (order == NULL) {
    set_err(err, errlen, "out of memory pairing links");
    return -1;
  }
  for (size_t i = 0; i < s->nlinks; i++)
    order[i] = (int)i;
  sort_base = s->links;
  qsort(order, s->nlinks, sizeof *order, link_order_cmp);
  int rc = 0;
  for (size_t i = 0; i < s->nlinks && rc == 0; i++) {
    struct sim_link *l = &s->links[i];
    if (!l->send)
      continue;
    size_t lo = 0, hi = s->nlinks;
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      if (link_key_cmp(&s->links[order[mid]], l->peer, l->rank, l->channel,
                       0) < 0)
        lo = mid + 1;
      else
        hi = mid;
    }
    const struct sim_link *p =
        lo < s->nlinks && link_key_cmp(&s->links[order[lo]], l->peer, l->rank,
                                       l->channel, 0) == 0
            ? &s->links[order[lo]]
            : NULL;
    if (p == NULL && l->nops == 0)
      continue;
    if (p == NULL || p->nops != l->nops) {
      set_err(err, errlen,
              "rank %d sends %u ops to rank %d on channel %d, which "
              "receives %u",
              l->rank, l->nops, l->peer, l->channel, p ? p->nops : 0);
      rc = -1;
      break;
    }
    l->partner = (int)(p - s->links);
    for (uint32_t j = 0; j < l->nops; j++) {
      if (s->bytes[l->first + j] != s->bytes[p->first + j]) {
        set_err(err, errlen,
                "rank %d's op %u to rank %d carries %u bytes, the "
                "receive %u",
                l->rank, j, l->peer, s->bytes[l->first + j],
                s->bytes[p->first + j]);
        rc = -1;
        break;
      }
    }
  }
  free(order);
  return rc;
}

/* The link op g is on: the last one that starts at or before it. */
static const struct sim_link *link_of(const struct sim *s, uint32_t g) {
  size_t lo = 0, hi = s->nlinks;
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (s->links[mid].first <= g)
      lo = mid;
    else
      hi = mid;
  }
  return &s->links[lo];
}

/* ---- the discrete-event run -------------------------------------------- */

enum ev_kind {
  EV_ISSUE,   /* a send's dependencies are met: onto its link    */
  EV_INGRESS, /* a send's first byte reaches the receiving host  */
  EV_SENT,    /* a send's last byte has left                     */
  EV_DELIVER, /* a receive's last byte has arrived               */
  EV_DONE,    /* a receive is complete                           */
};

struct ev {
  double t;
  uint32_t op;
  uint32_t kind;
};

struct heap {
  struct ev *e;
  size_t n, cap;
};

static int ev_before(const struct ev *a, const struct ev *b) {
  return a->t < b->t || (a->t == b->t && a->op < b->op);
}

static int heap_push(struct heap *h, double t, uint32_t op, uint32_t kind) {
  if (grow((void **)&h->e, &h->cap, h->n + 1, sizeof *h->e))
    return -1;
  size_t i = h->n++;
  struct ev x = {t, op, kind};
  while (i > 0 && ev_before(&x, &h->e[(i - 1) / 2])) {
    h->e[i] = h->e[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h->e[i] = x;
  return 0;
}

static struct ev heap_pop(struct heap *h) {
  struct ev top = h->e[0], x = h->e[--h->n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= h->n)
      break;
    if (c + 1 < h->n && ev_before(&h->e[c + 1], &h->e[c]))
      c++;
    if (!ev_before(&h->e[c], &x))
      break;
    h->e[i] = h->e[c];
    i = c;
  }
  if (h->n > 0)
    h->e[i] = x;
  return top;
}

/* One dependency of op g met at time t: ready ops go onto the heap. */
static int satisfy(struct sim *s, struct heap *h, uint32_t g, double t) {
  if ((s->flags[g] & F_PENDING) == 0)
    return 0; /* cannot happen with consistent plans */
  s->flags[g]--;
  if ((s->flags[g] & F_PENDING) != 0)
    return 0;
  return heap_push(h, t, g, (s->flags[g] & F_SEND) ? EV_ISSUE : EV_DONE);
}

/* Opens rank's gates up to its first group not complete. */
static int open_gates(struct sim *s, struct heap *h, uint32_t rank,
                      double t) {
  uint32_t base = s->group_base[rank], end = s->group_base[rank + 1];
  while (base + s->complete[rank] < end &&
         s->groups[base + s->complete[rank]].left == 0) {
    uint32_t x = base + s->complete[rank]++;
    for (uint32_t i = s->groups[x].gated_start;
         i < s->groups[x + 1].gated_start; i++)
      if (satisfy(s, h, s->gated[i], t))
        return -1;
  }
  return 0;
}

/* Op g is complete: its dependents and, if it closes one, its group's. */
static int notify(struct sim *s, struct heap *h, uint32_t g, double t) {
  for (uint32_t i = s->dep_start[g]; i < s->dep_start[g + 1]; i++)
    if (satisfy(s, h, s->dep[i], t))
      return -1;
  uint32_t x = s->member[g];
  if (x != NO_GROUP && --s->groups[x].left == 0)
    return open_gates(s, h, s->groups[x].rank, t);
  return 0;
}

struct counters {
  uint64_t *rank_sent, *rank_recv, *nic_out, *nic_in;
  uint64_t cross, shm;
};

static int run(struct sim *s, struct counters *cnt, double *end, char *err,
               size_t errlen) {
  const struct hoop_sim_config *cfg = s->cfg;
  int m = cfg->hosts;
  double *egress = calloc((size_t)m, sizeof *egress);
  double *ingress = calloc((size_t)m, sizeof *ingress);
  double *memory = calloc((size_t)m, sizeof *memory);
  struct heap h = {0};
  int rc = -1;
  uint64_t finished = 0;
  double now = 0;
  if (egress == NULL || ingress == NULL || memory == NULL)
    goto out;
  for (uint32_t g = 0; g < s->nops; g++)
    if ((s->flags[g] & F_PENDING) == 0 &&
        heap_push(&h, 0, g, (s->flags[g] & F_SEND) ? EV_ISSUE : EV_DONE))
      goto out;
  /* Gates on groups without ops are open from the start. */
  for (int r = 0; r < s->n; r++)
    if (open_gates(s, &h, (uint32_t)r, 0))
      goto out;
  while (h.n > 0) {
    struct ev e = heap_pop(&h);
    uint32_t g = e.op;
    now = e.t;
    int fail = 0;
    if (e.kind == EV_ISSUE || e.kind == EV_INGRESS) {
      const struct sim_link *l = link_of(s, g);
      uint32_t q = s->links[l->partner].first + (g - l->first);
      int ha = hoop_sim_host_of(cfg, l->rank);
      int hb = hoop_sim_host_of(cfg, l->peer);
      double b = s->bytes[g] * s->mult;
      if (e.kind == EV_INGRESS) {
        double start = now > ingress[hb] ? now : ingress[hb];
        ingress[hb] = start + b / cfg->link_rate;
        fail = heap_push(&h, ingress[hb], q, EV_DELIVER);
      } else {
        uint64_t ub = (uint64_t)llround(b);
        cnt->rank_sent[l->rank] += ub;
        cnt->rank_recv[l->peer] += ub;
        if (ha != hb) {
          cnt->nic_out[ha] += ub;
          cnt->nic_in[hb] += ub;
          cnt->cross += ub;
          double start = now > egress[ha] ? now : egress[ha];
          egress[ha] = start + b / cfg->link_rate;
          fail = heap_push(&h, egress[ha], g, EV_SENT) ||
                 heap_push(&h, start + cfg->link_latency, g, EV_INGRESS);
        } else {
          cnt->shm += ub;
          double start = now > memory[ha] ? now : memory[ha];
          memory[ha] = start + b / cfg->shm_rate;
          fail = heap_push(&h, memory[ha], g, EV_SENT) ||
                 heap_push(&h, memory[ha] + cfg->shm_latency, q, EV_DELIVER);
        }
        /* The next send on the link may follow it onto the link. */
        if (!fail && !(s->flags[g] & F_LAST))
          fail = satisfy(s, &h, g + 1, now);
      }
    } else if (e.kind == EV_SENT) {
      finished++;
      fail = notify(s, &h, g, now);
    } else if (e.kind == EV_DELIVER) {
      fail = satisfy(s, &h, g, now);
    } else {
      finished++;
      fail = notify(s, &h, g, now) ||
             (!(s->flags[g] & F_LAST) && satisfy(s, &h, g + 1, now));
    }
    if (fail)
      goto out;
  }
  if (finished != s->nops) {
    uint32_t g = 0;
    while (g < s->nops && (s->flags[g] & F_PENDING) == 0)
      g++;
    const struct sim_link *l = link_of(s, g < s->nops ? g : 0);
    set_err(err, errlen,
            "the plans deadlock: %llu of %zu ops finished; rank %d's op "
            "%u on its link %s rank %d waits on %u more",
            (unsigned long long)finished, s->nops, l->rank, g - l->first,
            l->send ? "to" : "from", l->peer,
            g < s->nops ? s->flags[g] & F_PENDING : 0);
    rc = -2;
    goto out;
  }
  *end = now;
  rc = 0;
out:
  if (rc == -1)
    set_err(err, errlen, "out of memory for events");
  free(h.e);
  free(egress);
  free(ingress);
  free(memory);
  return rc;
}

/* ---- the call ------------------------------------------------------------ */

/* Reduce-scatter's and all-gather's, one half of the all-reduce's. */
static double half_closed_form(const struct hoop_sim_config *cfg,
                               hoop_algo_t algo, double n, double k) {
  if (cfg->hosts == 1)
    return (n - 1) * (cfg->shm_latency + k / cfg->shm_rate);
  if (algo == HOOP_ALGO_HIER)
    return (cfg->hosts - 1.0) *
           (cfg->link_latency + k / cfg->hosts / cfg->link_rate);
  return (n - 1) * (cfg->link_latency + k / n / cfg->link_rate);
}

double hoop_sim_closed_form(const struct hoop_sim_config *cfg,
                            hoop_algo_t algo, size_t bytes) {
  double n = (double)cfg->hosts * cfg->ranks_per_host, k = (double)bytes;
  if (cfg->coll != HOOP_COLL_ALLREDUCE)
    return half_closed_form(cfg, algo, n, k);
  double depth = floor(log2(n > 1 ? n : 2));
  double hops = algo == HOOP_ALGO_TREE      ? 2 * depth
                : algo == HOOP_ALGO_PS      ? 2
                : algo == HOOP_ALGO_ONESHOT ? 1
                                            : 2 * (n - 1);
  if (cfg->hosts == 1)
    return hops * cfg->shm_latency + 2 * (n - 1) * k / cfg->shm_rate;
  if (algo == HOOP_ALGO_HIER) /* the ring across hosts; the rest hidden */
    return 2.0 * (cfg->hosts - 1) *
           (cfg->link_latency + k / cfg->hosts / cfg->link_rate);
  double link;
  if (algo == HOOP_ALGO_TREE) {
    int sent, reduced;
    hoop__tree_allreduce_load((int)n, &sent, &reduced);
    link = sent * k / 2;
  } else if (algo == HOOP_ALGO_PS) {
    link = (n - 1) * k;
  } else if (algo == HOOP_ALGO_ONESHOT) {
    link = k;
  } else {
    link = 2 * (n - 1) / n * k;
  }
  return hops * cfg->link_latency + link / cfg->link_rate;
}

/* Whether cfg->coll is one hoop-sim runs, with `algo`; else why not. */
static int check_call(const struct hoop_sim_config *cfg, hoop_algo_t algo,
                      size_t bytes, int n, char *err, size_t errlen) {
  if (cfg->coll == HOOP_COLL_ALLREDUCE)
    return 0;
  if (cfg->coll != HOOP_COLL_REDUCE_SCATTER &&
      cfg->coll != HOOP_COLL_ALLGATHER) {
    set_err(err, errlen, "collective %d: all-reduce, reduce-scatter or "
                         "all-gather", (int)cfg->coll);
    return -1;
  }
  if (algo != HOOP_ALGO_AUTO && algo != HOOP_ALGO_RING &&
      algo != HOOP_ALGO_HIER) {
    set_err(err, errlen, "reduce-scatter and all-gather run ring or hier, "
                         "not %s", hoop_algo_name(algo));
    return -1;
  }
  if (bytes % ((size_t)n * 4) != 0) {
    set_err(err, errlen, "%zu bytes are not %d whole blocks of floats",
            bytes, n);
    return -1;
  }
  return 0;
}

int hoop_sim_call(const struct hoop_sim_config *cfg, hoop_algo_t algo,
                  size_t bytes, struct hoop_sim_result *res, char *err,
                  size_t errlen) {
  int n = cfg->hosts * cfg->ranks_per_host;
  uint64_t *keep_sent = res->rank_sent, *keep_recv = res->rank_recv;
  *res = (struct hoop_sim_result){.rank_sent = keep_sent,
                                  .rank_recv = keep_recv};
  if (cfg->hosts < 1 || cfg->ranks_per_host < 1 || n < 2 ||
      n > HOOP_MAX_RANKS) {
    set_err(err, errlen, "need 2 to %d ranks, not %d x %d", HOOP_MAX_RANKS,
            cfg->hosts, cfg->ranks_per_host);
    return -1;
  }
  if (bytes % 4 != 0 || cfg->link_rate <= 0 || cfg->shm_rate <= 0 ||
      cfg->slice_bytes < 4 || cfg->nsocks < 1) {
    set_err(err, errlen, "bytes must be a multiple of 4, rates positive, "
                         "the slice at least 4 bytes");
    return -1;
  }
  if (check_call(cfg, algo, bytes, n, err, errlen) != 0)
    return -1;
  struct hoop_comm *comm = comm_make(cfg, err, errlen);
  if (comm == NULL)
    return -1;
  if (algo == HOOP_ALGO_AUTO)
    algo = hoop__choose_algo(comm, HOOP_ALGO_AUTO, cfg->coll, bytes);
  if ((algo == HOOP_ALGO_ONESHOT && n != 2) ||
      (algo == HOOP_ALGO_HIER && !hoop__hier_applies(comm)))
    algo = HOOP_ALGO_RING;
  res->algo = algo;
  res->closed_form_s = hoop_sim_closed_form(cfg, algo, bytes);
  struct sim s = {.cfg = cfg, .n = n,
                  .group_base = calloc((size_t)n + 1, sizeof(uint32_t)),
                  .complete = calloc((size_t)n, sizeof(uint32_t))};
  struct counters cnt = {
      .rank_sent = calloc((size_t)n, sizeof(uint64_t)),
      .rank_recv = calloc((size_t)n, sizeof(uint64_t)),
      .nic_out = calloc((size_t)cfg->hosts, sizeof(uint64_t)),
      .nic_in = calloc((size_t)cfg->hosts, sizeof(uint64_t))};
  int rc = -1;
  size_t count = bytes / 4;
  uint64_t scale = 1;
  if (cnt.rank_sent == NULL || cnt.rank_recv == NULL || cnt.nic_out == NULL ||
      cnt.nic_in == NULL || s.group_base == NULL || s.complete == NULL) {
    set_err(err, errlen, "out of memory for counters");
    goto out;
  }
  if (choose_scale(comm, cfg->coll, algo, count, cfg->max_ops, &scale) !=
      HOOP_SUCCESS) {
    set_err(err, errlen, "building a plan: %s", hoop_last_error());
    goto out;
  }
  size_t count_s = count / scale;
  if (cfg->coll != HOOP_COLL_ALLREDUCE) /* whole blocks */
    count_s = count / (size_t)n / scale * (size_t)n;
  s.mult = count_s > 0 ? (double)count / (double)count_s : 1;
  for (int r = 0; r < n; r++) {
    struct hoop_plan plan;
    hoop_result_t b = build_rank(comm, cfg->coll, r, algo, count_s, &plan);
    int a = b == HOOP_SUCCESS ? append_plan(&s, &plan, r, err, errlen) : 0;
    hoop__plan_free(&plan);
    if (b != HOOP_SUCCESS) {
      set_err(err, errlen, "building rank %d's plan: %s", r,
              hoop_last_error());
      goto out;
    }
    if (a != 0)
      goto out;
  }
  if (pair_links(&s, err, errlen) != 0)
    goto out;
  double end = 0;
  if (run(&s, &cnt, &end, err, errlen) != 0)
    goto out;
  res->time_s = end;
  res->ops = s.nops;
  res->scale = scale;
  res->nlinks = s.nlinks;
  res->min_rank_sent = UINT64_MAX;
  for (int r = 0; r < n; r++) {
    uint64_t sent = cnt.rank_sent[r], moved = sent + cnt.rank_recv[r];
    res->max_rank_sent = sent > res->max_rank_sent ? sent : res->max_rank_sent;
    res->min_rank_sent = sent < res->min_rank_sent ? sent : res->min_rank_sent;
    res->max_rank_moved =
        moved > res->max_rank_moved ? moved : res->max_rank_moved;
    if (res->rank_sent != NULL)
      res->rank_sent[r] = sent;
    if (res->rank_recv != NULL)
      res->rank_recv[r] = cnt.rank_recv[r];
  }
  res->root_moved = cnt.rank_sent[0] + cnt.rank_recv[0];
  for (int hh = 0; hh < cfg->hosts; hh++) {
    uint64_t most = cnt.nic_out[hh] > cnt.nic_in[hh] ? cnt.nic_out[hh]
                                                     : cnt.nic_in[hh];
    res->max_nic_bytes = most > res->max_nic_bytes ? most : res->max_nic_bytes;
  }
  res->cross_bytes = cnt.cross;
  res->shm_bytes = cnt.shm;
  res->total_bytes = cnt.cross + cnt.shm;
  rc = 0;
out:
  free(cnt.rank_sent);
  free(cnt.rank_recv);
  free(cnt.nic_out);
  free(cnt.nic_in);
  sim_free(&s);
  comm_free(comm);
  return rc;
}
