/* NCCL's result codes and last-error text over hoop's. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "nccl/nccl_comm.h"

static _Thread_local char last_error[1024];

const char *nccl__last_error(void) { return last_error; }

ncclResult_t nccl__error(ncclResult_t result, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  HOOP_WARN("%s", last_error);
  return result;
}

ncclResult_t nccl__pass_error(ncclResult_t result, const char *text) {
  snprintf(last_error, sizeof last_error, "%s", text);
  return result;
}

static ncclResult_t map_result(hoop_result_t res) {
  switch (res) {
  case HOOP_SUCCESS:
    return ncclSuccess;
  case HOOP_ERR_INVALID_ARGUMENT:
    return ncclInvalidArgument;
  case HOOP_ERR_SYSTEM:
  case HOOP_ERR_NO_MEMORY:
    return ncclSystemError;
  case HOOP_ERR_REMOTE:
  case HOOP_ERR_TIMEOUT:
    return ncclRemoteError;
  case HOOP_ERR_INTERNAL:
    return ncclInternalError;
  case HOOP_ERR_INVALID_USAGE:
  case HOOP_ERR_MISMATCH:
  case HOOP_ERR_ABORTED:
  case HOOP_ERR_UNSUPPORTED:
  default:
    return ncclInvalidUsage;
  }
}

ncclResult_t nccl__from_hoop(ncclComm_t comm, hoop_result_t res) {
  if (res == HOOP_SUCCESS)
    return ncclSuccess;
  /* hoop has already logged the message; keep it for ncclGetLastError. */
  snprintf(last_error, sizeof last_error, "%s", hoop_last_error());
  ncclResult_t r = map_result(res);
  /*
   * Errors that involved a peer break hoop's communicator; NCCL programs
   * (PyTorch's watchdog) learn of that through ncclCommGetAsyncError.
   */
  if (comm != NULL && (res == HOOP_ERR_REMOTE || res == HOOP_ERR_TIMEOUT ||
                       res == HOOP_ERR_MISMATCH || res == HOOP_ERR_ABORTED)) {
    int expected = ncclSuccess;
    __atomic_compare_exchange_n(&comm->async_error, &expected, (int)r, false,
                                __ATOMIC_RELEASE, __ATOMIC_RELAXED);
  }
  return r;
}

NCCL_EXPORT const char *pncclGetErrorString(ncclResult_t result) {
  switch (result) {
  case ncclSuccess:
    return "no error";
  case ncclUnhandledCudaError:
    return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
  case ncclSystemError:
    return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
  case ncclInternalError:
    return "internal error - please report this issue to the hoop developers";
  case ncclInvalidArgument:
    return "invalid argument (run with NCCL_DEBUG=WARN for details)";
  case ncclInvalidUsage:
    return "invalid usage (run with NCCL_DEBUG=WARN for details)";
  case ncclRemoteError:
    return "remote process exited or there was a network error";
  case ncclInProgress:
    return "NCCL operation in progress";
  default:
    return "unknown result code";
  }
}
NCCL_ALIAS(ncclGetErrorString);

NCCL_EXPORT ncclResult_t pncclGetVersion(int *version) {
  if (version == NULL)
    return nccl__error(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}
NCCL_ALIAS(ncclGetVersion);

NCCL_EXPORT void pncclResetDebugInit(void) { nccl__reread_environment(); }
NCCL_ALIAS(ncclResetDebugInit);
