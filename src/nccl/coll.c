/*
 * NCCL's collectives and point-to-point calls, each checked against NCCL's
 * rules before it runs (run.c) or joins a group (group.c).
 */
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
                nccl__is_p2p(&c);
  if (r == ncclSuccess && rooted && (root < 0 || root >= comm->nranks))
    r = nccl__error(ncclInvalidArgument, "%s: %s %d is outside 0..%d", what,
                    nccl__is_p2p(&c) ? "peer" : "root", root, comm->nranks - 1);
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
