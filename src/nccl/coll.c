/*
 * NCCL's collectives and point-to-point calls, each checked against NCCL's
 * rules and run by hoop's own (gather and scatter are point-to-point
 * groups; PreMulSum scales each rank's input, then sums).
 */
#include <stdint.h>
#include <string.h>

#include "nccl/nccl_comm.h"

_Static_assert(ncclInt8 == (int)HOOP_I8 && ncclUint8 == (int)HOOP_U8 &&
                   ncclInt32 == (int)HOOP_I32 && ncclUint32 == (int)HOOP_U32 &&
                   ncclInt64 == (int)HOOP_I64 && ncclUint64 == (int)HOOP_U64 &&
                   ncclFloat16 == (int)HOOP_F16 &&
                   ncclFloat32 == (int)HOOP_F32 &&
                   ncclFloat64 == (int)HOOP_F64 &&
                   ncclBfloat16 == (int)HOOP_BF16,
               "NCCL and hoop number their types alike");

static const char *const kind_names[] = {
    [NCCL_K_ALLREDUCE] = "ncclAllReduce",
    [NCCL_K_BROADCAST] = "ncclBroadcast",
    [NCCL_K_REDUCE] = "ncclReduce",
    [NCCL_K_ALLGATHER] = "ncclAllGather",
    [NCCL_K_REDUCE_SCATTER] = "ncclReduceScatter",
    [NCCL_K_ALLTOALL] = "ncclAlltoAll",
    [NCCL_K_GATHER] = "ncclGather",
    [NCCL_K_SCATTER] = "ncclScatter",
    [NCCL_K_SEND] = "ncclSend",
    [NCCL_K_RECV] = "ncclRecv",
};

ncclResult_t nccl__dtype(ncclDataType_t in, hoop_dtype_t *out,
                         const char *what) {
  if ((int)in < 0 || (int)in >= ncclNumTypes)
    return nccl__error(ncclInvalidArgument,
                       "%s: datatype %d is not an ncclDataType_t", what,
                       (int)in);
  if ((int)in >= (int)HOOP_DTYPE_COUNT)
    return nccl__error(ncclInvalidArgument,
                       "%s: datatype %d is not supported by this hoop", what,
                       (int)in);
  *out = (hoop_dtype_t)in;
  return ncclSuccess;
}

ncclResult_t nccl__op(ncclComm_t comm, ncclRedOp_t in, hoop_op_t *out,
                      struct nccl_premul *premul, bool *is_premul,
                      const char *what) {
  static const hoop_op_t builtin[] = {
      [ncclSum] = HOOP_SUM, [ncclProd] = HOOP_PROD, [ncclMax] = HOOP_MAX,
      [ncclMin] = HOOP_MIN, [ncclAvg] = HOOP_AVG};
  *is_premul = false;
  if ((int)in >= 0 && (int)in < ncclNumOps) {
    *out = builtin[in];
    return ncclSuccess;
  }
  ncclResult_t r = ncclSuccess;
  int slot = (int)in - ncclNumOps;
  pthread_mutex_lock(&comm->lock);
  if (slot >= 0 && slot < comm->npremul && comm->premul[slot].used) {
    *premul = comm->premul[slot];
    *is_premul = true;
    *out = HOOP_SUM;
  } else {
    r = ncclInvalidArgument;
  }
  pthread_mutex_unlock(&comm->lock);
  if (r != ncclSuccess)
    return nccl__error(r,
                       "%s: op %d is neither a built-in operator nor one "
                       "made by ncclRedOpCreatePreMulSum on this "
                       "communicator",
                       what, (int)in);
  return ncclSuccess;
}

/* ---- running one call ---------------------------------------------------- */

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

static bool is_p2p(const struct nccl_call *c) {
  return c->kind == NCCL_K_SEND || c->kind == NCCL_K_RECV;
}

ncclResult_t nccl__run(hoop_comm_t hc, const struct nccl_call *calls, int n) {
  int np2p = 0;
  for (int i = 0; i < n; i++) {
    if (is_p2p(&calls[i])) {
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

/* ---- the entry points ---------------------------------------------------- */

/*
 * Checks what hoop cannot know in a group (NCCL's operator, type and root
 * numbering) before the call is queued, so errors come from the call.
 */
static ncclResult_t submit(enum nccl_kind kind, const void *sendbuf,
                           void *recvbuf, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op,
                           bool reduces, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  const char *what = kind_names[kind];
  struct nccl_call c = {.kind = kind,
                        .comm = comm,
                        .sendbuf = sendbuf,
                        .recvbuf = recvbuf,
                        .count = count,
                        .root = root,
                        .stream = stream};
  ncclResult_t r = nccl__dtype(datatype, &c.dtype, what);
  if (r != ncclSuccess)
    return r;
  hoop_comm_t hc;
  r = nccl__enter(comm, what, &hc);
  if (r != ncclSuccess)
    return r;
  if (reduces)
    r = nccl__op(comm, op, &c.op, &c.scalar, &c.premul, what);
  bool rooted = kind == NCCL_K_BROADCAST || kind == NCCL_K_REDUCE ||
                kind == NCCL_K_GATHER || kind == NCCL_K_SCATTER ||
                is_p2p(&c);
  if (r == ncclSuccess && rooted && (root < 0 || root >= comm->nranks))
    r = nccl__error(ncclInvalidArgument, "%s: %s %d is outside 0..%d", what,
                    is_p2p(&c) ? "peer" : "root", root, comm->nranks - 1);
  /* hoop checks the other buffers; these depend on the root. */
  if (r == ncclSuccess && count > 0 &&
      (kind == NCCL_K_GATHER || kind == NCCL_K_SCATTER)) {
    bool root_side = comm->rank == root;
    bool needs_send = kind == NCCL_K_GATHER || root_side;
    bool needs_recv = kind == NCCL_K_SCATTER || root_side;
    if ((needs_send && sendbuf == NULL) || (needs_recv && recvbuf == NULL))
      r = nccl__error(ncclInvalidArgument, "%s: %s is NULL on rank %d", what,
                      needs_send && sendbuf == NULL ? "sendbuff" : "recvbuff",
                      comm->rank);
  }
  if (r == ncclSuccess)
    r = nccl__submit(&c, hc);
  nccl__leave(comm);
  return r;
}

NCCL_EXPORT ncclResult_t pncclAllReduce(const void *sendbuff, void *recvbuff,
                                        size_t count, ncclDataType_t datatype,
                                        ncclRedOp_t op, ncclComm_t comm,
                                        cudaStream_t stream) {
  return submit(NCCL_K_ALLREDUCE, sendbuff, recvbuff, count, datatype, op,
                true, 0, comm, stream);
}
NCCL_ALIAS(ncclAllReduce);

NCCL_EXPORT ncclResult_t pncclReduce(const void *sendbuff, void *recvbuff,
                                     size_t count, ncclDataType_t datatype,
                                     ncclRedOp_t op, int root,
                                     ncclComm_t comm, cudaStream_t stream) {
  return submit(NCCL_K_REDUCE, sendbuff, recvbuff, count, datatype, op, true,
                root, comm, stream);
}
NCCL_ALIAS(ncclReduce);

NCCL_EXPORT ncclResult_t pncclBroadcast(const void *sendbuff, void *recvbuff,
                                        size_t count, ncclDataType_t datatype,
                                        int root, ncclComm_t comm,
                                        cudaStream_t stream) {
  return submit(NCCL_K_BROADCAST, sendbuff, recvbuff, count, datatype,
                ncclSum, false, root, comm, stream);
}
NCCL_ALIAS(ncclBroadcast);

NCCL_EXPORT ncclResult_t pncclBcast(void *buff, size_t count,
                                    ncclDataType_t datatype, int root,
                                    ncclComm_t comm, cudaStream_t stream) {
  return submit(NCCL_K_BROADCAST, buff, buff, count, datatype, ncclSum,
                false, root, comm, stream);
}
NCCL_ALIAS(ncclBcast);

NCCL_EXPORT ncclResult_t pncclAllGather(const void *sendbuff, void *recvbuff,
                                        size_t sendcount,
                                        ncclDataType_t datatype,
                                        ncclComm_t comm, cudaStream_t stream) {
  return submit(NCCL_K_ALLGATHER, sendbuff, recvbuff, sendcount, datatype,
                ncclSum, false, 0, comm, stream);
}
NCCL_ALIAS(ncclAllGather);

NCCL_EXPORT ncclResult_t pncclReduceScatter(const void *sendbuff,
                                            void *recvbuff, size_t recvcount,
                                            ncclDataType_t datatype,
                                            ncclRedOp_t op, ncclComm_t comm,
                                            cudaStream_t stream) {
  return submit(NCCL_K_REDUCE_SCATTER, sendbuff, recvbuff, recvcount,
                datatype, op, true, 0, comm, stream);
}
NCCL_ALIAS(ncclReduceScatter);

NCCL_EXPORT ncclResult_t pncclAlltoAll(const void *sendbuff, void *recvbuff,
                                       size_t count, ncclDataType_t datatype,
                                       ncclComm_t comm, cudaStream_t stream) {
  return submit(NCCL_K_ALLTOALL, sendbuff, recvbuff, count, datatype, ncclSum,
                false, 0, comm, stream);
}
NCCL_ALIAS(ncclAlltoAll);

NCCL_EXPORT ncclResult_t pncclGather(const void *sendbuff, void *recvbuff,
                                     size_t count, ncclDataType_t datatype,
                                     int root, ncclComm_t comm,
                                     cudaStream_t stream) {
  return submit(NCCL_K_GATHER, sendbuff, recvbuff, count, datatype, ncclSum,
                false, root, comm, stream);
}
NCCL_ALIAS(ncclGather);

NCCL_EXPORT ncclResult_t pncclScatter(const void *sendbuff, void *recvbuff,
                                      size_t count, ncclDataType_t datatype,
                                      int root, ncclComm_t comm,
                                      cudaStream_t stream) {
  return submit(NCCL_K_SCATTER, sendbuff, recvbuff, count, datatype, ncclSum,
                false, root, comm, stream);
}
NCCL_ALIAS(ncclScatter);

NCCL_EXPORT ncclResult_t pncclSend(const void *sendbuff, size_t count,
                                   ncclDataType_t datatype, int peer,
                                   ncclComm_t comm, cudaStream_t stream) {
  return submit(NCCL_K_SEND, sendbuff, NULL, count, datatype, ncclSum, false,
                peer, comm, stream);
}
NCCL_ALIAS(ncclSend);

NCCL_EXPORT ncclResult_t pncclRecv(void *recvbuff, size_t count,
                                   ncclDataType_t datatype, int peer,
                                   ncclComm_t comm, cudaStream_t stream) {
  return submit(NCCL_K_RECV, NULL, recvbuff, count, datatype, ncclSum, false,
                peer, comm, stream);
}
NCCL_ALIAS(ncclRecv);
