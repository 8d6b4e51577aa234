/*
 * Queries, memory, registrations and PreMulSum operators.  The queries
 * never wait on a peer: PyTorch's watchdog polls ncclCommGetAsyncError
 * from its own thread while the main thread's calls run.  ncclGetLastError
 * is a query too: what another thread met on the communicator.
 */
#include <stdlib.h>
#include <string.h>

#include "nccl/nccl_comm.h"

NCCL_EXPORT ncclResult_t pncclCommGetAsyncError(ncclComm_t comm,
                                                ncclResult_t *asyncError) {
  if (!nccl__comm_valid(comm) || asyncError == NULL)
    return nccl__error(ncclInvalidArgument,
                       "ncclCommGetAsyncError: %s",
                       asyncError == NULL ? "asyncError is NULL"
                                          : "not a communicator");
  ncclResult_t r = ncclSuccess;
  pthread_mutex_lock(&comm->lock);
  switch (LOAD(comm->state)) {
  case NCCL_COMM_INITIALIZING:
    *asyncError = ncclInProgress;
    break;
  case NCCL_COMM_FAILED:
    *asyncError = comm->init_result;
    break;
  default:
    *asyncError = (ncclResult_t)__atomic_load_n(&comm->async_error,
                                                __ATOMIC_ACQUIRE);
    /*
     * A device call that failed after it returned; asked under the lock so
     * an abort cannot free hoop's communicator meanwhile.
     */
    hoop_comm_t hc = LOAD(comm->hc);
    if (*asyncError == ncclSuccess && hc != NULL) {
      hoop_result_t e = HOOP_SUCCESS;
      if (hoop_comm_get_async_error(hc, &e) == HOOP_SUCCESS &&
          e != HOOP_SUCCESS)
        *asyncError = e == HOOP_ERR_REMOTE || e == HOOP_ERR_TIMEOUT
                          ? ncclRemoteError
                          : ncclUnhandledCudaError;
    }
  }
  pthread_mutex_unlock(&comm->lock);
  return r;
}
NCCL_ALIAS(ncclCommGetAsyncError);

NCCL_EXPORT const char *pncclGetLastError(ncclComm_t comm) {
  /*
   * NCCL keeps one text per thread; an error met by another thread (a
   * device call failing after it returned) is the communicator's own.
   */
  const char *text = nccl__last_error();
  if (text[0] != '\0' || !nccl__comm_valid(comm))
    return text;
  pthread_mutex_lock(&comm->lock);
  hoop_comm_t hc = LOAD(comm->hc);
  if (hc != NULL)
    text = hoop_comm_last_error(hc);
  pthread_mutex_unlock(&comm->lock);
  return text;
}
NCCL_ALIAS(ncclGetLastError);

/* Rank and size are final once a split has agreed on them. */
static ncclResult_t settled(ncclComm_t comm, const void *out,
                            const char *what) {
  if (!nccl__comm_valid(comm) || out == NULL)
    return nccl__error(ncclInvalidArgument, "%s: %s", what,
                       out == NULL ? "result pointer is NULL"
                                   : "not a communicator");
  pthread_mutex_lock(&comm->lock);
  while (LOAD(comm->state) == NCCL_COMM_INITIALIZING && !LOAD(comm->freeing))
    pthread_cond_wait(&comm->changed, &comm->lock);
  pthread_mutex_unlock(&comm->lock);
  return ncclSuccess;
}

NCCL_EXPORT ncclResult_t pncclCommCount(const ncclComm_t comm, int *count) {
  ncclResult_t r = settled(comm, count, "ncclCommCount");
  if (r == ncclSuccess)
    *count = comm->nranks;
  return r;
}
NCCL_ALIAS(ncclCommCount);

NCCL_EXPORT ncclResult_t pncclCommUserRank(const ncclComm_t comm, int *rank) {
  ncclResult_t r = settled(comm, rank, "ncclCommUserRank");
  if (r == ncclSuccess)
    *rank = comm->rank;
  return r;
}
NCCL_ALIAS(ncclCommUserRank);

NCCL_EXPORT ncclResult_t pncclCommCuDevice(const ncclComm_t comm,
                                           int *device) {
  ncclResult_t r = settled(comm, device, "ncclCommCuDevice");
  if (r == ncclSuccess)
    *device = comm->cuda_dev;
  return r;
}
NCCL_ALIAS(ncclCommCuDevice);

NCCL_EXPORT ncclResult_t pncclMemAlloc(void **ptr, size_t size) {
  if (ptr == NULL)
    return nccl__error(ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
  *ptr = NULL;
  if (size == 0)
    return ncclSuccess;
  return nccl__mem_alloc(ptr, size);
}
NCCL_ALIAS(ncclMemAlloc);

NCCL_EXPORT ncclResult_t pncclMemFree(void *ptr) {
  return ptr == NULL ? ncclSuccess : nccl__mem_free(ptr);
}
NCCL_ALIAS(ncclMemFree);

/*
 * A registration (buffer or window) is remembered and checked, nothing
 * more: hoop's transports copy through their own buffers and need none.
 */
#define REGISTRATION_MAGIC 0x72656768u /* "regh" */

struct registration {
  unsigned magic;
  ncclComm_t comm;
  void *buff;
  size_t size;
};

static ncclResult_t remember(ncclComm_t comm, void *buff, size_t size,
                             void **out, const char *what) {
  if (!nccl__comm_valid(comm) || out == NULL)
    return nccl__error(ncclInvalidArgument, "%s: %s", what,
                       out == NULL ? "handle pointer is NULL"
                                   : "not a communicator");
  if (buff == NULL && size > 0)
    return nccl__error(ncclInvalidArgument, "%s: buff is NULL", what);
  struct registration *reg = malloc(sizeof *reg);
  if (reg == NULL)
    return nccl__error(ncclSystemError, "%s: out of memory", what);
  *reg = (struct registration){REGISTRATION_MAGIC, comm, buff, size};
  *out = reg;
  return ncclSuccess;
}

static ncclResult_t forget(ncclComm_t comm, void *handle, const char *what) {
  struct registration *reg = handle;
  if (!nccl__comm_valid(comm) || reg == NULL ||
      reg->magic != REGISTRATION_MAGIC || reg->comm != comm)
    return nccl__error(ncclInvalidArgument,
                       "%s: not a registration of this communicator", what);
  reg->magic = 0;
  free(reg);
  return ncclSuccess;
}

NCCL_EXPORT ncclResult_t pncclCommRegister(const ncclComm_t comm, void *buff,
                                           size_t size, void **handle) {
  return remember(comm, buff, size, handle, "ncclCommRegister");
}
NCCL_ALIAS(ncclCommRegister);

NCCL_EXPORT ncclResult_t pncclCommDeregister(const ncclComm_t comm,
                                             void *handle) {
  return forget(comm, handle, "ncclCommDeregister");
}
NCCL_ALIAS(ncclCommDeregister);

NCCL_EXPORT ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void *buff,
                                                 size_t size,
                                                 ncclWindow_t *win,
                                                 int winFlags) {
  if (winFlags != NCCL_WIN_DEFAULT && winFlags != NCCL_WIN_COLL_SYMMETRIC)
    return nccl__error(ncclInvalidArgument,
                       "ncclCommWindowRegister: flags 0x%x", (unsigned)winFlags);
  void *handle = NULL;
  ncclResult_t r =
      remember(comm, buff, size, &handle, "ncclCommWindowRegister");
  if (r == ncclSuccess)
    *win = (ncclWindow_t)handle;
  return r;
}
NCCL_ALIAS(ncclCommWindowRegister);

NCCL_EXPORT ncclResult_t pncclCommWindowDeregister(ncclComm_t comm,
                                                   ncclWindow_t win) {
  return forget(comm, (void *)win, "ncclCommWindowDeregister");
}
NCCL_ALIAS(ncclCommWindowDeregister);

NCCL_EXPORT ncclResult_t pncclRedOpCreatePreMulSum(
    ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
    ncclScalarResidence_t residence, ncclComm_t comm) {
  const char *what = "ncclRedOpCreatePreMulSum";
  hoop_dtype_t dtype;
  ncclResult_t r = nccl__dtype(datatype, &dtype, what);
  if (r != ncclSuccess)
    return r;
  if (op == NULL || scalar == NULL)
    return nccl__error(ncclInvalidArgument, "%s: %s is NULL", what,
                       op == NULL ? "op" : "scalar");
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
    return nccl__error(ncclInvalidArgument, "%s: residence %d", what,
                       (int)residence);
  r = nccl__enter(comm, what, NULL);
  if (r != ncclSuccess)
    return r;
  struct nccl_premul p = {.used = true,
                          .dtype = datatype,
                          .residence = residence,
                          .device_scalar = scalar};
  if (residence == ncclScalarHostImmediate)
    memcpy(p.value, scalar, hoop_dtype_size(dtype));
  pthread_mutex_lock(&comm->lock);
  int slot = 0;
  while (slot < comm->npremul && comm->premul[slot].used)
    slot++;
  if (slot == comm->npremul) {
    struct nccl_premul *t =
        realloc(comm->premul, sizeof *t * (size_t)(comm->npremul + 1));
    if (t == NULL)
      r = ncclSystemError;
    else
      comm->premul = t, comm->npremul++;
  }
  if (r == ncclSuccess) {
    comm->premul[slot] = p;
    *op = (ncclRedOp_t)(ncclNumOps + slot);
  }
  pthread_mutex_unlock(&comm->lock);
  nccl__leave(comm);
  if (r != ncclSuccess)
    return nccl__error(r, "%s: out of memory", what);
  return ncclSuccess;
}
NCCL_ALIAS(ncclRedOpCreatePreMulSum);

NCCL_EXPORT ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  const char *what = "ncclRedOpDestroy";
  ncclResult_t r = nccl__enter(comm, what, NULL);
  if (r != ncclSuccess)
    return r;
  int slot = (int)op - ncclNumOps;
  pthread_mutex_lock(&comm->lock);
  bool ok = slot >= 0 && slot < comm->npremul && comm->premul[slot].used;
  if (ok)
    comm->premul[slot].used = false;
  pthread_mutex_unlock(&comm->lock);
  nccl__leave(comm);
  if (!ok)
    return nccl__error(ncclInvalidArgument,
                       "%s: op %d was not made by ncclRedOpCreatePreMulSum "
                       "on this communicator (or is destroyed)",
                       what, (int)op);
  return ncclSuccess;
}
NCCL_ALIAS(ncclRedOpDestroy);
