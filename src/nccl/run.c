/*
 * Running the calls that coll.c checked, now or at a group's end, with
 * hoop's own: gather and scatter as point-to-point groups, PreMulSum as
 * scale-then-sum.
 */
#include <stdint.h>

#include "nccl/nccl_comm.h"

static size_t bytes_of(size_t count, hoop_dtype_t dtype) {
  return count * hoop_dtype_size(dtype);
}

/* Sends and receives of a gather or a scatter, as one hoop group. */
static hoop_result_t gather_or_scatter(hoop_comm_t hc, ncclComm_t comm,
                                       const struct nccl_call *c) {
  size_t b = bytes_of(c->count, c->dtype);
  bool gather = c->kind == NCCL_K_GATHER;
  hoop_result_t res = hoop_group_start();
  if (res != HOOP_SUCCESS)
    return res;
  if (comm->rank != c->root) {
    res = gather ? hoop_send(hc, c->sendbuf, c->count, c->dtype, c->root,
                             c->stream)
                 : hoop_recv(hc, c->recvbuf, c->count, c->dtype, c->root,
                             c->stream);
  } else {
    for (int r = 0; r < comm->nranks && res == HOOP_SUCCESS; r++) {
      char *block = gather ? (char *)c->recvbuf + (size_t)r * b
                           : (char *)(uintptr_t)c->sendbuf + (size_t)r * b;
      if (r == comm->rank) {
        /* The root's own block moves only when the call is not in place. */
        void *mine = gather ? (void *)(uintptr_t)c->sendbuf : c->recvbuf;
        if (mine == block)
          continue;
        res = hoop_send(hc, gather ? mine : block, c->count, c->dtype, r,
                        c->stream);
        if (res == HOOP_SUCCESS)
          res = hoop_recv(hc, gather ? block : mine, c->count, c->dtype, r,
                          c->stream);
      } else {
        res = gather ? hoop_recv(hc, block, c->count, c->dtype, r, c->stream)
                     : hoop_send(hc, block, c->count, c->dtype, r,
                                 c->stream);
      }
    }
  }
  hoop_result_t end = hoop_group_end();
  return res != HOOP_SUCCESS ? res : end;
}

/* The reductions with a PreMulSum operator: scale the input, then sum. */
static ncclResult_t run_premul(hoop_comm_t hc, ncclComm_t comm,
                               const struct nccl_call *c) {
  size_t n = c->kind == NCCL_K_REDUCE_SCATTER
                 ? c->count * (size_t)comm->nranks
                 : c->count;
  bool device = nccl__is_device_memory(c->sendbuf);
  void *scaled = NULL;
  ncclResult_t r;
  if (c->kind == NCCL_K_ALLREDUCE) {
    /* recvbuf holds as many elements: scale into it, reduce in place. */
    r = nccl__scale(&c->scalar, c->sendbuf, n, c->dtype, c->recvbuf,
                    c->stream);
    if (r != ncclSuccess)
      return r;
    return nccl__from_hoop(comm, hoop_allreduce(hc, c->recvbuf, c->recvbuf,
                                                c->count, c->dtype, HOOP_SUM,
                                                c->stream));
  }
  r = nccl__temp_alloc(&scaled, bytes_of(n, c->dtype), device, c->stream);
  if (r != ncclSuccess)
    return r;
  r = nccl__scale(&c->scalar, c->sendbuf, n, c->dtype, scaled, c->stream);
  if (r == ncclSuccess) {
    hoop_result_t res =
        c->kind == NCCL_K_REDUCE
            ? hoop_reduce(hc, scaled, c->recvbuf, c->count, c->dtype,
                          HOOP_SUM, c->root, c->stream)
            : hoop_reduce_scatter(hc, scaled, c->recvbuf, c->count, c->dtype,
                                  HOOP_SUM, c->stream);
    r = nccl__from_hoop(comm, res);
  }
  nccl__temp_free(scaled, device, c->stream);
  return r;
}

static ncclResult_t run_collective(hoop_comm_t hc, const struct nccl_call *c) {
  ncclComm_t comm = c->comm;
  if (c->premul)
    return run_premul(hc, comm, c);
  hoop_result_t res;
  switch (c->kind) {
  case NCCL_K_ALLREDUCE:
    res = hoop_allreduce(hc, c->sendbuf, c->recvbuf, c->count, c->dtype,
                         c->op, c->stream);
    break;
  case NCCL_K_BROADCAST:
    res = hoop_broadcast(hc, c->sendbuf, c->recvbuf, c->count, c->dtype,
                         c->root, c->stream);
    break;
  case NCCL_K_REDUCE:
    res = hoop_reduce(hc, c->sendbuf, c->recvbuf, c->count, c->dtype, c->op,
                      c->root, c->stream);
    break;
  case NCCL_K_ALLGATHER:
    res = hoop_allgather(hc, c->sendbuf, c->recvbuf, c->count, c->dtype,
                         c->stream);
    break;
  case NCCL_K_REDUCE_SCATTER:
    res = hoop_reduce_scatter(hc, c->sendbuf, c->recvbuf, c->count, c->dtype,
                              c->op, c->stream);
    break;
  case NCCL_K_ALLTOALL:
    res = hoop_alltoall(hc, c->sendbuf, c->recvbuf, c->count, c->dtype,
                        c->stream);
    break;
  case NCCL_K_GATHER:
  case NCCL_K_SCATTER:
    res = c->count == 0 ? HOOP_SUCCESS : gather_or_scatter(hc, comm, c);
    break;
  default:
    return nccl__error(ncclInternalError,
                       "a send or receive reached the collective path");
  }
  return nccl__from_hoop(comm, res);
}

ncclResult_t nccl__run(hoop_comm_t hc, const struct nccl_call *calls, int n) {
  int np2p = 0;
  for (int i = 0; i < n; i++) {
    if (nccl__is_p2p(&calls[i])) {
      np2p++;
      continue;
    }
    ncclResult_t r = run_collective(hc, &calls[i]);
    if (r != ncclSuccess)
      return r;
  }
  if (np2p == 0)
    return ncclSuccess;
  /* Every send and receive of the group at once, so no order deadlocks. */
  hoop_result_t res = np2p > 1 ? hoop_group_start() : HOOP_SUCCESS;
  for (int i = 0; i < n && res == HOOP_SUCCESS; i++) {
    const struct nccl_call *c = &calls[i];
    if (c->kind == NCCL_K_SEND)
      res = hoop_send(hc, c->sendbuf, c->count, c->dtype, c->root, c->stream);
    else if (c->kind == NCCL_K_RECV)
      res = hoop_recv(hc, c->recvbuf, c->count, c->dtype, c->root, c->stream);
  }
  if (np2p > 1) {
    hoop_result_t end = hoop_group_end();
    if (res == HOOP_SUCCESS)
      res = end;
  }
  return nccl__from_hoop(calls[0].comm, res);
}
