/*
 * hoop-bench: times a collective over a size sweep, in the layout that
 * nccl-tests users read every day.  Start one process per rank, e.g.
 *   hoop-run -n 4 hoop-bench -b 4K -e 64M -f 2              (all-reduce)
 *   hoop-run -n 4 hoop-bench -C allgather -b 4K -e 64M -f 2
 * -C picks the collective (allreduce, reducescatter, allgather, broadcast,
 * reduce, alltoall; nccl-tests' all_reduce etc. also work); each one's
 * sizes, counts and bus bandwidth are nccl-tests' (see its struct
 * bench_coll in bench.h).
 *
 * Timing follows ../shared/bench-method.md: per size, warm-up calls, then
 * timed iterations of (barrier, one call) measured on every rank; an
 * iteration's time is the slowest rank's and the reported time is the
 * median over iterations.  With -c 1 each placement is first run once on
 * known inputs and every element of the result is compared with a
 * reference computed here from every rank's input, never through hoop.
 * HOOP_BENCH_CORRUPT=1 spoils one element of one rank's out-of-place
 * result before that comparison, so that a test can see the check fail.
 *
 * Every size also counts one out-of-place call's payload bytes (hoop's own
 * counters).  -B 1 appends them after the 13 nccl-tests columns: rank 0's
 * bytes sent and received, the most any rank sent and received (the
 * busiest link, each direction), the cost model's bytes each way on the
 * busiest link for the algorithm that ran, that algorithm, and the bytes
 * all ranks together sent to ranks on other hosts.  It is off
 * by default because scripts that parse the rows expect 13 columns.  -J
 * writes every measured row as JSON lines, traffic included.
 *
 * -a sets the algorithm; without it the library's own setting stands
 * (HOOP_ALGO, else auto), and the header says which and from where.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

static const struct bench_coll *const colls[] = {
    &bench_allreduce, &bench_reduce_scatter, &bench_allgather,
    &bench_broadcast, &bench_reduce,         &bench_alltoall,
};
#define NCOLLS (sizeof colls / sizeof colls[0])

struct options {
  const struct bench_coll *coll;
  size_t min_bytes, max_bytes;
  size_t step_factor;
  int iters, warmup, check, traffic, root;
  hoop_dtype_t dtype;
  hoop_op_t op;
  hoop_algo_t algo;        /* -a, else the library's setting */
  /* "-a", "HOOP_ALGO", "default", or why HOOP_ALGO does not apply */
  char algo_source[64];
  const char *json_path;
  int corrupt; /* HOOP_BENCH_CORRUPT */
  enum bench_memory memory; /* -m */
  size_t evict_bytes;       /* -E */
  int input_cold;           /* -I cold: -E leaves the input evicted too */
  int stagger_us;           /* -S */
};

/* Payload bytes of one call, from hoop_comm_get_stats. */
struct traffic {
  uint64_t sent, received;         /* this rank's */
  uint64_t max_sent, max_received; /* the most over ranks */
  uint64_t off_host;               /* sent to other hosts, all ranks' */
  hoop_algo_t algo;                /* the algorithm the call used */
};

struct ctx {
  hoop_comm_t comm;
  int rank, nranks;
  int nhosts; /* for the model column */
  struct options opt;
  struct bench_ref ref;
  char *send, *recv;   /* the calls' buffers, in -m memory */
  char *hsend, *hrecv; /* host images for the check (send/recv for host) */
  hoop_stream_t stream;
  double *times; /* [2][iters]: out of place, in place */
  char *evict;   /* [opt.evict_bytes], -E */
  FILE *json;
};

/* One placement's result at one size. */
struct placement {
  int measured; /* 0: the collective has no in-place form */
  double median_us, min_us, max_us;
  long long wrong; /* -1: not checked */
};

static void die(struct ctx *c, const char *what, hoop_result_t res) {
  fprintf(stderr, "hoop-bench: rank %d: %s failed: %s: %s\n", c ? c->rank : -1,
          what, hoop_strerror(res),
          c && c->comm ? hoop_comm_last_error(c->comm) : hoop_last_error());
  exit(1);
}

#define CHECK(c, call)                                                       \
  do {                                                                       \
    hoop_result_t r_ = (call);                                               \
    if (r_ != HOOP_SUCCESS)                                                  \
      die((c), #call, r_);                                                   \
  } while (0)

/* Usage errors exit 2, as nccl-tests and hoop-run do. */
static void usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "hoop-bench: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, " (hoop-bench -h lists the options)\n");
  exit(2);
}

static size_t parse_size(const char *text) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  double mult = 1;
  switch (*end) {
  case 'K': case 'k': mult = 1024; end++; break;
  case 'M': case 'm': mult = 1024.0 * 1024; end++; break;
  case 'G': case 'g': mult = 1024.0 * 1024 * 1024; end++; break;
  default: break;
  }
  if (errno != 0 || end == text || *end != '\0' || v < 0)
    usage_error("bad size \"%s\"", text);
  return (size_t)(v * mult);
}

static int parse_int(const char *text, const char *what) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < INT_MIN ||
      v > INT_MAX) {
    fprintf(stderr, "hoop-bench: %s: \"%s\" is not a number\n", what, text);
    exit(2);
  }
  return (int)v;
}

static int parse_enum(const char *text, const char *(*name)(int), int n,
                      const char *what) {
  for (int i = 0; i < n; i++) {
    if (strcmp(text, name(i)) == 0)
      return i;
  }
  fprintf(stderr, "hoop-bench: unknown %s \"%s\"\n", what, text);
  exit(2);
}

static const char *dtype_name(int i) { return hoop_dtype_name(i); }
static const char *op_name(int i) { return hoop_op_name(i); }
static const char *algo_name(int i) { return hoop_algo_name(i); }

/* "all_gather", "AllGather" and "all-gather" all name allgather. */
static const struct bench_coll *find_coll(const char *text) {
  char plain[32];
  size_t n = 0;
  for (const char *p = text; *p != '\0' && n + 1 < sizeof plain; p++) {
    if (*p != '_' && *p != '-')
      plain[n++] = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
  }
  plain[n] = '\0';
  for (size_t i = 0; i < NCOLLS; i++) {
    if (strcmp(plain, colls[i]->name) == 0)
      return colls[i];
  }
  usage_error("unknown collective \"%s\"", text);
  return NULL;
}

static void usage(void) {
  printf("usage: hoop-bench [-C coll] [-b minbytes] [-e maxbytes] "
         "[-f factor] [-n iters] [-w warmup]\n"
         "                  [-c 0|1] [-d dtype] [-o op] [-r root] [-a algo] "
         "[-m host|cuda]\n"
         "                  [-J file.jsonl] [-B 0|1] [-E bytes [-I warm|cold]]\n"
         "                  [-S us]\n"
         "  colls: allreduce (default) reducescatter allgather broadcast "
         "reduce alltoall\n"
         "  dtypes: int8 uint8 int32 uint32 int64 uint64 half float double "
         "bfloat16\n          float8e4m3 float8e5m2\n"
         "  ops: sum prod min max avg (reductions only)\n"
         "  -r: root of broadcast and reduce (default 0)\n"
         "  algos: auto; ring tree ps hier (allreduce); ring tree "
         "(broadcast, reduce); ring hier (reducescatter, allgather)\n"
         "  -a: without it the library's setting stands (HOOP_ALGO, else "
         "auto)\n"
         "  -m: buffer memory: host, or cuda (device buffers on one stream,\n"
         "      timed to the stream's completion; builds with CUDA)\n"
         "  -J: every row as JSON lines, with the bytes each call moved\n"
         "  -B 1: append bytes sent/received per call and the model's "
         "busiest-link bytes\n"
         "  -E bytes: before each call, untimed, write this many bytes of "
         "other memory\n"
         "      and then the input (as a training step's backward pass "
         "does), so the\n"
         "      call finds cold caches; host buffers only (e.g. -E 64M for "
         "a 32 MiB L3)\n"
         "  -I cold: -E does not rewrite the input, which is then cold too "
         "(gradients\n"
         "      written early in the backward pass); -I warm is the "
         "default\n"
         "  -S us: in timed call i, rank i mod N computes for this long "
         "after the barrier;\n"
         "      the time is that last rank's, from its arrival (a training "
         "step's\n"
         "      all-reduce after a slow backward pass)\n"
         "  HOOP_BENCH_CORRUPT=1: spoil one result element (tests -c)\n");
}

/* Rejects what the chosen collective cannot take. */
static void check_fit(const struct options *o, int op_given, int root_given) {
  const struct bench_coll *k = o->coll;
  if (op_given && !k->reduces)
    usage_error("-o: %s reduces nothing", k->name);
  if (root_given && !k->rooted)
    usage_error("-r: %s has no root", k->name);
  if (!(k->algos & BENCH_ALGO(o->algo))) {
    fprintf(stderr, "hoop-bench: -a %s: %s offers", hoop_algo_name(o->algo),
            k->name);
    for (int a = HOOP_ALGO_AUTO; a < HOOP_ALGO_COUNT; a++) {
      if (k->algos & BENCH_ALGO(a))
        fprintf(stderr, " %s", hoop_algo_name(a));
    }
    fprintf(stderr, "\n");
    exit(2);
  }
}

static struct options parse_options(int argc, char **argv) {
  struct options o = {.coll = &bench_allreduce, .min_bytes = 8,
                      .max_bytes = 64u << 20, .step_factor = 2, .iters = 20,
                      .warmup = 5, .check = 1, .dtype = HOOP_F32,
                      .op = HOOP_SUM, .algo = HOOP_ALGO_AUTO};
  static const struct option longopts[] = {
      {"coll", required_argument, NULL, 'C'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  int ch, op_given = 0, root_given = 0;
  int input_given = 0;
  while ((ch = getopt_long(argc, argv, "C:b:e:f:n:w:c:d:o:r:a:m:J:B:E:I:S:h",
                           longopts, NULL)) != -1) {
    switch (ch) {
    case 'C': o.coll = find_coll(optarg); break;
    case 'b': o.min_bytes = parse_size(optarg); break;
    case 'e': o.max_bytes = parse_size(optarg); break;
    case 'f': o.step_factor = parse_size(optarg); break;
    case 'n': o.iters = parse_int(optarg, "-n"); break;
    case 'w': o.warmup = parse_int(optarg, "-w"); break;
    case 'c': o.check = parse_int(optarg, "-c"); break;
    case 'B': o.traffic = parse_int(optarg, "-B"); break;
    case 'E': o.evict_bytes = parse_size(optarg); break;
    case 'I':
      if (strcmp(optarg, "warm") != 0 && strcmp(optarg, "cold") != 0)
        usage_error("-I wants warm or cold, not \"%s\"", optarg);
      o.input_cold = strcmp(optarg, "cold") == 0;
      input_given = 1;
      break;
    case 'S': o.stagger_us = parse_int(optarg, "-S"); break;
    case 'r':
      o.root = parse_int(optarg, "-r");
      root_given = 1;
      break;
    case 'd':
      o.dtype = parse_enum(optarg, dtype_name, HOOP_DTYPE_COUNT, "dtype");
      break;
    case 'o':
      o.op = parse_enum(optarg, op_name, HOOP_OP_COUNT, "op");
      op_given = 1;
      break;
    case 'a':
      o.algo = parse_enum(optarg, algo_name, HOOP_ALGO_COUNT, "algorithm");
      snprintf(o.algo_source, sizeof o.algo_source, "-a");
      break;
    case 'm': {
      const char *why = "";
      if (strcmp(optarg, "cuda") == 0 || strcmp(optarg, "device") == 0)
        o.memory = BENCH_CUDA;
      else if (strcmp(optarg, "host") != 0)
        usage_error("-m: unknown memory \"%s\" (host, cuda)", optarg);
      if (!bench_memory_available(o.memory, &why)) {
        fprintf(stderr, "hoop-bench: -m %s: %s\n", optarg, why);
        exit(2);
      }
      break;
    }
    case 'J': o.json_path = optarg; break;
    case 'h': usage(); exit(0);
    default: usage(); exit(2);
    }
  }
  if (optind < argc)
    usage_error("unexpected argument \"%s\"", argv[optind]);
  if (o.iters < 1 || o.warmup < 0 || o.step_factor < 2 ||
      o.min_bytes > o.max_bytes || (o.check != 0 && o.check != 1) ||
      (o.traffic != 0 && o.traffic != 1) || o.root < 0 || o.stagger_us < 0) {
    fprintf(stderr, "hoop-bench: need -n >= 1, -w >= 0, -f >= 2, -b <= -e, "
                    "-c and -B 0 or 1, -r >= 0, -S >= 0\n");
    exit(2);
  }
  check_fit(&o, op_given, root_given);
  if (o.evict_bytes > 0 && o.memory != BENCH_HOST)
    usage_error("%s", "-E evicts this CPU's caches, so it needs -m host");
  if (input_given && o.evict_bytes == 0)
    usage_error("%s", "-I says what -E leaves of the input; it needs -E");
  const char *corrupt = getenv("HOOP_BENCH_CORRUPT");
  o.corrupt = corrupt != NULL && strcmp(corrupt, "1") == 0;
  return o;
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* The call's buffers: separate, or one buffer in the in-place layout. */
static struct bench_call make_call(const struct ctx *c,
                                   const struct bench_layout *l,
                                   int in_place) {
  size_t esz = hoop_dtype_size(c->opt.dtype);
  struct bench_call call = {.comm = c->comm, .send = c->send,
                            .recv = c->recv, .count = l->count,
                            .dtype = c->opt.dtype, .op = c->opt.op,
                            .root = c->opt.root, .stream = c->stream};
  if (in_place) {
    call.send = c->recv + l->in_place_send_off * esz;
    call.recv = c->recv + l->in_place_recv_off * esz;
  }
  return call;
}

/* One call, complete: device calls are waited for on their stream. */
static void run_once(struct ctx *c, const struct bench_call *call) {
  CHECK(c, c->opt.coll->run(call));
  if (bench_sync(c->opt.memory, c->stream) != 0) {
    fprintf(stderr, "hoop-bench: rank %d: waiting for the stream failed\n",
            c->rank);
    exit(1);
  }
}

/* The host image of a call buffer, for filling and checking. */
static char *host_of(const struct ctx *c, const void *p) {
  uintptr_t q = (uintptr_t)p, r = (uintptr_t)c->recv;
  if (q >= r && q <= r + c->opt.max_bytes)
    return c->hrecv + (q - r);
  return c->hsend + (q - (uintptr_t)c->send);
}

static void copy_or_die(struct ctx *c, int failed, const char *what) {
  if (failed) {
    fprintf(stderr, "hoop-bench: rank %d: %s failed\n", c->rank, what);
    exit(1);
  }
}

/*
 * One call, counted: the counters are reset just before it and read just
 * after, so they hold its payload alone (barriers and the gathers below
 * fall outside).
 */
static void counted_call(struct ctx *c, const struct bench_call *call,
                         struct traffic *tr) {
  hoop_stats_t st = HOOP_STATS_INIT;
  CHECK(c, hoop_comm_reset_stats(c->comm));
  run_once(c, call);
  CHECK(c, hoop_comm_get_stats(c->comm, &st));
  tr->sent = st.bytes_sent;
  tr->received = st.bytes_received;
  /* AUTO picks per size; the counters say what it picked.  One rank runs
     no algorithm (it copies), which leaves AUTO. */
  tr->algo = HOOP_ALGO_AUTO;
  for (int a = HOOP_ALGO_RING; a < HOOP_ALGO_COUNT; a++) {
    if (st.by_coll[c->opt.coll->kind][a].calls > 0)
      tr->algo = (hoop_algo_t)a;
  }
  uint64_t most[2] = {tr->sent, tr->received};
  CHECK(c, hoop_allreduce(c->comm, most, most, 2, HOOP_U64, HOOP_MAX, NULL));
  tr->max_sent = most[0];
  tr->max_received = most[1];
  tr->off_host = st.bytes_sent_off_host;
  CHECK(c, hoop_allreduce(c->comm, &tr->off_host, &tr->off_host, 1, HOOP_U64,
                          HOOP_SUM, NULL));
}

/* The rank whose result HOOP_BENCH_CORRUPT spoils: the last that has one. */
static int corrupt_rank(const struct ctx *c) {
  struct bench_ref last = c->ref;
  last.rank = c->nranks - 1;
  return c->opt.coll->result_elems(&last) > 0 ? last.rank : c->opt.root;
}

/*
 * Relative tolerance of the check.  fp8 keeps 4 (E4M3) or 3 (E5M2)
 * significant bits: inputs above 16 or 8 round when stored, and each
 * addition rounds by up to half an ulp of its partial sum, so a sum over
 * N ranks may be off by N half-ulps of the result (and on many ranks that
 * admits almost anything: its check is a sanity check).  Products
 * saturate at 448 or 57344 past a few ranks.
 */
static double tolerance(hoop_dtype_t t, int nranks) {
  switch (t) {
  case HOOP_F16:
  case HOOP_BF16: return 1e-2;
  case HOOP_F8E4M3: return nranks / 16.0;
  case HOOP_F8E5M2: return nranks / 8.0;
  default: return 1e-6;
  }
}

static long long count_wrong(const struct ctx *c, const void *buf) {
  hoop_dtype_t t = c->opt.dtype;
  double rel = tolerance(t, c->nranks);
  size_t n = c->opt.coll->result_elems(&c->ref);
  long long wrong = 0;
  for (size_t i = 0; i < n; i++) {
    double want = c->opt.coll->expected(&c->ref, i);
    double got = bench_load(buf, i, t);
    double tol = fabs(want) * rel;
    if (!(fabs(got - want) <= tol))
      wrong++;
  }
  return wrong;
}

/* Writes the call's known inputs into its send buffer. */
static void fill_input(struct ctx *c, const struct bench_layout *l,
                       const struct bench_call *call) {
  size_t esz = hoop_dtype_size(c->opt.dtype);
  char *send = host_of(c, call->send);
  for (size_t i = 0; i < l->send_elems; i++)
    bench_store(send, i, c->opt.dtype, bench_input(&c->ref, c->rank, i));
  copy_or_die(c, bench_upload(c->opt.memory, (void *)call->send, send,
                              l->send_elems * esz),
              "copying the input in");
}

/*
 * Runs the call once on known inputs, over a zeroed output (every
 * expected value is at least 1, so a call that writes nothing fails), and
 * returns the wrong elements summed over ranks.  `tr` set: count it.
 */
static long long check_call(struct ctx *c, const struct bench_layout *l,
                            int in_place, struct traffic *tr) {
  struct bench_call call = make_call(c, l, in_place);
  size_t esz = hoop_dtype_size(c->opt.dtype);
  size_t whole = l->send_elems > l->recv_elems ? l->send_elems : l->recv_elems;
  enum bench_memory m = c->opt.memory;
  copy_or_die(c, bench_zero(m, c->recv, (in_place ? whole : l->recv_elems) *
                                            esz),
              "zeroing the output");
  fill_input(c, l, &call);
  if (tr != NULL)
    counted_call(c, &call, tr);
  else
    run_once(c, &call);
  size_t n = c->opt.coll->result_elems(&c->ref);
  char *recv = host_of(c, call.recv);
  copy_or_die(c, bench_download(m, recv, call.recv, n * esz),
              "copying the result out");
  if (c->opt.corrupt && !in_place && n > 0 && c->rank == corrupt_rank(c)) {
    double v = bench_load(recv, n / 2, c->opt.dtype);
    bench_store(recv, n / 2, c->opt.dtype, v + 1 + fabs(v));
  }
  long long wrong = count_wrong(c, recv);
  CHECK(c, hoop_allreduce(c->comm, &wrong, &wrong, 1, HOOP_I64, HOOP_SUM,
                          NULL));
  return wrong;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/*
 * -E.  Back to back, a call finds its buffers, the transport's and its own
 * state in this core's caches; inside a training step the backward pass
 * has just filled them with activations, and written the gradients that
 * are the input.  This does the same (the input keeps its values), so the
 * bench can be set beside a trainer's step.  Gradients that backward
 * wrote early, before layers whose work outgrew the caches, are cold by
 * the call too: -I cold.  Intel MPI Benchmarks'
 * -off_cache exists for the same reason.
 */
static void evict_caches(struct ctx *c, char *input, size_t input_bytes) {
  for (size_t i = 0; i < c->opt.evict_bytes; i += 64)
    c->evict[i]++;
  if (c->opt.input_cold)
    return;
  volatile char *in = input;
  for (size_t i = 0; i < input_bytes; i += 64)
    in[i] = in[i];
}

/*
 * -S.  The others wait in the call, as a trainer's ranks wait for the one
 * whose backward pass ran long; it computes rather than sleeps, as that
 * rank would.  What it then spends in the call is what its step pays.
 */
static int arrive_late(struct ctx *c, int iteration) {
  if (c->opt.stagger_us == 0 || iteration % c->nranks != c->rank)
    return 0;
  double t0 = now_us();
  while (now_us() - t0 < c->opt.stagger_us)
    ;
  return 1;
}

static void summarize(double *times, int n, struct placement *p) {
  qsort(times, (size_t)n, sizeof *times, cmp_double);
  p->min_us = times[0];
  p->max_us = times[n - 1];
  p->median_us = (times[(n - 1) / 2] + times[n / 2]) / 2;
}

/*
 * The two placements are timed in one loop, taking turns to go first:
 * timed one block after the other, whichever block came first was the
 * slower at 64 KiB over shm on 2 ranks (out-of-place first: 1.10-1.28x
 * in-place; in-place first: 0.86-0.93x), which read as a cost of
 * out-of-place that the calls do not have.
 */
static void time_calls(struct ctx *c, const struct bench_call call[2],
                       char *const input[2], const size_t input_bytes[2],
                       struct placement p[2]) {
  int n = c->opt.iters;
  for (int i = 0; i < c->opt.warmup; i++)
    for (int ip = 0; ip < 2; ip++)
      if (p[ip].measured)
        run_once(c, &call[ip]);
  for (int i = 0; i < n; i++) {
    for (int turn = 0; turn < 2; turn++) {
      int ip = (i + turn) % 2;
      if (!p[ip].measured)
        continue;
      if (c->evict != NULL)
        evict_caches(c, input[ip], input_bytes[ip]);
      CHECK(c, hoop_barrier(c->comm));
      int late = arrive_late(c, i);
      double t0 = now_us();
      run_once(c, &call[ip]);
      /* Staggered, only the late rank's time counts (the max below). */
      c->times[ip * n + i] =
          c->opt.stagger_us == 0 || late ? now_us() - t0 : 0;
    }
  }
  /* The slowest rank decides each iteration; gathered outside the timing. */
  CHECK(c, hoop_allreduce(c->comm, c->times, c->times, 2 * (size_t)n,
                          HOOP_F64, HOOP_MAX, NULL));
  for (int ip = 0; ip < 2; ip++)
    if (p[ip].measured)
      summarize(c->times + ip * n, n, &p[ip]);
}

static void print_header(const struct ctx *c) {
  const struct bench_coll *k = c->opt.coll;
  printf("# hoop-bench %s: %d ranks, %s %s, root %d, algorithm %s (%s), %d "
         "warm-up and %d timed iterations, check %s, %s buffers\n",
         k->name, c->nranks, hoop_dtype_name(c->opt.dtype),
         k->reduces ? hoop_op_name(c->opt.op) : "none",
         k->rooted ? c->opt.root : -1, hoop_algo_name(c->opt.algo),
         c->opt.algo_source, c->opt.warmup, c->opt.iters,
         c->opt.check ? "on" : "off",
         c->opt.memory == BENCH_CUDA ? "cuda" : "host");
  if (c->opt.evict_bytes > 0)
    printf("# caches: %zu bytes of other memory written before each call "
           "(-E), %s\n", c->opt.evict_bytes,
           c->opt.input_cold ? "the input left cold (-I cold)"
                             : "then the input rewritten");
  if (c->opt.stagger_us > 0)
    printf("# arrival: in call i rank i mod N starts %d us after the others "
           "(-S); time is that rank's\n", c->opt.stagger_us);
  printf("# time: median over iterations of the slowest rank; busbw = "
         "algbw * %s\n", k->bus_factor_text);
  if (c->opt.traffic)
    printf("# bytes: payload of one out-of-place call: rank 0's sent and "
           "received, the most any rank sent and received, and the model's "
           "bytes each way on the busiest link for the algorithm used, "
           "and all ranks' bytes sent to other hosts\n");
  printf("#%62s%30s\n", "out-of-place", "in-place");
  printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s", "size",
         "count", "type", "redop", "root", "time", "algbw", "busbw",
         "#wrong", "time", "algbw", "busbw", "#wrong");
  if (c->opt.traffic)
    printf(" %11s %11s %11s %11s %11s %5s %11s", "sent", "recvd", "maxsent",
           "maxrecvd", "model", "algo", "offhost");
  printf("\n# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s", "(B)",
         "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
         "(GB/s)", "(GB/s)", "");
  if (c->opt.traffic)
    printf(" %11s %11s %11s %11s %11s %5s %11s", "(B)", "(B)", "(B)", "(B)",
           "(B)", "", "(B)");
  printf("\n");
}

static double algbw_of(size_t bytes, const struct placement *p) {
  return p->median_us > 0 ? (double)bytes / p->median_us / 1e3 : 0;
}

static void print_row(const struct ctx *c, const struct bench_layout *l,
                      const struct placement p[2], const struct traffic *tr,
                      double model) {
  const struct bench_coll *k = c->opt.coll;
  double factor = k->bus_factor(c->nranks);
  printf("  %10zu %12zu %8s %6s %6d", l->bytes, l->count,
         hoop_dtype_name(c->opt.dtype),
         k->reduces ? hoop_op_name(c->opt.op) : "none",
         k->rooted ? c->opt.root : -1);
  for (int ip = 0; ip < 2; ip++) {
    if (!p[ip].measured) {
      printf(" %9s %7s %7s %6s", "N/A", "N/A", "N/A", "N/A");
      continue;
    }
    double algbw = algbw_of(l->bytes, &p[ip]);
    printf(" %9.2f %7.2f %7.2f", p[ip].median_us, algbw, algbw * factor);
    if (p[ip].wrong < 0)
      printf(" %6s", "N/A");
    else
      printf(" %6lld", p[ip].wrong);
  }
  if (c->opt.traffic)
    printf(" %11llu %11llu %11llu %11llu %11.0f %5s %11llu",
           (unsigned long long)tr->sent, (unsigned long long)tr->received,
           (unsigned long long)tr->max_sent,
           (unsigned long long)tr->max_received, model,
           hoop_algo_name(tr->algo), (unsigned long long)tr->off_host);
  printf("\n");
  fflush(stdout);
}

/* One JSON object per measured placement, the text row's figures plus the
   spread and the traffic. */
static void write_json(const struct ctx *c, const struct bench_layout *l,
                       const struct placement p[2], const struct traffic *tr,
                       double model) {
  const struct bench_coll *k = c->opt.coll;
  for (int ip = 0; ip < 2; ip++) {
    if (!p[ip].measured)
      continue;
    double algbw = algbw_of(l->bytes, &p[ip]);
    fprintf(c->json,
            "{\"collective\":\"%s\",\"ranks\":%d,\"bytes\":%zu,"
            "\"count\":%zu,\"dtype\":\"%s\",\"op\":\"%s\",\"root\":%d,"
            "\"algo_requested\":\"%s\",\"algo_source\":\"%s\","
            "\"in_place\":%d,\"time_us\":%.3f,"
            "\"min_us\":%.3f,\"max_us\":%.3f,\"algbw_GBps\":%.4f,"
            "\"busbw_GBps\":%.4f,",
            k->name, c->nranks, l->bytes, l->count,
            hoop_dtype_name(c->opt.dtype),
            k->reduces ? hoop_op_name(c->opt.op) : "none",
            k->rooted ? c->opt.root : -1, hoop_algo_name(c->opt.algo),
            c->opt.algo_source, ip,
            p[ip].median_us, p[ip].min_us, p[ip].max_us, algbw,
            algbw * k->bus_factor(c->nranks));
    if (p[ip].wrong < 0)
      fprintf(c->json, "\"wrong\":null,");
    else
      fprintf(c->json, "\"wrong\":%lld,", p[ip].wrong);
    fprintf(c->json,
            "\"sent_B\":%llu,\"recv_B\":%llu,\"max_sent_B\":%llu,"
            "\"max_recv_B\":%llu,\"model_link_B\":%.0f,\"algo\":\"%s\","
            "\"off_host_B\":%llu}\n",
            (unsigned long long)tr->sent, (unsigned long long)tr->received,
            (unsigned long long)tr->max_sent,
            (unsigned long long)tr->max_received, model,
            hoop_algo_name(tr->algo), (unsigned long long)tr->off_host);
  }
  fflush(c->json);
}

/* Checks, counts and times one size; returns the wrong elements found. */
static long long bench_size(struct ctx *c, size_t elems) {
  const struct bench_coll *k = c->opt.coll;
  size_t esz = hoop_dtype_size(c->opt.dtype);
  struct bench_layout l;
  k->layout(elems, c->rank, c->nranks, esz, &l);
  c->ref.count = l.count;
  struct placement p[2] = {{0}};
  struct traffic tr = {0};
  /*
   * Without checking there is no checked call to count: count one more.
   * Its inputs are written all the same: a send buffer never written reads
   * as the kernel's one zero page, always in cache, and out of place timed
   * that way took half the time of a real 64 MiB call over shm.
   */
  if (!c->opt.check) {
    for (int ip = 0; ip < 2; ip++) {
      struct bench_call call = make_call(c, &l, ip);
      if (ip == 0 || k->in_place)
        fill_input(c, &l, &call);
    }
    struct bench_call call = make_call(c, &l, 0);
    counted_call(c, &call, &tr);
  }
  struct bench_call call[2] = {{0}};
  char *input[2] = {NULL, NULL};
  size_t input_bytes[2] = {0, 0};
  for (int ip = 0; ip < 2; ip++) {
    if (ip && !k->in_place)
      continue;
    p[ip].measured = 1;
    p[ip].wrong = c->opt.check ? check_call(c, &l, ip, ip ? NULL : &tr) : -1;
    call[ip] = make_call(c, &l, ip);
    input[ip] = ip ? c->recv + l.in_place_send_off * esz : c->send;
    input_bytes[ip] = l.send_elems * esz;
  }
  time_calls(c, call, input, input_bytes, p);
  double model = k->model_bytes(tr.algo, c->nranks, c->nhosts,
                                (double)l.bytes);
  if (c->rank == 0) {
    print_row(c, &l, p, &tr, model);
    if (c->json != NULL)
      write_json(c, &l, p, &tr, model);
  }
  return (p[0].wrong > 0 ? p[0].wrong : 0) + (p[1].wrong > 0 ? p[1].wrong : 0);
}

/*
 * Without -a the library's own setting stands: HOOP_ALGO, else auto.  The
 * header and JSON name it and where it came from; each row names what
 * every call ran.  The public API does not say where a communicator's
 * setting came from, so this is the one place the bench reads HOOP_ALGO.
 * A setting the collective cannot use (ps for a broadcast) leaves its calls
 * to auto's choice, and is reported as auto with the reason.
 */
static hoop_result_t library_algo(hoop_comm_t comm, struct options *o) {
  hoop_result_t res = hoop_comm_get_algo(comm, &o->algo);
  if (res != HOOP_SUCCESS)
    return res;
  const char *env = getenv("HOOP_ALGO");
  if (env == NULL || *env == '\0') {
    snprintf(o->algo_source, sizeof o->algo_source, "default");
  } else if (!(o->coll->algos & BENCH_ALGO(o->algo))) {
    snprintf(o->algo_source, sizeof o->algo_source,
             "HOOP_ALGO=%s not used by %s", hoop_algo_name(o->algo),
             o->coll->name);
    o->algo = HOOP_ALGO_AUTO;
  } else {
    snprintf(o->algo_source, sizeof o->algo_source, "HOOP_ALGO");
  }
  return HOOP_SUCCESS;
}

int main(int argc, char **argv) {
  struct ctx c = {0};
  c.opt = parse_options(argc, argv);
  CHECK(NULL, hoop_comm_init_env(&c.comm, NULL));
  CHECK(&c, hoop_comm_rank(c.comm, &c.rank));
  CHECK(&c, hoop_comm_size(c.comm, &c.nranks));
  for (int r = 0; r < c.nranks; r++) {
    hoop_rank_info_t info = HOOP_RANK_INFO_INIT;
    CHECK(&c, hoop_comm_rank_info(c.comm, r, &info));
    c.nhosts = info.host + 1 > c.nhosts ? info.host + 1 : c.nhosts;
  }
  /* Every rank says why: the launcher may stop the others before rank 0
     gets to print. */
  if (c.opt.root >= c.nranks) {
    fprintf(stderr, "hoop-bench: -r %d: there are only %d ranks\n",
            c.opt.root, c.nranks);
    hoop_comm_destroy(c.comm);
    return 2;
  }
  if (c.opt.algo_source[0] != '\0')
    CHECK(&c, hoop_comm_set_algo(c.comm, c.opt.algo));
  else
    CHECK(&c, library_algo(c.comm, &c.opt));
  c.ref = (struct bench_ref){.rank = c.rank, .nranks = c.nranks,
                             .root = c.opt.root, .dtype = c.opt.dtype,
                             .op = c.opt.op, .reduces = c.opt.coll->reduces};
  size_t esz = hoop_dtype_size(c.opt.dtype);
  enum bench_memory m = c.opt.memory;
  c.send = bench_alloc(m, c.opt.max_bytes + esz);
  c.recv = bench_alloc(m, c.opt.max_bytes + esz);
  c.hsend = m == BENCH_HOST ? c.send : malloc(c.opt.max_bytes + esz);
  c.hrecv = m == BENCH_HOST ? c.recv : malloc(c.opt.max_bytes + esz);
  c.stream = bench_stream(m);
  c.times = malloc(sizeof *c.times * 2 * (size_t)c.opt.iters);
  if (c.opt.evict_bytes > 0)
    c.evict = calloc(c.opt.evict_bytes, 1);
  if (c.send == NULL || c.recv == NULL || c.hsend == NULL ||
      c.hrecv == NULL || c.times == NULL || (m == BENCH_CUDA && !c.stream) ||
      (c.opt.evict_bytes > 0 && c.evict == NULL)) {
    fprintf(stderr, "hoop-bench: out of memory for %zu-byte buffers\n",
            c.opt.max_bytes);
    return 1;
  }
  if (c.rank == 0 && c.opt.json_path != NULL) {
    c.json = fopen(c.opt.json_path, "w");
    if (c.json == NULL) {
      perror(c.opt.json_path);
      return 1;
    }
  }
  if (c.rank == 0)
    print_header(&c);
  long long total_wrong = 0;
  for (size_t bytes = c.opt.min_bytes; bytes <= c.opt.max_bytes;
       bytes *= c.opt.step_factor) {
    total_wrong += bench_size(&c, bytes / esz);
    if (bytes == 0)
      break;
  }
  if (c.json != NULL)
    fclose(c.json);
  CHECK(&c, hoop_comm_destroy(c.comm));
  if (m != BENCH_HOST) {
    free(c.hsend);
    free(c.hrecv);
  }
  bench_free(m, c.send);
  bench_free(m, c.recv);
  free(c.times);
  free(c.evict);
  /*
   * Every rank knows the total, but only rank 0 reports it and fails: a
   * launcher stops the job at the first failing rank, which must not cut
   * off rank 0's report.
   */
  if (total_wrong > 0 && c.rank == 0) {
    fprintf(stderr, "hoop-bench: %lld wrong elements\n", total_wrong);
    return 1;
  }
  return 0;
}
