/*
 * The NCCL API layer: NCCL's communicator, its errors and its groups, on
 * top of hoop's public API.  It knows hoop only through hoop.h (and the
 * reduction module for PreMulSum's scaling), so hoop's core never learns
 * NCCL's numbering.
 */
#ifndef HOOP_NCCL_COMM_H
#define HOOP_NCCL_COMM_H

#include <pthread.h>
#include <stdbool.h>

#include "hoop.h"
#include "nccl.h"

/*
 * Every API function is defined once as pncclX and exported twice: pncclX
 * itself and a weak ncclX that a profiling library may interpose, as NCCL
 * ships them.
 */
#define NCCL_EXPORT __attribute__((visibility("default")))
#define NCCL_ALIAS(name)                                                      \
  extern __typeof(p##name) name                                               \
      __attribute__((weak, alias("p" #name), visibility("default")))

/* The fields of struct ncclComm read without its lock. */
#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_SEQ_CST)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_SEQ_CST)

#define NCCL_COMM_MAGIC 0x6e63636c686f6f70ULL /* "ncclhoop" */

enum nccl_state {
  NCCL_COMM_INITIALIZING, /* a non-blocking init or split still runs */
  NCCL_COMM_READY,
  NCCL_COMM_FAILED,       /* init failed: only destroy and abort remain */
  NCCL_COMM_REVOKED,      /* hoop's communicator is gone; shrink remains */
};

/* A PreMulSum operator: the scalar, by value or by address. */
struct nccl_premul {
  bool used;
  ncclDataType_t dtype;
  ncclScalarResidence_t residence;
  const void *device_scalar;    /* ncclScalarDevice */
  unsigned char value[8];       /* ncclScalarHostImmediate */
};

struct ncclComm {
  unsigned long long magic;
  int rank, nranks;
  int cuda_dev; /* -1: host memory only */
  char name[64]; /* config->commName, for messages */

  /*
   * A call enters by counting itself in `busy` and finding the state READY
   * and `freeing` clear, without the lock; destroy and abort set
   * `freeing`, then wait for `busy` to drain.  Every other change happens
   * under the lock, and `state`, `freeing` and `hc` are also read without
   * it (atomically).
   */
  pthread_mutex_t lock;
  pthread_cond_t changed;       /* state left INITIALIZING */
  int state;                    /* enum nccl_state */
  ncclResult_t init_result;     /* with FAILED */
  bool abandoned;               /* aborted while initializing */
  int busy;
  int freeing;
  hoop_comm_t hc;               /* set once READY */
  /* The first peer failure a call met, for ncclCommGetAsyncError. */
  int async_error;              /* atomic ncclResult_t */

  /*
   * Every rank's spare rendezvous id, made at init: the lowest rank that
   * stays in a shrink hosts the new communicator on its spare, so a shrink
   * needs nothing from the ranks it drops nor from a broken data path.
   */
  hoop_unique_id_t *spares;
  bool *spare_used;

  struct nccl_premul *premul; /* under lock */
  int npremul;
};

/* Records `fmt` as this thread's last error and returns `result`. */
ncclResult_t nccl__error(ncclResult_t result, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Makes another thread's error, already logged there, this thread's. */
ncclResult_t nccl__pass_error(ncclResult_t result, const char *text);
/* Maps a failed hoop call onto NCCL's codes, keeping hoop's message. */
ncclResult_t nccl__from_hoop(ncclComm_t comm, hoop_result_t res);
const char *nccl__last_error(void);
/* Maps NCCL_DEBUG and friends onto hoop's variables again. */
void nccl__reread_environment(void);

/*
 * Enters a call on `comm`: checks the handle, waits for a non-blocking
 * init to end, and keeps the struct alive until nccl__leave even when
 * another thread aborts it.  *hc (unless NULL) gets hoop's communicator as
 * it was on entry.  `what` names the call in messages.
 */
ncclResult_t nccl__enter(ncclComm_t comm, const char *what, hoop_comm_t *hc);
void nccl__leave(ncclComm_t comm);
/* A handle check for the queries that must not wait. */
bool nccl__comm_valid(ncclComm_t comm);
/* Waits, without the lock, until no call is inside `c`. */
void nccl__wait_idle(ncclComm_t c);
/* Frees what a communicator holds once no call is inside it. */
void nccl__comm_free(ncclComm_t c);
/* Calls read `state` without the lock, so even locked changes are atomic. */
static inline void nccl__set_state(ncclComm_t c, enum nccl_state s) {
  STORE(c->state, (int)s);
}

/* Converts NCCL's type and operator; PreMulSum ops resolve to *premul. */
ncclResult_t nccl__dtype(ncclDataType_t in, hoop_dtype_t *out,
                         const char *what);
ncclResult_t nccl__op(ncclComm_t comm, ncclRedOp_t in, hoop_op_t *out,
                      struct nccl_premul *premul, bool *is_premul,
                      const char *what);

/* Reads a versioned ncclConfig_t as NCCL does. */
ncclResult_t nccl__read_config(const ncclConfig_t *config, ncclConfig_t *out,
                               const char *what);

/* The calls a group queues, and running them. */
enum nccl_kind {
  NCCL_K_ALLREDUCE,
  NCCL_K_BROADCAST,
  NCCL_K_REDUCE,
  NCCL_K_ALLGATHER,
  NCCL_K_REDUCE_SCATTER,
  NCCL_K_ALLTOALL,
  NCCL_K_GATHER,
  NCCL_K_SCATTER,
  NCCL_K_SEND,
  NCCL_K_RECV,
};

struct nccl_call {
  enum nccl_kind kind;
  ncclComm_t comm;
  const void *sendbuf;
  void *recvbuf;
  size_t count;
  hoop_dtype_t dtype;
  hoop_op_t op;
  bool premul;
  struct nccl_premul scalar;
  int root; /* or peer */
  cudaStream_t stream;
};

static inline bool nccl__is_p2p(const struct nccl_call *c) {
  return c->kind == NCCL_K_SEND || c->kind == NCCL_K_RECV;
}

/* Runs `call` now, or queues it when a group is open on this thread. */
ncclResult_t nccl__submit(const struct nccl_call *call, hoop_comm_t hc);
/*
 * Runs calls of one communicator, entered as `hc`: the collectives in
 * order, then every send and receive together.
 */
ncclResult_t nccl__run(hoop_comm_t hc, const struct nccl_call *calls, int n);

/* GPU side: none in builds without CUDA. */
int nccl__cuda_current_device(void);
bool nccl__is_device_memory(const void *p);
ncclResult_t nccl__mem_alloc(void **ptr, size_t size);
ncclResult_t nccl__mem_free(void *ptr);
/* dst = src * scalar (count elements), on `stream` for device memory. */
ncclResult_t nccl__scale(const struct nccl_premul *s, const void *src,
                         size_t count, hoop_dtype_t dtype, void *dst,
                         cudaStream_t stream);
ncclResult_t nccl__temp_alloc(void **p, size_t bytes, bool device,
                              cudaStream_t stream);
void nccl__temp_free(void *p, bool device, cudaStream_t stream);

#endif /* HOOP_NCCL_COMM_H */
