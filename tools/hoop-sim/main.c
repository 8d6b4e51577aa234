/*
 * hoop-sim: predicts all-reduce (or reduce-scatter, all-gather) times and
 * link traffic for up to 4,096
 * ranks (and more) on M hosts of L ranks, from the library's own plans
 * run through a discrete-event model of the links (sim.h says what it
 * models and what it leaves out).  Prints a table per algorithm with the
 * textbook closed form beside each row, and, for AUTO, the cost model's
 * pick against the simulator's fastest.
 *
 *   hoop-sim --hosts 64 --ranks-per-host 8 -a all --sizes 4K,1M,64M,1G
 *   hoop-sim -n 8 -b 4K -e 1G -f 4 -a ring --link-rate 1gbit
 *   hoop-sim --hosts 2 --ranks-per-host 2 -C reducescatter --sizes 64M
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>

#include "core/param.h"
#include "sim.h"

#define MAX_SIZES 64

static void usage(FILE *f) {
  fprintf(f,
"usage: hoop-sim [-n ranks | --hosts M] [--ranks-per-host L]\n"
"                [--placement contiguous|cyclic]\n"
"                [-C allreduce|reducescatter|allgather]\n"
"                [-a ring|tree|ps|hier|auto|all]\n"
"                [-b min] [-e max] [-f factor] [--sizes 4K,1M,...]\n"
"                [--link-rate R] [--link-latency T] [--shm-rate R]\n"
"                [--shm-latency T] [--slice B] [--max-ops N]\n"
"                [--model-alpha T] [--model-host-alpha T]\n"
"                [--model-link-rate R] [--model-host-rate R]\n"
"                [--model-cores C]\n"
"\n"
"Builds every rank's plan of the call with hoop's own builders (ring.c,\n"
"tree.c, ps.c, hier.c) for a communicator held in memory, and runs the\n"
"plans' ops through a discrete-event model: each host has one NIC (rate and\n"
"latency, each direction on its own, first come first served) for\n"
"messages between hosts, and one memory link (--shm-rate) for messages\n"
"between its own ranks.  An op waits for its data and for what the plan\n"
"records (feed, after, its gate, the op before it on its link).\n"
"\n"
"Left out: the time to reduce or copy received bytes (a receive is done\n"
"when its last byte arrives), forwarding part of a slice before all of\n"
"it has arrived, the bound on bytes in flight (socket and shm buffers),\n"
"headers, TCP's own dynamics, CPU cores.  Calls are float32 sums in\n"
"place.  Predicted times are lower bounds in those respects.\n"
"\n"
"  -n N                ranks; alone, N hosts of one rank each\n"
"  --hosts M, --ranks-per-host L   N = M x L (default 1 x 8)\n"
"  --placement P       contiguous (rank r on host r / L, default) or\n"
"                      cyclic (host r %% M)\n"
"  -C COLL             allreduce (default), reducescatter or allgather\n"
"                      (these two: ring and hier; sizes are the whole\n"
"                      buffer, rounded down to N blocks of floats)\n"
"  -a ALGO             ring, tree, ps, hier, auto (the cost model's pick),\n"
"                      or all (those that apply, then auto against the\n"
"                      fastest)\n"
"  -b, -e, -f          sizes from -b to -e, times -f (as hoop-bench;\n"
"                      defaults 4K, 1G, 4)\n"
"  --sizes LIST        these sizes instead (K, M, G: powers of 1024)\n"
"  --link-rate R       each NIC direction: 10gbit (default), 1gbit,\n"
"                      100mbit, or bytes/s as 1.25G or 125M\n"
"  --link-latency T    one way, as 20us (default), 1ms, 500ns\n"
"  --shm-rate R        a host's memory link (default 10G bytes/s)\n"
"  --shm-latency T     (default 1us)\n"
"  --slice B           HOOP_SLICE_BYTES (default 256K)\n"
"  --max-ops N         above this many ops in all plans, plans are built\n"
"                      for bytes / s and each op carries s times its\n"
"                      bytes (s a power of two, shown in the table):\n"
"                      slices s times larger.  Default 32M.  The ring's\n"
"                      ops (about 4N^2) cannot shrink this way\n"
"  --model-alpha T, --model-host-alpha T, --model-link-rate R,\n"
"  --model-host-rate R, --model-cores C\n"
"                      the cost model's inputs for AUTO (HOOP_ALPHA_NS,\n"
"                      HOOP_HOST_ALPHA_NS, HOOP_LINK_MBPS, HOOP_HOST_MBPS,\n"
"                      cores); by default the simulated network's: link\n"
"                      latency, memory latency, link rate, memory rate,\n"
"                      and one core (one memory link)\n");
}

static void die(const char *fmt, const char *arg) {
  fprintf(stderr, "hoop-sim: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n");
  exit(2);
}

/* A size: a whole number with an optional K, M or G (powers of 1024),
   read as the library reads its settings. */
static size_t parse_size(const char *text) {
  int64_t v;
  if (hoop__parse_size(text, &v) != 0)
    die("'%s' is not a size", text);
  return (size_t)v;
}

/*
 * A rate in bytes/s: "10gbit", "100mbit", "1kbit", "800bit" (bits, as tc
 * writes them, powers of 1000), or "1.25G", "125M", "10K" bytes/s.
 */
static double parse_rate(const char *text) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (errno != 0 || end == text || v <= 0)
    die("'%s' is not a rate", text);
  static const struct { const char *unit; double mult; } units[] = {
      {"gbit", 1e9 / 8}, {"mbit", 1e6 / 8}, {"kbit", 1e3 / 8},
      {"bit", 1.0 / 8},  {"G", 1e9},        {"M", 1e6},
      {"K", 1e3},        {"", 1}};
  for (size_t i = 0; i < sizeof units / sizeof *units; i++)
    if (strcasecmp(end, units[i].unit) == 0)
      return v * units[i].mult;
  die("'%s' is not a rate (10gbit, 125M)", text);
  return 0;
}

/* A time in seconds: "20us", "1ms", "500ns", "0.1s" or plain seconds. */
static double parse_time(const char *text) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (errno != 0 || end == text || v < 0)
    die("'%s' is not a time", text);
  static const struct { const char *unit; double mult; } units[] = {
      {"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1}, {"", 1}};
  for (size_t i = 0; i < sizeof units / sizeof *units; i++)
    if (strcmp(end, units[i].unit) == 0)
      return v * units[i].mult;
  die("'%s' is not a time (20us, 1ms)", text);
  return 0;
}

static int parse_int(const char *text, const char *what) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < 0 || v > 1 << 30)
    die("bad number for %s", what);
  return (int)v;
}

/* -C's names, as hoop-bench's. */
static const struct {
  const char *name;
  hoop_coll_t coll;
} coll_names[] = {{"allreduce", HOOP_COLL_ALLREDUCE},
                  {"reducescatter", HOOP_COLL_REDUCE_SCATTER},
                  {"allgather", HOOP_COLL_ALLGATHER}};

static hoop_coll_t parse_coll(const char *text) {
  for (size_t i = 0; i < sizeof coll_names / sizeof *coll_names; i++)
    if (strcmp(text, coll_names[i].name) == 0)
      return coll_names[i].coll;
  die("-C %s: allreduce, reducescatter or allgather", text);
  return HOOP_COLL_ALLREDUCE;
}

static const char *coll_text(hoop_coll_t coll) {
  for (size_t i = 0; i < sizeof coll_names / sizeof *coll_names; i++)
    if (coll_names[i].coll == coll)
      return coll_names[i].name;
  return "?";
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void size_text(size_t b, char *buf, size_t len) {
  if (b >= (1u << 30) && b % (1u << 30) == 0)
    snprintf(buf, len, "%zuG", b >> 30);
  else if (b >= (1u << 20) && b % (1u << 20) == 0)
    snprintf(buf, len, "%zuM", b >> 20);
  else if (b >= 1024 && b % 1024 == 0)
    snprintf(buf, len, "%zuK", b >> 10);
  else
    snprintf(buf, len, "%zu", b);
}

/*
 * The bytes column each table checks against its closed form: for the
 * ring the most a rank sent (2(N-1)K/N), for the tree likewise (its
 * busiest rank's), for the server what went through rank 0 (2(N-1)K),
 * for the hierarchical all-reduce the busiest host link, one way
 * (2(M-1)K/M).  Reduce-scatter and all-gather move half of the ring's and
 * the hierarchical all-reduce's.
 */
static void rank_bytes(const struct hoop_sim_config *cfg, hoop_algo_t a,
                       const struct hoop_sim_result *r, size_t bytes,
                       double *sim, double *cf) {
  double n = (double)cfg->hosts * cfg->ranks_per_host, k = (double)bytes;
  double halves = cfg->coll == HOOP_COLL_ALLREDUCE ? 2 : 1;
  if (a == HOOP_ALGO_PS) {
    *sim = (double)r->root_moved;
    *cf = 2 * (n - 1) * k;
  } else if (a == HOOP_ALGO_TREE) {
    *sim = (double)r->max_rank_sent;
    *cf = n >= 5 ? 2 * k : (n >= 3 ? 1.5 * k : k);
  } else if (a == HOOP_ALGO_ONESHOT) {
    *sim = (double)r->max_rank_sent;
    *cf = k;
  } else if (a == HOOP_ALGO_HIER) {
    *sim = (double)r->max_nic_bytes;
    *cf = halves * (cfg->hosts - 1) / cfg->hosts * k;
  } else {
    *sim = (double)r->max_rank_sent;
    *cf = halves * (n - 1) / n * k;
  }
}

static void table_header(const struct hoop_sim_config *cfg, hoop_algo_t a) {
  int half = cfg->coll != HOOP_COLL_ALLREDUCE;
  const char *hier = half ? "max host link, cf (M-1)K/M"
                          : "max host link, cf 2(M-1)K/M";
  const char *ring = half ? "max rank sent, cf (N-1)K/N"
                          : "max rank sent, cf 2(N-1)K/N";
  const char *what = a == HOOP_ALGO_PS     ? "root sent+recv, cf 2(N-1)K"
                     : a == HOOP_ALGO_TREE ? "max rank sent, cf 2K (N>=5)"
                     : a == HOOP_ALGO_HIER ? hier
                                           : ring;
  printf("\n# %s %s: time and algbw simulated; cf_us the closed form; "
         "rank_bytes = %s\n", coll_text(cfg->coll), hoop_algo_name(a),
         what);
  printf("%10s %8s %14s %10s %14s %7s %14s %14s %14s %14s %10s %5s\n",
         "bytes", "algo", "time_us", "algbw_GB/s", "cf_us", "sim/cf",
         "rank_bytes", "cf_bytes", "max_nic", "cross_host", "ops", "scale");
}

int main(int argc, char **argv) {
  struct hoop_sim_config cfg;
  hoop_sim_config_default(&cfg);
  int nranks = 0, hosts = 0, per_host = 0;
  const char *algo_arg = "all";
  size_t min_b = 4096, max_b = (size_t)1 << 30, factor = 4;
  size_t sizes[MAX_SIZES];
  int nsizes = 0;
  enum {
    O_HOSTS = 256, O_PER_HOST, O_PLACEMENT, O_SIZES, O_LINK_RATE,
    O_LINK_LAT, O_SHM_RATE, O_SHM_LAT, O_SLICE, O_MAX_OPS, O_M_ALPHA,
    O_M_HOST_ALPHA, O_M_LINK, O_M_HOST, O_M_CORES
  };
  static const struct option longopts[] = {
      {"hosts", required_argument, NULL, O_HOSTS},
      {"ranks-per-host", required_argument, NULL, O_PER_HOST},
      {"placement", required_argument, NULL, O_PLACEMENT},
      {"sizes", required_argument, NULL, O_SIZES},
      {"link-rate", required_argument, NULL, O_LINK_RATE},
      {"link-latency", required_argument, NULL, O_LINK_LAT},
      {"shm-rate", required_argument, NULL, O_SHM_RATE},
      {"shm-latency", required_argument, NULL, O_SHM_LAT},
      {"slice", required_argument, NULL, O_SLICE},
      {"max-ops", required_argument, NULL, O_MAX_OPS},
      {"model-alpha", required_argument, NULL, O_M_ALPHA},
      {"model-host-alpha", required_argument, NULL, O_M_HOST_ALPHA},
      {"model-link-rate", required_argument, NULL, O_M_LINK},
      {"model-host-rate", required_argument, NULL, O_M_HOST},
      {"model-cores", required_argument, NULL, O_M_CORES},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "n:a:b:e:f:hC:", longopts, NULL)) !=
         -1) {
    switch (ch) {
    case 'n': nranks = parse_int(optarg, "-n"); break;
    case 'C': cfg.coll = parse_coll(optarg); break;
    case 'a': algo_arg = optarg; break;
    case 'b': min_b = parse_size(optarg); break;
    case 'e': max_b = parse_size(optarg); break;
    case 'f': factor = parse_size(optarg); break;
    case O_HOSTS: hosts = parse_int(optarg, "--hosts"); break;
    case O_PER_HOST: per_host = parse_int(optarg, "--ranks-per-host"); break;
    case O_PLACEMENT:
      if (strcmp(optarg, "cyclic") == 0)
        cfg.cyclic = 1;
      else if (strcmp(optarg, "contiguous") != 0)
        die("--placement %s: contiguous or cyclic", optarg);
      break;
    case O_SIZES: {
      char *list = strdup(optarg), *save = NULL;
      for (char *t = strtok_r(list, ",", &save); t != NULL;
           t = strtok_r(NULL, ",", &save)) {
        if (nsizes == MAX_SIZES)
          die("--sizes: at most 64 sizes%s", "");
        sizes[nsizes++] = parse_size(t);
      }
      free(list);
      break;
    }
    case O_LINK_RATE: cfg.link_rate = parse_rate(optarg); break;
    case O_LINK_LAT: cfg.link_latency = parse_time(optarg); break;
    case O_SHM_RATE: cfg.shm_rate = parse_rate(optarg); break;
    case O_SHM_LAT: cfg.shm_latency = parse_time(optarg); break;
    case O_SLICE: cfg.slice_bytes = parse_size(optarg); break;
    case O_MAX_OPS: cfg.max_ops = parse_size(optarg); break;
    case O_M_ALPHA: cfg.model_alpha_s = parse_time(optarg); break;
    case O_M_HOST_ALPHA: cfg.model_host_alpha_s = parse_time(optarg); break;
    case O_M_LINK: cfg.model_link_beta_s = 1 / parse_rate(optarg); break;
    case O_M_HOST: cfg.model_host_beta_s = 1 / parse_rate(optarg); break;
    case O_M_CORES: cfg.model_host_cores = parse_int(optarg, "--model-cores");
      break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (optind < argc)
    die("unexpected argument '%s'", argv[optind]);
  /* -n alone: one rank per host; with one of the others, the rest. */
  if (nranks > 0 && hosts == 0 && per_host == 0)
    hosts = nranks, per_host = 1;
  else if (nranks > 0 && per_host > 0 && hosts == 0)
    hosts = nranks / per_host;
  else if (nranks > 0 && hosts > 0 && per_host == 0)
    per_host = nranks / hosts;
  if (hosts == 0)
    hosts = 1;
  if (per_host == 0)
    per_host = 8;
  if (nranks > 0 && hosts * per_host != nranks)
    die("-n does not equal --hosts x --ranks-per-host%s", "");
  cfg.hosts = hosts;
  cfg.ranks_per_host = per_host;
  if (cfg.slice_bytes % 4 != 0 || cfg.slice_bytes == 0)
    die("--slice must be a positive multiple of 4%s", "");

  hoop_algo_t algos[4];
  int nalgos = 0, with_auto = 0;
  if (strcmp(algo_arg, "all") == 0) {
    algos[nalgos++] = HOOP_ALGO_RING;
    /* Reduce-scatter and all-gather have no tree or server. */
    if (cfg.coll == HOOP_COLL_ALLREDUCE) {
      algos[nalgos++] = HOOP_ALGO_TREE;
      algos[nalgos++] = HOOP_ALGO_PS;
    }
    /* Elsewhere the hierarchical all-reduce is the ring. */
    if (hosts >= 2 && per_host >= 2)
      algos[nalgos++] = HOOP_ALGO_HIER;
    with_auto = 1;
  } else if (strcmp(algo_arg, "auto") == 0) {
    algos[nalgos++] = HOOP_ALGO_AUTO;
  } else if (strcmp(algo_arg, "ring") == 0) {
    algos[nalgos++] = HOOP_ALGO_RING;
  } else if (strcmp(algo_arg, "tree") == 0) {
    algos[nalgos++] = HOOP_ALGO_TREE;
  } else if (strcmp(algo_arg, "ps") == 0) {
    algos[nalgos++] = HOOP_ALGO_PS;
  } else if (strcmp(algo_arg, "hier") == 0) {
    algos[nalgos++] = HOOP_ALGO_HIER;
  } else {
    die("-a %s: ring, tree, ps, hier, auto or all", algo_arg);
  }
  if (nsizes == 0) {
    if (factor < 2 || min_b > max_b)
      die("need -f >= 2 and -b <= -e%s", "");
    for (size_t b = min_b; b <= max_b && nsizes < MAX_SIZES; b *= factor)
      sizes[nsizes++] = b;
  }
  int n = hosts * per_host;
  /* Whole floats; for reduce-scatter and all-gather, N blocks of them. */
  size_t unit = cfg.coll == HOOP_COLL_ALLREDUCE ? 4 : 4 * (size_t)n;
  for (int i = 0; i < nsizes; i++)
    sizes[i] -= sizes[i] % unit;

  printf("# hoop-sim: %s, %d ranks (%d hosts x %d), %s placement\n",
         coll_text(cfg.coll), n, hosts, per_host,
         cfg.cyclic ? "cyclic" : "contiguous");
  printf("# NIC %.4g GB/s each way, latency %.3g us; memory link %.4g GB/s, "
         "latency %.3g us; slice %zu; max ops %llu\n",
         cfg.link_rate / 1e9, cfg.link_latency * 1e6, cfg.shm_rate / 1e9,
         cfg.shm_latency * 1e6, cfg.slice_bytes,
         (unsigned long long)cfg.max_ops);
  printf("# left out: reduction and copy time, partial-slice forwarding, "
         "buffer bounds, TCP dynamics, cores (see --help)\n");

  double t_start = now_s();
  static double best[MAX_SIZES], took[4][MAX_SIZES];
  static hoop_algo_t best_algo[MAX_SIZES];
  int failed = 0;
  for (int ai = 0; ai < nalgos; ai++) {
    table_header(&cfg, algos[ai]);
    for (int i = 0; i < nsizes; i++) {
      struct hoop_sim_result r = {0};
      char err[256] = "", sz[32];
      size_text(sizes[i], sz, sizeof sz);
      if (hoop_sim_call(&cfg, algos[ai], sizes[i], &r, err, sizeof err) !=
          0) {
        printf("%10s %8s failed: %s\n", sz, hoop_algo_name(algos[ai]),
               err);
        failed = 1;
        continue;
      }
      double sim_b, cf_b;
      rank_bytes(&cfg, r.algo, &r, sizes[i], &sim_b, &cf_b);
      printf("%10s %8s %14.1f %10.3f %14.1f %7.3f %14.0f %14.0f %14llu "
             "%14llu %10llu %5llu\n",
             sz, hoop_algo_name(r.algo), r.time_s * 1e6,
             r.time_s > 0 ? sizes[i] / r.time_s / 1e9 : 0.0,
             r.closed_form_s * 1e6,
             r.closed_form_s > 0 ? r.time_s / r.closed_form_s : 0.0, sim_b,
             cf_b, (unsigned long long)r.max_nic_bytes,
             (unsigned long long)r.cross_bytes, (unsigned long long)r.ops,
             (unsigned long long)r.scale);
      fflush(stdout);
      took[ai][i] = r.time_s;
      if (ai == 0 || r.time_s < best[i]) {
        best[i] = r.time_s;
        best_algo[i] = r.algo;
      }
    }
  }
  if (with_auto) {
    printf("\n# auto: the cost model's pick (model.c) against the "
           "simulator's fastest of those above\n");
    printf("%10s %8s %14s %8s %14s %10s %6s\n", "bytes", "auto", "auto_us",
           "fastest", "fastest_us", "auto/best", "agree");
    for (int i = 0; i < nsizes; i++) {
      char sz[32];
      size_text(sizes[i], sz, sizeof sz);
      hoop_algo_t pick = hoop_sim_auto_choice(&cfg, sizes[i]);
      struct hoop_sim_result r = {0};
      char err[256] = "";
      /* The same schedule on the same network: the row above, if any. */
      int done = -1;
      for (int ai = 0; ai < nalgos; ai++)
        done = algos[ai] == pick ? ai : done;
      if (done >= 0)
        r.time_s = took[done][i];
      else if (hoop_sim_call(&cfg, pick, sizes[i], &r, err, sizeof err)) {
        printf("%10s %8s failed: %s\n", sz, hoop_algo_name(pick), err);
        failed = 1;
        continue;
      }
      printf("%10s %8s %14.1f %8s %14.1f %10.3f %6s\n", sz,
             hoop_algo_name(pick), r.time_s * 1e6,
             hoop_algo_name(best_algo[i]), best[i] * 1e6,
             best[i] > 0 ? r.time_s / best[i] : 1.0,
             pick == best_algo[i]                ? "yes"
             : r.time_s <= best[i] * (1 + 1e-6) ? "tie"
                                                 : "no");
    }
  }
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf("\n# wall %.2f s, peak RSS %.1f MiB\n", now_s() - t_start,
         ru.ru_maxrss / 1024.0);
  return failed;
}
