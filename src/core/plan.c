/* Building plans: links, ops, and the per-link stream order. */
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/engine.h"
#include "core/error.h"

void hoop__plan_init(struct hoop_plan *plan, struct hoop_comm *comm,
                     hoop_dtype_t dtype, hoop_op_t op) {
  memset(plan, 0, sizeof *plan);
  plan->comm = comm;
  plan->dtype = dtype;
  plan->op = op;
  plan->elem_size = hoop_dtype_size(dtype);
}

void hoop__plan_free(struct hoop_plan *plan) {
  for (int i = 0; i < plan->nlinks; i++)
    free(plan->links[i].ops);
  free(plan->links);
  free(plan->ops);
  free(plan->group_ops);
  free(plan->group_left);
  free(plan->pollfds);
  memset(plan, 0, sizeof *plan);
}

/* Set by hoop__plan_fail_next_alloc(); taken by the next growth. */
static int fail_next_alloc;

void hoop__plan_fail_next_alloc(void) {
  __atomic_store_n(&fail_next_alloc, 1, __ATOMIC_RELAXED);
}

static hoop_result_t grow(struct hoop_comm *comm, void **array, int *cap,
                          int need, size_t elem) {
  if (need <= *cap)
    return HOOP_SUCCESS;
  int next = *cap ? *cap * 2 : 16;
  while (next < need)
    next *= 2;
  void *p = __atomic_exchange_n(&fail_next_alloc, 0, __ATOMIC_RELAXED)
                ? NULL
                : realloc(*array, (size_t)next * elem);
  if (p == NULL)
    return HOOP_ERROR(comm, HOOP_ERR_NO_MEMORY, "plan of %d entries", next);
  *array = p;
  *cap = next;
  return HOOP_SUCCESS;
}

hoop_result_t hoop__plan_link(struct hoop_plan *plan, int peer, int channel,
                              int send, int *link) {
  for (int i = 0; i < plan->nlinks; i++) {
    const struct hoop_link *l = &plan->links[i];
    if (l->peer == peer && l->channel == channel && l->send == send) {
      *link = i;
      return HOOP_SUCCESS;
    }
  }
  HOOP_CHECK(grow(plan->comm, (void **)&plan->links, &plan->links_cap,
                  plan->nlinks + 1, sizeof *plan->links));
  struct hoop_link *l = &plan->links[plan->nlinks];
  memset(l, 0, sizeof *l);
  l->peer = peer;
  l->channel = channel;
  l->send = send;
  *link = plan->nlinks++;
  return HOOP_SUCCESS;
}

hoop_result_t hoop__plan_groups(struct hoop_plan *plan, int ngroups) {
  free(plan->group_ops);
  free(plan->group_left);
  plan->ngroups = 0;
  plan->group_ops = calloc((size_t)ngroups + 1, sizeof *plan->group_ops);
  plan->group_left = calloc((size_t)ngroups + 1, sizeof *plan->group_left);
  if (plan->group_ops == NULL || plan->group_left == NULL)
    return HOOP_ERROR(plan->comm, HOOP_ERR_NO_MEMORY, "plan of %d groups",
                      ngroups);
  plan->ngroups = ngroups + 1;
  return HOOP_SUCCESS;
}

hoop_result_t hoop__plan_op(struct hoop_plan *plan, int link,
                            const struct hoop_plan_op *op, int32_t *id) {
  struct hoop_link *l = &plan->links[link];
  if ((op->group != 0 || op->gate != 0) &&
      (op->group >= plan->ngroups || op->gate >= plan->ngroups))
    return HOOP_ERROR(plan->comm, HOOP_ERR_INTERNAL,
                      "plan op in group %d (gate %d) of %d", op->group,
                      op->gate, plan->ngroups - 1);
  HOOP_CHECK(grow(plan->comm, (void **)&plan->ops, &plan->ops_cap,
                  plan->nops + 1, sizeof *plan->ops));
  HOOP_CHECK(grow(plan->comm, (void **)&l->ops, &l->cap, l->nops + 1,
                  sizeof *l->ops));
  plan->ops[plan->nops] = *op;
  plan->ops[plan->nops].done = 0;
  l->ops[l->nops++] = plan->nops;
  l->bytes += op->bytes;
  if (op->group != 0)
    plan->group_ops[op->group]++;
  if (id != NULL)
    *id = plan->nops;
  plan->nops++;
  return HOOP_SUCCESS;
}

hoop_result_t hoop__plan_add(struct hoop_plan *plan, int peer, int send,
                             struct hoop_plan_op *op, int32_t *id) {
  int link;
  HOOP_CHECK(hoop__plan_link(plan, peer, 0, send, &link));
  return hoop__plan_op(plan, link, op, id);
}
