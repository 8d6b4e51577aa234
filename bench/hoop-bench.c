/*
 * hoop-bench: times a collective over a size sweep, in the layout that
 * nccl-tests users read every day.  Start one process per rank, e.g.
 *   hoop-run -n 4 hoop-bench -b 4K -e 64M -f 2
 *
 * Timing follows bench/../shared bench-method: per size, warm-up calls,
 * then timed iterations of (barrier, one call) measured on every rank; an
 * iteration's time is the slowest rank's and the reported time is the
 * median over iterations.  Results are checked against a closed form
 * before timing (-c 1) and the number of wrong elements is printed.
 *
 * -B 1 appends, after the 13 nccl-tests columns, the payload bytes one call
 * moved (from hoop's own counters, around the checked out-of-place call):
 * rank 0's bytes sent and received, the most any rank sent and received
 * (the busiest link, each direction), the cost model's bytes per direction
 * on the busiest link for the algorithm that ran, and that algorithm.  It
 * is off by default because scripts that parse the rows expect 13 columns.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hoop.h"

struct options {
  size_t min_bytes, max_bytes;
  size_t step_factor;
  int iters, warmup, check, traffic;
  hoop_dtype_t dtype;
  hoop_op_t op;
  hoop_algo_t algo;
  const char *json_path;
};

/* Payload bytes of one call, from hoop_comm_get_stats. */
struct traffic {
  uint64_t sent, received;         /* this rank's */
  uint64_t max_sent, max_received; /* the most over ranks */
  hoop_algo_t algo;                /* the algorithm the call used */
};

struct ctx {
  hoop_comm_t comm;
  int rank, nranks;
  struct options opt;
  char *send, *recv;
  double *times; /* [iters] */
  FILE *json;
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
  if (errno != 0 || *end != '\0' || v < 0) {
    fprintf(stderr, "hoop-bench: bad size \"%s\"\n", text);
    exit(2);
  }
  return (size_t)(v * mult);
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

static void usage(void) {
  printf("usage: hoop-bench [-b minbytes] [-e maxbytes] [-f factor] "
         "[-n iters] [-w warmup]\n"
         "                  [-c 0|1] [-d dtype] [-o op] [-a algo] "
         "[-J file.json] [-B 0|1]\n"
         "  dtypes: int8 uint8 int32 uint32 int64 uint64 half float double "
         "bfloat16\n  ops: sum prod min max avg\n  algos: auto ring tree ps\n"
         "  -B 1: append bytes sent/received per call and the model's "
         "busiest-link bytes\n");
}

static struct options parse_options(int argc, char **argv) {
  struct options o = {8,        64u << 20, 2,        20,
                      5,        1,         0,        HOOP_F32,
                      HOOP_SUM, HOOP_ALGO_AUTO, NULL};
  int ch;
  while ((ch = getopt(argc, argv, "b:e:f:n:w:c:d:o:a:J:B:h")) != -1) {
    switch (ch) {
    case 'b': o.min_bytes = parse_size(optarg); break;
    case 'e': o.max_bytes = parse_size(optarg); break;
    case 'f': o.step_factor = parse_size(optarg); break;
    case 'n': o.iters = atoi(optarg); break;
    case 'w': o.warmup = atoi(optarg); break;
    case 'c': o.check = atoi(optarg); break;
    case 'd':
      o.dtype = parse_enum(optarg, dtype_name, HOOP_DTYPE_COUNT, "dtype");
      break;
    case 'o': o.op = parse_enum(optarg, op_name, HOOP_OP_COUNT, "op"); break;
    case 'a':
      o.algo = parse_enum(optarg, algo_name, HOOP_ALGO_P2P, "algorithm");
      break;
    case 'J': o.json_path = optarg; break;
    case 'B': o.traffic = atoi(optarg); break;
    case 'h': usage(); exit(0);
    default: usage(); exit(2);
    }
  }
  if (o.iters < 1 || o.warmup < 0 || o.step_factor < 2 ||
      o.min_bytes > o.max_bytes) {
    fprintf(stderr, "hoop-bench: need -n >= 1, -w >= 0, -f >= 2, -b <= -e\n");
    exit(2);
  }
  return o;
}

/* Exact small integers in any dtype; 16-bit floats by truncation. */
static void store(void *buf, size_t i, hoop_dtype_t t, double v) {
  float f = (float)v;
  uint32_t bits;
  memcpy(&bits, &f, 4);
  switch (t) {
  case HOOP_I8: ((int8_t *)buf)[i] = (int8_t)v; break;
  case HOOP_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
  case HOOP_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
  case HOOP_U32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
  case HOOP_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
  case HOOP_U64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
  case HOOP_F32: ((float *)buf)[i] = f; break;
  case HOOP_F64: ((double *)buf)[i] = v; break;
  case HOOP_BF16: ((uint16_t *)buf)[i] = (uint16_t)(bits >> 16); break;
  case HOOP_F16: {
    int e = (int)((bits >> 23) & 0xff) - 127 + 15;
    uint16_t h = (uint16_t)((bits >> 16) & 0x8000);
    if (f != 0 && e > 0)
      h |= (uint16_t)((e << 10) | ((bits >> 13) & 0x3ff));
    ((uint16_t *)buf)[i] = h;
    break;
  }
  default: break;
  }
}

static double load(const void *buf, size_t i, hoop_dtype_t t) {
  switch (t) {
  case HOOP_I8: return ((const int8_t *)buf)[i];
  case HOOP_U8: return ((const uint8_t *)buf)[i];
  case HOOP_I32: return ((const int32_t *)buf)[i];
  case HOOP_U32: return ((const uint32_t *)buf)[i];
  case HOOP_I64: return (double)((const int64_t *)buf)[i];
  case HOOP_U64: return (double)((const uint64_t *)buf)[i];
  case HOOP_F32: return ((const float *)buf)[i];
  case HOOP_F64: return ((const double *)buf)[i];
  case HOOP_BF16: {
    uint32_t bits = (uint32_t)((const uint16_t *)buf)[i] << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
  }
  case HOOP_F16: {
    uint16_t h = ((const uint16_t *)buf)[i];
    int e = (h >> 10) & 0x1f;
    double m = e ? 1.0 + (h & 0x3ff) / 1024.0 : (h & 0x3ff) / 1024.0;
    double v = ldexp(m, e ? e - 15 : -14);
    return (h & 0x8000) ? -v : v;
  }
  default: return 0;
  }
}

/* Rank r's element i: small integers so every op is exact in every type. */
static double input_value(int rank, size_t i) {
  return 1.0 + (double)((rank + i) % 3);
}

static double expected_value(const struct ctx *c, size_t i) {
  double acc = input_value(0, i);
  for (int r = 1; r < c->nranks; r++) {
    double v = input_value(r, i);
    switch (c->opt.op) {
    case HOOP_PROD: acc *= v; break;
    case HOOP_MIN: acc = v < acc ? v : acc; break;
    case HOOP_MAX: acc = v > acc ? v : acc; break;
    default: acc += v; break;
    }
  }
  if (c->opt.op == HOOP_AVG) {
    acc /= c->nranks;
    if (c->opt.dtype != HOOP_F32 && c->opt.dtype != HOOP_F64 &&
        c->opt.dtype != HOOP_F16 && c->opt.dtype != HOOP_BF16)
      acc = trunc(acc);
  }
  return acc;
}

static void fill(const struct ctx *c, void *buf, size_t count) {
  for (size_t i = 0; i < count; i++)
    store(buf, i, c->opt.dtype, input_value(c->rank, i));
}

static long long count_wrong(const struct ctx *c, const void *buf,
                             size_t count) {
  int coarse = c->opt.dtype == HOOP_F16 || c->opt.dtype == HOOP_BF16;
  long long wrong = 0;
  for (size_t i = 0; i < count; i++) {
    double want = expected_value(c, i), got = load(buf, i, c->opt.dtype);
    double tol = coarse ? fabs(want) * 1e-2 : fabs(want) * 1e-6;
    if (!(fabs(got - want) <= tol))
      wrong++;
  }
  return wrong;
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void barrier(struct ctx *c) { CHECK(c, hoop_barrier(c->comm)); }

static void run_once(struct ctx *c, size_t count, int in_place) {
  const void *src = in_place ? c->recv : c->send;
  CHECK(c, hoop_allreduce(c->comm, src, c->recv, count, c->opt.dtype,
                          c->opt.op, NULL));
}

/*
 * One call, counted: the counters are reset just before it and read just
 * after, so they hold its payload alone (barriers and the gathers below
 * fall outside).
 */
static void counted_call(struct ctx *c, size_t count, int in_place,
                         struct traffic *tr) {
  hoop_stats_t st;
  CHECK(c, hoop_comm_reset_stats(c->comm));
  run_once(c, count, in_place);
  CHECK(c, hoop_comm_get_stats(c->comm, &st));
  tr->sent = st.bytes_sent;
  tr->received = st.bytes_received;
  /* AUTO picks per size; the counters say what it picked.  One rank runs
     no algorithm (it copies), which leaves AUTO. */
  tr->algo = HOOP_ALGO_AUTO;
  for (int a = HOOP_ALGO_RING; a < HOOP_ALGO_P2P; a++) {
    if (st.by_coll[HOOP_COLL_ALLREDUCE][a].calls > 0)
      tr->algo = (hoop_algo_t)a;
  }
  uint64_t most[2] = {tr->sent, tr->received};
  CHECK(c, hoop_allreduce(c->comm, most, most, 2, HOOP_U64, HOOP_MAX, NULL));
  tr->max_sent = most[0];
  tr->max_received = most[1];
}

/*
 * The cost model's payload bytes, each direction, on the busiest link for
 * `bytes` per rank: the ring sends and receives 2(N-1)/N of the buffer on
 * every link; the parameter server's root receives N-1 buffers and sends
 * N-1 back (2(N-1)K both ways together, (N-1)K each way); a double binary
 * tree node sends and receives at most 2K.
 */
static double model_link_bytes(hoop_algo_t algo, int n, size_t bytes) {
  double k = (double)bytes;
  switch (algo) {
  case HOOP_ALGO_RING: return 2.0 * (n - 1) / n * k;
  case HOOP_ALGO_PS: return (double)(n - 1) * k;
  case HOOP_ALGO_TREE: return n > 1 ? 2.0 * k : 0;
  default: return 0;
  }
}

/* Checks one call's result; with -B 1 the out-of-place one is counted. */
static long long check_result(struct ctx *c, size_t count, int in_place,
                              struct traffic *tr) {
  if (!c->opt.check)
    return 0;
  fill(c, in_place ? c->recv : c->send, count);
  if (!in_place)
    memset(c->recv, 0, count * hoop_dtype_size(c->opt.dtype));
  if (tr != NULL)
    counted_call(c, count, in_place, tr);
  else
    run_once(c, count, in_place);
  long long wrong = count_wrong(c, c->recv, count);
  CHECK(c, hoop_allreduce(c->comm, &wrong, &wrong, 1, HOOP_I64, HOOP_SUM,
                          NULL));
  return wrong;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

struct timing {
  double median_us, min_us, max_us;
};

static struct timing time_size(struct ctx *c, size_t count, int in_place) {
  for (int i = 0; i < c->opt.warmup; i++)
    run_once(c, count, in_place);
  for (int i = 0; i < c->opt.iters; i++) {
    barrier(c);
    double t0 = now_us();
    run_once(c, count, in_place);
    c->times[i] = now_us() - t0;
  }
  /* The slowest rank decides each iteration; gathered outside the timing. */
  CHECK(c, hoop_allreduce(c->comm, c->times, c->times, (size_t)c->opt.iters,
                          HOOP_F64, HOOP_MAX, NULL));
  qsort(c->times, (size_t)c->opt.iters, sizeof *c->times, cmp_double);
  struct timing t = {c->times[c->opt.iters / 2], c->times[0],
                     c->times[c->opt.iters - 1]};
  if (c->opt.iters % 2 == 0)
    t.median_us = (c->times[c->opt.iters / 2 - 1] + t.median_us) / 2;
  return t;
}

static void print_header(const struct ctx *c) {
  printf("# hoop-bench allreduce: %d ranks, %s %s, algorithm %s, %d warm-up "
         "and %d timed iterations, check %s\n",
         c->nranks, hoop_dtype_name(c->opt.dtype), hoop_op_name(c->opt.op),
         hoop_algo_name(c->opt.algo),
         c->opt.warmup, c->opt.iters, c->opt.check ? "on" : "off");
  printf("# time: median over iterations of the slowest rank; busbw = "
         "algbw * 2(N-1)/N\n");
  if (c->opt.traffic)
    printf("# bytes: payload of one out-of-place call: rank 0's sent and "
           "received, the most any rank sent and received, and the model's "
           "bytes each way on the busiest link for the algorithm used\n");
  printf("#%62s%30s\n", "out-of-place", "in-place");
  printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s", "size",
         "count", "type", "redop", "root", "time", "algbw", "busbw",
         "#wrong", "time", "algbw", "busbw", "#wrong");
  if (c->opt.traffic)
    printf(" %11s %11s %11s %11s %11s %5s", "sent", "recvd", "maxsent",
           "maxrecvd", "model", "algo");
  printf("\n# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s", "(B)",
         "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
         "(GB/s)", "(GB/s)", "");
  if (c->opt.traffic)
    printf(" %11s %11s %11s %11s %11s %5s", "(B)", "(B)", "(B)", "(B)",
           "(B)", "");
  printf("\n");
}

/* Prints one row; returns the number of wrong elements it found. */
static long long bench_size(struct ctx *c, size_t count) {
  size_t bytes = count * hoop_dtype_size(c->opt.dtype);
  double factor = 2.0 * (c->nranks - 1) / c->nranks;
  struct timing t[2];
  long long wrong[2];
  struct traffic tr = {0};
  struct traffic *count_it = c->opt.traffic ? &tr : NULL;
  /* Without checking there is no checked call to count: count one more. */
  if (count_it != NULL && !c->opt.check)
    counted_call(c, count, 0, count_it);
  for (int ip = 0; ip < 2; ip++) {
    wrong[ip] = check_result(c, count, ip, ip == 0 ? count_it : NULL);
    t[ip] = time_size(c, count, ip);
  }
  double model = model_link_bytes(tr.algo, c->nranks, bytes);
  if (c->rank != 0)
    return wrong[0] + wrong[1];
  printf("  %10zu %12zu %8s %6s %6d", bytes, count,
         hoop_dtype_name(c->opt.dtype), hoop_op_name(c->opt.op), -1);
  for (int ip = 0; ip < 2; ip++) {
    double algbw = t[ip].median_us > 0 ? bytes / t[ip].median_us / 1e3 : 0;
    printf(" %9.2f %7.2f %7.2f %6lld", t[ip].median_us, algbw,
           algbw * factor, wrong[ip]);
  }
  if (c->opt.traffic)
    printf(" %11llu %11llu %11llu %11llu %11.0f %5s",
           (unsigned long long)tr.sent, (unsigned long long)tr.received,
           (unsigned long long)tr.max_sent,
           (unsigned long long)tr.max_received, model,
           hoop_algo_name(tr.algo));
  printf("\n");
  fflush(stdout);
  if (c->json != NULL) {
    for (int ip = 0; ip < 2; ip++) {
      double algbw = t[ip].median_us > 0 ? bytes / t[ip].median_us / 1e3 : 0;
      fprintf(c->json,
              "{\"collective\":\"allreduce\",\"ranks\":%d,\"bytes\":%zu,"
              "\"count\":%zu,\"dtype\":\"%s\",\"op\":\"%s\","
              "\"in_place\":%d,\"time_us\":%.3f,\"min_us\":%.3f,"
              "\"max_us\":%.3f,\"algbw_GBps\":%.4f,\"busbw_GBps\":%.4f,"
              "\"wrong\":%lld",
              c->nranks, bytes, count, hoop_dtype_name(c->opt.dtype),
              hoop_op_name(c->opt.op), ip, t[ip].median_us, t[ip].min_us,
              t[ip].max_us, algbw, algbw * factor, wrong[ip]);
      if (c->opt.traffic)
        fprintf(c->json,
                ",\"sent_B\":%llu,\"recv_B\":%llu,\"max_sent_B\":%llu,"
                "\"max_recv_B\":%llu,\"model_link_B\":%.0f,"
                "\"algo\":\"%s\"",
                (unsigned long long)tr.sent, (unsigned long long)tr.received,
                (unsigned long long)tr.max_sent,
                (unsigned long long)tr.max_received, model,
                hoop_algo_name(tr.algo));
      fprintf(c->json, "}\n");
    }
  }
  return wrong[0] + wrong[1];
}

int main(int argc, char **argv) {
  struct ctx c = {0};
  c.opt = parse_options(argc, argv);
  CHECK(NULL, hoop_comm_init_env(&c.comm, NULL));
  CHECK(&c, hoop_comm_rank(c.comm, &c.rank));
  CHECK(&c, hoop_comm_size(c.comm, &c.nranks));
  CHECK(&c, hoop_comm_set_algo(c.comm, c.opt.algo));
  size_t esz = hoop_dtype_size(c.opt.dtype);
  c.send = malloc(c.opt.max_bytes + esz);
  c.recv = malloc(c.opt.max_bytes + esz);
  c.times = malloc(sizeof *c.times * (size_t)c.opt.iters);
  if (c.send == NULL || c.recv == NULL || c.times == NULL) {
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
  free(c.send);
  free(c.recv);
  free(c.times);
  if (total_wrong > 0 && c.rank == 0)
    fprintf(stderr, "hoop-bench: %lld wrong elements\n", total_wrong);
  return total_wrong > 0 ? 1 : 0;
}
