/*
 * What hoop-bench's driver (hoop-bench.c) needs to know about one
 * collective, in the shape of nccl-tests' struct testColl: how a sweep
 * size becomes counts and buffers, how to call it, what every element of
 * the result must be, its bus-bandwidth factor and the traffic its
 * algorithms should move.  One small file per collective fills one.
 */
#ifndef HOOP_BENCH_H
#define HOOP_BENCH_H

#include <stddef.h>

#include "hoop.h"

/* The arguments of one call, as the driver sets them up. */
struct bench_call {
  hoop_comm_t comm;
  const void *send;
  void *recv;
  size_t count; /* the count argument: per rank where the API says so */
  hoop_dtype_t dtype;
  hoop_op_t op;
  int root;
  hoop_stream_t stream; /* -m cuda: the stream the call is queued on */
};

/* Everything the reference needs to know every rank's input. */
struct bench_ref {
  int rank, nranks, root;
  hoop_dtype_t dtype;
  hoop_op_t op;
  size_t count; /* the call's count argument */
  int reduces;  /* inputs chosen for reductions (see bench_input) */
};

/*
 * Element counts of one call for a sweep size of `elems` elements, with
 * nccl-tests' rounding (reduce-scatter, all-gather and all-to-all use the
 * largest multiple of the rank count).  Offsets place the in-place call's
 * send and receive buffers within one buffer.
 */
struct bench_layout {
  size_t count;      /* the count argument */
  size_t send_elems; /* this rank's input */
  size_t recv_elems; /* this rank's output buffer */
  size_t bytes;      /* the size column: the whole array in bytes */
  size_t in_place_send_off, in_place_recv_off; /* elements */
};

/* Bit i of bench_coll.algos: -a hoop_algo_t i is offered. */
#define BENCH_ALGO(a) (1u << (a))

struct bench_coll {
  const char *name; /* what -C takes and the header prints */
  hoop_coll_t kind; /* where the counters count it */
  int reduces;      /* takes -o */
  int rooted;       /* takes -r */
  int in_place;     /* has an in-place form */
  unsigned algos;   /* BENCH_ALGO mask of the -a values it accepts */
  /* nccl-tests' busbw = algbw * factor (doc/PERFORMANCE.md). */
  double (*bus_factor)(int nranks);
  const char *bus_factor_text; /* the same, for the header */
  void (*layout)(size_t elems, int rank, int nranks, size_t esz,
                 struct bench_layout *out);
  hoop_result_t (*run)(const struct bench_call *call);
  /* Elements of the result this rank holds (0 where it gets none). */
  size_t (*result_elems)(const struct bench_ref *ref);
  /* What element i of this rank's result must be. */
  double (*expected)(const struct bench_ref *ref, size_t i);
  /*
   * The model's payload bytes through the busiest rank's link, one way,
   * for the algorithm that ran and a `bytes`-byte array.
   */
  double (*model_bytes)(hoop_algo_t algo, int nranks, int nhosts,
                       double bytes);
};

extern const struct bench_coll bench_allreduce, bench_reduce_scatter,
    bench_allgather, bench_broadcast, bench_reduce, bench_alltoall;

/* Rank `rank`'s input element i; exact in every dtype. */
double bench_input(const struct bench_ref *ref, int rank, size_t i);
/* The reduction over every rank of input element i, as hoop must give it. */
double bench_reduced(const struct bench_ref *ref, size_t i);

void bench_store(void *buf, size_t i, hoop_dtype_t t, double v);
double bench_load(const void *buf, size_t i, hoop_dtype_t t);

/* Shared layouts and factors: several collectives have the same. */
void bench_layout_whole(size_t elems, int rank, int nranks, size_t esz,
                        struct bench_layout *out);
double bench_factor_one(int nranks);
double bench_factor_spread(int nranks); /* (n-1)/n */
double bench_model_spread(hoop_algo_t algo, int nranks, int nhosts,
                          double bytes);
double bench_model_chain_or_tree(hoop_algo_t algo, int nranks, int nhosts,
                                 double bytes);
size_t bench_result_blocks(const struct bench_ref *ref);

/*
 * Buffer memory for -m (memory.c): host, or CUDA device memory where the
 * build has CUDA.  Device buffers are filled and read through copies.
 */
enum bench_memory { BENCH_HOST, BENCH_CUDA };

/* 0 when the build cannot use `m`; *why then says so. */
int bench_memory_available(enum bench_memory m, const char **why);
void *bench_alloc(enum bench_memory m, size_t bytes);
void bench_free(enum bench_memory m, void *p);
/* A stream for device calls (NULL for host memory). */
hoop_stream_t bench_stream(enum bench_memory m);
/* Copies between a buffer of memory m and host memory; 0 on success. */
int bench_upload(enum bench_memory m, void *dst, const void *src,
                 size_t bytes);
int bench_download(enum bench_memory m, void *dst, const void *src,
                   size_t bytes);
int bench_zero(enum bench_memory m, void *dst, size_t bytes);
/* Waits until the stream has run every call queued on it; 0 on success. */
int bench_sync(enum bench_memory m, hoop_stream_t stream);

#endif /* HOOP_BENCH_H */
