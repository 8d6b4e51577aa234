/*
 * hoop: collective communication for data-parallel training.
 *
 * One communicator joins `nranks` processes.  Every collective is called by
 * every rank of the communicator, in the same order, with matching
 * arguments; hoop checks that they match and fails on every rank when they
 * do not.  All calls return a hoop_result_t; hoop_comm_last_error() (or
 * hoop_last_error() when there is no communicator yet) says what failed,
 * where, and with which peer.
 */
#ifndef HOOP_H
#define HOOP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(HOOP_BUILDING_LIBRARY) && defined(__GNUC__)
#define HOOP_API __attribute__((visibility("default")))
#else
#define HOOP_API
#endif

#define HOOP_VERSION_MAJOR 0
#define HOOP_VERSION_MINOR 1
#define HOOP_VERSION_PATCH 0

/*
 * Result codes.  One list generates the enum, hoop_strerror() and
 * hoop_result_name(), so the three never disagree.
 */
#define HOOP_RESULT_LIST(X)                                                   \
  X(HOOP_SUCCESS, 0, "success")                                               \
  X(HOOP_ERR_INVALID_ARGUMENT, 1, "invalid argument")                         \
  X(HOOP_ERR_INVALID_USAGE, 2, "invalid usage")                               \
  X(HOOP_ERR_SYSTEM, 3, "system call failed")                                 \
  X(HOOP_ERR_REMOTE, 4, "a peer failed or closed its connection")             \
  X(HOOP_ERR_TIMEOUT, 5, "timed out waiting for a peer")                      \
  X(HOOP_ERR_MISMATCH, 6, "ranks called different collectives or arguments")  \
  X(HOOP_ERR_NO_MEMORY, 7, "out of memory")                                   \
  X(HOOP_ERR_ABORTED, 8, "communicator was aborted")                          \
  X(HOOP_ERR_UNSUPPORTED, 9, "not supported in this build")                   \
  X(HOOP_ERR_INTERNAL, 10, "internal error")

typedef enum hoop_result {
#define HOOP_RESULT_ENUM_(name, value, text) name = value,
  HOOP_RESULT_LIST(HOOP_RESULT_ENUM_)
#undef HOOP_RESULT_ENUM_
} hoop_result_t;

/* Element types.  Values are part of the wire protocol: never renumber. */
typedef enum hoop_dtype {
  HOOP_I8 = 0,
  HOOP_U8 = 1,
  HOOP_I32 = 2,
  HOOP_U32 = 3,
  HOOP_I64 = 4,
  HOOP_U64 = 5,
  HOOP_F16 = 6,
  HOOP_F32 = 7,
  HOOP_F64 = 8,
  HOOP_BF16 = 9,
  /* OCP 8-bit floats.  E4M3 is the "fn" variant: no infinities, NaN only
     as 0x7f/0xff, largest finite 448.  E5M2 is IEEE-like (infinities,
     NaNs), largest finite 57344.  Each combination is computed in float
     and rounded once to nearest even, saturating: a result past the
     largest finite value, infinity included, becomes that value
     (docs/api.md, "Element types"). */
  HOOP_F8E4M3 = 10,
  HOOP_F8E5M2 = 11,
  HOOP_DTYPE_COUNT
} hoop_dtype_t;

/*
 * Reduction operators.  AVG is SUM divided by the number of ranks (integer
 * division for integer types, as in NCCL).  MIN and MAX return NaN when
 * either operand is NaN (IEEE 754-2019 minimum/maximum).
 */
typedef enum hoop_op {
  HOOP_SUM = 0,
  HOOP_PROD = 1,
  HOOP_MIN = 2,
  HOOP_MAX = 3,
  HOOP_AVG = 4,
  HOOP_OP_COUNT
} hoop_op_t;

/*
 * Algorithms.  AUTO asks the cost model (see hoop_comm_predict) and is the
 * default; HOOP_ALGO=ring|tree|ps|hier or hoop_comm_set_algo() override
 * it.  What each setting runs:
 *   all-reduce, barrier: RING, TREE (a double binary tree), PS (a
 *     parameter server at rank 0), HIER (hierarchical: rings inside the
 *     hosts and across them, where every host has as many ranks, at least
 *     2, and there are 2 hosts or more; elsewhere the ring, which is what
 *     it comes to), AUTO the model's pick of those (or ONESHOT).
 *   broadcast, reduce: RING a pipelined chain from the root, TREE a binary
 *     tree; AUTO and PS the model's pick of the two.  A parameter server
 *     is an all-reduce schedule, and PS set for a job (HOOP_ALGO) still
 *     covers its broadcasts: they get the model's pick rather than an
 *     error or a fixed chain; so does HIER.
 *   reduce-scatter, all-gather: RING the ring, HIER the hierarchical
 *     schedule where it applies, the others the model's pick of the two.
 * hoop_comm_get_stats counts each call under the one that ran (a chain
 * under RING), never under PS for broadcast or reduce.
 */
typedef enum hoop_algo {
  HOOP_ALGO_AUTO = 0,
  HOOP_ALGO_RING = 1,
  HOOP_ALGO_TREE = 2,
  HOOP_ALGO_PS = 3,
  HOOP_ALGO_P2P = 4, /* send/recv and all-to-all; not selectable */
  /* All-reduce where every rank reduces the whole buffer: CUDA IPC's, by
     HOOP_CUDA_IPC_ONESHOT_BYTES, and AUTO's on 2 ranks up to
     HOOP_ONESHOT_BYTES; not selectable */
  HOOP_ALGO_ONESHOT = 5,
  /* All-reduce in three rings: inside each host, across the hosts, inside
     again (reduce-scatter the first two, all-gather the last two); for
     ranks on 2 or more hosts with as many (2 or more) on each */
  HOOP_ALGO_HIER = 6,
  HOOP_ALGO_COUNT
} hoop_algo_t;

/* Collective kinds, as counted in hoop_stats_t.  Values travel on the wire. */
typedef enum hoop_coll {
  HOOP_COLL_ALLREDUCE = 1,
  HOOP_COLL_REDUCE_SCATTER = 2,
  HOOP_COLL_ALLGATHER = 3,
  HOOP_COLL_BROADCAST = 4,
  HOOP_COLL_REDUCE = 5,
  HOOP_COLL_BARRIER = 6,
  HOOP_COLL_SENDRECV = 7,
  HOOP_COLL_ALLTOALL = 8,
  HOOP_COLL_COUNT
} hoop_coll_t;

typedef struct hoop_comm *hoop_comm_t;

/* A CUDA stream (cudaStream_t) for device buffers; NULL for host buffers. */
typedef void *hoop_stream_t;

#define HOOP_UNIQUE_ID_BYTES 128
typedef struct hoop_unique_id {
  char internal[HOOP_UNIQUE_ID_BYTES];
} hoop_unique_id_t;

/*
 * Per-communicator settings.  A field left at its HOOP_CONFIG_INIT value
 * takes the environment variable named beside it, then the default.  The
 * `size` and `version` fields let later versions of hoop grow the struct
 * without breaking programs built against this one.
 */
#define HOOP_CONFIG_VERSION 1
typedef struct hoop_config {
  size_t size;
  unsigned int version;
  int timeout_ms;            /* HOOP_TIMEOUT_MS; 0 = default           */
  int nsocks;                /* HOOP_NSOCKS; 0 = default               */
  size_t slice_bytes;        /* HOOP_SLICE_BYTES; 0 = default          */
  const char *socket_ifname; /* HOOP_SOCKET_IFNAME; NULL = default     */
} hoop_config_t;

#define HOOP_CONFIG_INIT {sizeof(hoop_config_t), HOOP_CONFIG_VERSION, 0, 0, 0, NULL}

HOOP_API const char *hoop_strerror(hoop_result_t result);
HOOP_API const char *hoop_result_name(hoop_result_t result);
HOOP_API const char *hoop_version_string(void);

/* Bytes per element of `dtype`, or 0 when `dtype` is not a hoop_dtype_t. */
HOOP_API size_t hoop_dtype_size(hoop_dtype_t dtype);
HOOP_API const char *hoop_dtype_name(hoop_dtype_t dtype);
HOOP_API const char *hoop_op_name(hoop_op_t op);

/*
 * The last error this thread saw, including errors from calls that had no
 * communicator yet (init).  Never NULL; "" when there was none.
 */
HOOP_API const char *hoop_last_error(void);

/*
 * Threads.  A communicator's calls (the collectives, send and recv, groups,
 * all-to-all) are made by one thread at a time: a second thread's call
 * fails with HOOP_ERR_INVALID_USAGE.  The queries may be made from any
 * thread, also while another thread's calls run or device calls are queued
 * (as PyTorch's watchdog polls): hoop_comm_rank, hoop_comm_size,
 * hoop_comm_last_error, hoop_comm_get_async_error, hoop_comm_device_path,
 * hoop_comm_get_algo, hoop_comm_set_algo, hoop_comm_get_model,
 * hoop_comm_predict, hoop_comm_rank_info, hoop_comm_transport and the
 * counters (hoop_comm_get_stats, hoop_comm_get_peer_bytes,
 * hoop_comm_reset_stats, which first wait for the device calls queued
 * before them).  They answer on a broken communicator too.
 * hoop_comm_abort may be called from any thread; hoop_comm_destroy only
 * when no other call on the communicator is running.
 */

/*
 * Creates the rendezvous identity of a new communicator.  The process that
 * calls this must host rank 0 (it starts listening for the other ranks
 * here); hand the id to every other rank (a file only you can read,
 * MPI_Bcast).  It holds the job's secret: whoever has it can join the
 * communicator (docs/security.md).
 */
HOOP_API hoop_result_t hoop_get_unique_id(hoop_unique_id_t *id);

/*
 * Gives up an id that will not be used after all: the process that made it
 * stops listening for it.  Ids that a communicator was made from need no
 * release; elsewhere it does nothing.
 */
HOOP_API hoop_result_t hoop_unique_id_release(const hoop_unique_id_t *id);

/*
 * Joins communicator `id` as `rank` of `nranks`.  Blocks until every rank
 * has joined, or fails after the timeout naming the ranks that never came.
 * `config` may be NULL.
 */
HOOP_API hoop_result_t hoop_comm_init_rank(hoop_comm_t *comm, int nranks,
                                           const hoop_unique_id_t *id,
                                           int rank,
                                           const hoop_config_t *config);

/*
 * Like hoop_comm_init_rank, with rank, size and rendezvous address from the
 * environment: HOOP_RANK/HOOP_WORLD_SIZE/HOOP_ROOT_ADDR (set by hoop-run),
 * torchrun's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, Open MPI's
 * OMPI_COMM_WORLD_RANK/SIZE or Slurm's SLURM_PROCID/SLURM_NTASKS in an
 * srun job step (a batch script that runs the program without srun fails
 * at once with HOOP_ERR_INVALID_USAGE).  Ranks that meet at an address
 * share a secret from HOOP_AUTH_TOKEN or HOOP_AUTH_TOKEN_FILE (hoop-run
 * sets one); without one this fails at once with HOOP_ERR_INVALID_USAGE
 * unless HOOP_AUTH=off.  With HOOP_ELASTIC=1 in rank 0's environment
 * (hoop-run --elastic sets it) the job forms without ranks that do not
 * come within half the timeout, or that die before it forms: the others
 * get a communicator of fewer ranks, numbered again in their order
 * (hoop_comm_rank and hoop_comm_size say where they stand).
 */
HOOP_API hoop_result_t hoop_comm_init_env(hoop_comm_t *comm,
                                          const hoop_config_t *config);

/* Frees the communicator.  Call it when no collective is in progress. */
HOOP_API hoop_result_t hoop_comm_destroy(hoop_comm_t comm);

/*
 * Tears the communicator down at once: closes its connections (peers in a
 * collective with it fail with HOOP_ERR_REMOTE), makes a collective running
 * in another thread return HOOP_ERR_ABORTED, then frees it.
 */
HOOP_API hoop_result_t hoop_comm_abort(hoop_comm_t comm);

/*
 * After a call failed because ranks died or stopped: the ranks still alive
 * agree on who is left and join a new communicator of them, without the
 * lost ranks' help.  Every surviving rank calls it on its broken
 * communicator (called on a live one, it breaks it: all ranks then shrink
 * together, and nobody is lost).  The survivors keep their order: new rank
 * i is the i-th lowest old rank kept, and old_ranks (NULL, or room for
 * comm's size) receives each new rank's old one.  `config` is the new
 * communicator's, as in hoop_comm_init_rank.
 *
 * A rank is held lost when its process has gone, when a survivor's stall
 * report found it silent (stopped, hung, or busy outside hoop for the
 * whole timeout), or when it has not called hoop_comm_shrink within comm's
 * timeout.  The whole call is bounded by twice that timeout.  A rank held
 * lost gets HOOP_ERR_REMOTE from this call and from every later call on
 * comm, never a place: a rank that was stopped reads that it was left out
 * when it runs again.  At most HOOP_SHRINK_MAX_LOST (32) ranks are lost
 * in one shrink.  comm stays broken: destroy it afterwards.
 */
HOOP_API hoop_result_t hoop_comm_shrink(hoop_comm_t comm,
                                        const hoop_config_t *config,
                                        hoop_comm_t *newcomm, int *old_ranks);

/*
 * Lets the processes that wait to join the job (hoop_comm_join) in.
 * Collective over comm, at a point the members choose (a step boundary):
 * *newcomm is NULL and *joined 0 when nobody waits (then it costs one
 * small broadcast), else a communicator of the members, in their order,
 * then the newcomers, and *joined their number (joined may be NULL).
 * comm stays usable either way, and when the grown communicator fails to
 * form (a newcomer died meanwhile), this returns the error and the
 * members go on with comm.  Rank 0 listens for newcomers at the job's
 * address (HOOP_ROOT_ADDR, or torchrun's MASTER_ADDR and MASTER_PORT + 1)
 * from its first call on, given the job's secret there (HOOP_AUTH_TOKEN
 * or HOOP_AUTH_TOKEN_FILE) as the newcomers have it, also when comm was
 * made from a unique id with a key of its own; after a shrink, the new
 * rank 0 listens there when the address is on its host.
 */
HOOP_API hoop_result_t hoop_comm_grow(hoop_comm_t comm,
                                      const hoop_config_t *config,
                                      hoop_comm_t *newcomm, int *joined);

/*
 * Joins a running job, as a lost rank's replacement does: dials the job's
 * address from the environment (as hoop_comm_init_env reads it), proves
 * the job's secret (HOOP_AUTH_TOKEN or HOOP_AUTH_TOKEN_FILE, as the
 * members have it), and waits, up to the timeout, until the members call
 * hoop_comm_grow.  *comm is then the job's communicator, in which this
 * process ranks after the members.  A process without the secret is
 * refused and never counted.
 */
HOOP_API hoop_result_t hoop_comm_join(hoop_comm_t *comm,
                                      const hoop_config_t *config);

HOOP_API hoop_result_t hoop_comm_rank(hoop_comm_t comm, int *rank);
HOOP_API hoop_result_t hoop_comm_size(hoop_comm_t comm, int *nranks);

/*
 * The last error message of `comm`, whichever thread met it; "" when there
 * was none.  A copy, valid until this thread's next call of this function.
 */
HOOP_API const char *hoop_comm_last_error(hoop_comm_t comm);

/*
 * The first error of a call on device buffers that failed after it had
 * returned (like ncclCommGetAsyncError), or HOOP_SUCCESS; never waits.
 * Such a failure breaks the communicator, and its text is in
 * hoop_comm_last_error().  hoop judges a device call once the GPU has run
 * it, so a call whose peer failed can end on the stream (its waits
 * released, its results garbage) a moment before its error shows here:
 * poll, as a watchdog does, and the error comes within the communicator's
 * timeout.
 */
HOOP_API hoop_result_t hoop_comm_get_async_error(hoop_comm_t comm,
                                                 hoop_result_t *error);

/*
 * How this rank's calls on device buffers move data: "cuda_ipc" (every rank
 * on one host, reading each other's GPU memory), "staged" (through pinned
 * host memory and the host transports), or "none" before the first device
 * call, with one rank, or without CUDA.  The name is a static string.
 */
HOOP_API hoop_result_t hoop_comm_device_path(hoop_comm_t comm,
                                             const char **name);

/*
 * Collectives follow NCCL's conventions.  Counts are in elements.  A call
 * on host buffers blocks until the result is in `recvbuf` (with a stream,
 * it first waits for the work queued there).  A call on CUDA device
 * buffers (builds with CUDA) is queued behind the work on `stream` and
 * returns; the result is ready when the stream reaches it, and work queued
 * on the stream after the call sees it.  All ranks pass the same kind of
 * memory in a call; NULL is CUDA's legacy default stream.  After an error
 * that involved a peer (timeout, lost connection, mismatched calls) the
 * communicator is broken: later calls fail at once, naming the first
 * error, and it must be destroyed; argument errors leave it usable.  The
 * queries (see Threads), hoop_comm_shrink, hoop_comm_abort and
 * hoop_comm_destroy still work on it.
 *
 * A call that fails leaves its sendbuf as it was (hoop never writes a send
 * buffer) and its recvbuf undefined: elements may hold the result, the
 * input or a partial sum.  An in-place call's input is therefore lost; a
 * step that must be redone after a failure needs its own copy of it.
 *
 * allreduce: recvbuf[i] = op over ranks of sendbuf[i], i < count.
 *   In place when sendbuf == recvbuf.
 */
HOOP_API hoop_result_t hoop_allreduce(hoop_comm_t comm, const void *sendbuf,
                                      void *recvbuf, size_t count,
                                      hoop_dtype_t dtype, hoop_op_t op,
                                      hoop_stream_t stream);

/*
 * reduce_scatter: sendbuf holds nranks * recvcount elements; rank r gets
 *   block r of the reduction.  In place when
 *   recvbuf == sendbuf + rank * recvcount elements.
 */
HOOP_API hoop_result_t hoop_reduce_scatter(hoop_comm_t comm,
                                           const void *sendbuf, void *recvbuf,
                                           size_t recvcount,
                                           hoop_dtype_t dtype, hoop_op_t op,
                                           hoop_stream_t stream);

/*
 * allgather: recvbuf gets nranks * sendcount elements, block r from rank r.
 *   In place when sendbuf == recvbuf + rank * sendcount elements.
 */
HOOP_API hoop_result_t hoop_allgather(hoop_comm_t comm, const void *sendbuf,
                                      void *recvbuf, size_t sendcount,
                                      hoop_dtype_t dtype,
                                      hoop_stream_t stream);

/*
 * broadcast: recvbuf on every rank gets root's sendbuf (count elements).
 *   sendbuf is read on the root only; in place when sendbuf == recvbuf.
 */
HOOP_API hoop_result_t hoop_broadcast(hoop_comm_t comm, const void *sendbuf,
                                      void *recvbuf, size_t count,
                                      hoop_dtype_t dtype, int root,
                                      hoop_stream_t stream);

/*
 * reduce: root's recvbuf gets the reduction of every rank's sendbuf.
 *   recvbuf is written on the root only (it may be NULL elsewhere).
 */
HOOP_API hoop_result_t hoop_reduce(hoop_comm_t comm, const void *sendbuf,
                                   void *recvbuf, size_t count,
                                   hoop_dtype_t dtype, hoop_op_t op, int root,
                                   hoop_stream_t stream);

/* Returns on a rank once every rank has entered the barrier. */
HOOP_API hoop_result_t hoop_barrier(hoop_comm_t comm);

/*
 * Point to point.  Device buffers go through host memory: a send copies
 * its buffer out once `stream` has run the work queued before it, and a
 * receive copies in on `stream` before its call (or group) returns, so
 * unlike NCCL these calls return only once the data has moved.  Outside a
 * group each call blocks until done.  Between
 * hoop_group_start() and hoop_group_end() calls are queued and run
 * together at hoop_group_end(), so that matching sends and receives
 * between several peers cannot deadlock; messages between two ranks match
 * in call order.  A rank may send to itself inside a group.  A group
 * spans one communicator.
 */
HOOP_API hoop_result_t hoop_send(hoop_comm_t comm, const void *buf,
                                 size_t count, hoop_dtype_t dtype, int peer,
                                 hoop_stream_t stream);
HOOP_API hoop_result_t hoop_recv(hoop_comm_t comm, void *buf, size_t count,
                                 hoop_dtype_t dtype, int peer,
                                 hoop_stream_t stream);
HOOP_API hoop_result_t hoop_group_start(void);
HOOP_API hoop_result_t hoop_group_end(void);

/*
 * alltoall: block p of rank r's sendbuf (count elements) lands in block r
 *   of rank p's recvbuf.  sendbuf and recvbuf must not overlap.
 */
HOOP_API hoop_result_t hoop_alltoall(hoop_comm_t comm, const void *sendbuf,
                                     void *recvbuf, size_t count,
                                     hoop_dtype_t dtype,
                                     hoop_stream_t stream);

/*
 * Sets the algorithm setting of this comm: AUTO, RING, TREE or PS
 * (HOOP_ERR_INVALID_ARGUMENT for others); hoop_algo_t lists what each
 * runs per collective (PS only changes all-reduce and barrier).  Calls
 * made after it use it; calls made before it, queued device calls
 * included, keep the setting they were made with.
 */
HOOP_API hoop_result_t hoop_comm_set_algo(hoop_comm_t comm, hoop_algo_t algo);
/*
 * Stores in *algo the comm's setting: HOOP_ALGO's when the comm was made
 * (AUTO without it), until hoop_comm_set_algo changes it.  AUTO stays
 * AUTO; what it picks for a call depends on the call's size (see
 * hoop_comm_predict, and hoop_comm_get_stats for what ran).  A NULL algo
 * or comm gives HOOP_ERR_INVALID_ARGUMENT; a comm that is destroyed or
 * aborted, HOOP_ERR_INVALID_USAGE.
 */
HOOP_API hoop_result_t hoop_comm_get_algo(hoop_comm_t comm,
                                          hoop_algo_t *algo);
HOOP_API const char *hoop_algo_name(hoop_algo_t algo);

/*
 * Structs that hoop fills and that later versions may grow (hoop_model_t,
 * hoop_rank_info_t, hoop_stats_t) begin, like hoop_config_t, with `size`
 * and `version`, which the caller sets through the type's INIT macro.  hoop
 * writes at most `size` bytes and leaves those two fields as they were, so
 * a program built against an older, smaller struct keeps working; a size
 * that covers none of the fields, or a version this hoop does not know,
 * gives HOOP_ERR_INVALID_ARGUMENT.  A change that moves fields (such as a
 * new collective or algorithm reshaping hoop_stats_t.by_coll) raises the
 * type's version, and hoop fills each version's layout.
 */

/*
 * The cost model behind HOOP_ALGO_AUTO.  A schedule costs alpha per
 * sequential message hop (across hosts, a hop between two ranks of one
 * host costs HOOP_HOST_ALPHA_NS instead) plus, across hosts, link_beta
 * per byte on its busiest link; when every rank shares one host, host_beta
 * per byte copied by its busiest rank (or by all ranks shared among the
 * cores), where over shared memory a byte reduced counts as 1.5 bytes
 * copied.
 */
#define HOOP_MODEL_VERSION 1
typedef struct hoop_model {
  size_t size;
  unsigned int version;
  double alpha_s;          /* HOOP_ALPHA_NS */
  double link_beta_s;      /* 1 / HOOP_LINK_MBPS */
  double host_beta_s;      /* 1 / HOOP_HOST_MBPS */
  int single_host;         /* every rank on this rank's host */
  int host_cores;
  int host_shm;            /* ... talking through shared memory */
} hoop_model_t;

#define HOOP_MODEL_INIT \
  {sizeof(hoop_model_t), HOOP_MODEL_VERSION, 0, 0, 0, 0, 0, 0}

HOOP_API hoop_result_t hoop_comm_get_model(hoop_comm_t comm,
                                           hoop_model_t *model);

/*
 * Predicted seconds of `coll` for `bytes`, run as a call made under
 * setting `algo` runs it (hoop_algo_t: PS for broadcast is the model's
 * pick); AUTO predicts under the comm's own setting.
 */
HOOP_API hoop_result_t hoop_comm_predict(hoop_comm_t comm, hoop_coll_t coll,
                                         hoop_algo_t algo, size_t bytes,
                                         double *seconds);

/*
 * Topology: where each rank runs and what it could use, as it published at
 * set-up.  Ranks with the same `host` (the same boot, hostname and network
 * namespace) talk through shared memory; others through the network.
 */
#define HOOP_RANK_INFO_VERSION 1
typedef struct hoop_rank_info {
  size_t size;
  unsigned int version;
  int host;           /* index of its host, numbered by lowest rank */
  int pid;
  int shm;            /* can use POSIX shared memory */
  int cuda_devices;   /* GPUs the host's driver lists */
  int verbs_devices;  /* RDMA devices the host's kernel lists */
  char hostname[64];
  /* The IP address it listens on for its peers, as text: where the
     others reach it (a program's own services, a new store). */
  char address[48];
} hoop_rank_info_t;

#define HOOP_RANK_INFO_INIT \
  {sizeof(hoop_rank_info_t), HOOP_RANK_INFO_VERSION, 0, 0, 0, 0, 0, {0}, {0}}

HOOP_API hoop_result_t hoop_comm_rank_info(hoop_comm_t comm, int rank,
                                           hoop_rank_info_t *info);

/*
 * The transport ranks a and b use between them ("shm", "tcp"), chosen by
 * the same rule on every rank (HOOP_TRANSPORT forces one); "self" when
 * a == b.  The name is a static string.
 */
HOOP_API hoop_result_t hoop_comm_transport(hoop_comm_t comm, int a, int b,
                                           const char **name);

/*
 * Counters, per communicator.  Bytes are payload (what the schedule moves),
 * not headers; time is wall time inside the calls.  Of that time, wait is
 * how long this rank sat idle with one of its peers in the call (those it
 * moves data with, and its two ring neighbours, which check that the
 * ranks agree) yet to join it: ranks arriving late, not data moving.  The
 * last rank in counts none; a late rank further away shows up as a stall
 * inside the transfer instead.  Over CUDA IPC a rank "receives" what its
 * GPU reads from a peer's memory and "sends" what the peer reads from its
 * own, and time runs from the call to the GPU's completion.  Reading or
 * resetting the counters first waits for queued device calls.
 *
 * Each call counts under its collective and the algorithm that ran
 * (hoop_algo_t: a chain under RING).  One rank runs none: its collectives
 * count under AUTO, with no bytes (on device buffers, with the time to
 * queue the copy); send/recv and all-to-all count under P2P on any number
 * of ranks.
 */
typedef struct hoop_coll_stats {
  uint64_t calls;
  uint64_t time_ns;
  uint64_t wait_ns; /* part of time_ns; 0 for device buffers */
  uint64_t bytes_sent;
  uint64_t bytes_received;
} hoop_coll_stats_t;

#define HOOP_STATS_VERSION 3
typedef struct hoop_stats {
  size_t size;
  unsigned int version;
  uint64_t bytes_sent;     /* to all peers */
  uint64_t bytes_received; /* from all peers */
  /* Version 3 added HOOP_ALGO_HIER's column: versions 1 and 2 have 6,
     and count hierarchical calls under RING. */
  hoop_coll_stats_t by_coll[HOOP_COLL_COUNT][HOOP_ALGO_COUNT];
  /* Version 2.  Of bytes_sent and bytes_received, those to and from ranks
     on other hosts (hoop_rank_info_t's host; emulated hosts count apart). */
  uint64_t bytes_sent_off_host;
  uint64_t bytes_received_off_host;
  /* Peers this rank has a connection with now: every peer once init has
     connected them all (HOOP_RUNTIME_CONNECT=0), else those its calls have
     used so far.  Not a counter: hoop_comm_reset_stats leaves it. */
  uint64_t peers_connected;
} hoop_stats_t;

#define HOOP_STATS_INIT \
  {sizeof(hoop_stats_t), HOOP_STATS_VERSION, 0, 0, {{{0, 0, 0, 0, 0}}}, \
   0, 0, 0}

HOOP_API hoop_result_t hoop_comm_get_stats(hoop_comm_t comm,
                                           hoop_stats_t *stats);
HOOP_API hoop_result_t hoop_comm_get_peer_bytes(hoop_comm_t comm, int peer,
                                                uint64_t *sent,
                                                uint64_t *received);
HOOP_API hoop_result_t hoop_comm_reset_stats(hoop_comm_t comm);

#ifdef __cplusplus
}
#endif

#endif /* HOOP_H */
