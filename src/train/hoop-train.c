/*
 * hoop-train: data-parallel training of an MLP or a small CNN on an IDX
 * image set (Fashion-MNIST by default), gradients averaged by hoop.
 * Started alone it trains as one rank; under hoop-run, mpirun, srun or torchrun it joins the
 * other ranks through hoop_comm_init_env.
 */
#include <cblas.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "dataset.h"
#include "hoop.h"
#include "trainer.h"

extern char **environ;

#define DEFAULT_DATA "/usr/share/datasets/fashion-mnist"
#define DEFAULT_HIDDEN "200,200"

struct options {
  const char *data;
  const char *hidden; /* NULL: DEFAULT_HIDDEN */
  model_kind_t model;
  int epochs, batch, accum_steps, threads;
  optim_kind_t optim;
  float lr, momentum, weight_decay;
  int lr_given;
  size_t bucket_bytes;
  hoop_algo_t algo;
  uint64_t seed;
  size_t train_limit, test_limit;
  const char *metrics, *plot, *checkpoint;
  char plot_metrics[4096]; /* --plot without --metrics: FILE.png.csv */
  int resume, quiet;
  float progress_every; /* seconds between progress lines in a log */
  int cuda; /* --device cuda */
};

static void usage(FILE *to) {
  fprintf(to,
    "usage: hoop-train [options]\n"
    "  --data DIR          IDX files train-/t10k-{images-idx3,labels-idx1}"
    "-ubyte[.gz]\n"
    "                      (default " DEFAULT_DATA ")\n"
    "  --model mlp|cnn     the MLP, or the CNN of PyTorch's MNIST example\n"
    "                      (conv 5x5x10, pool, conv 5x5x20, dropout, pool,\n"
    "                      50, dropout, 10) (default mlp)\n"
    "  --hidden W,W,...    the MLP's hidden layer widths, or none (default "
    DEFAULT_HIDDEN ")\n"
    "  --epochs N          (default 10)\n"
    "  --batch N           samples per rank per step (default 64)\n"
    "  --accum-steps N     steps whose gradients add up before one update "
    "(default 1)\n"
    "  --optim sgd|adam    (default adam)\n"
    "  --lr X              learning rate (default 0.001 adam, 0.05 sgd)\n"
    "  --momentum X        SGD momentum (default 0.9)\n"
    "  --weight-decay X    L2 penalty (default 0)\n"
    "  --bucket-kb N       gradient bucket size (default 128)\n"
    "  --algo ring|tree|ps|auto  all-reduce algorithm (default auto)\n"
    "  --seed N            initial parameters and shuffling (default 1)\n"
    "  --train-limit N     use the first N training samples (default all)\n"
    "  --test-limit N      use the first N test samples (default all)\n"
    "  --threads N         BLAS threads per rank (default 1)\n"
    "  --device cpu|cuda   compute with OpenBLAS, or cuBLAS on rank %% (GPUs "
    "present)\n"
    "                      (default cpu)\n"
    "  --metrics FILE      per-epoch CSV: the epoch line's figures, time\n"
    "                      computing, in all-reduce and waiting for late\n"
    "                      ranks, median step all-reduce times, and bytes\n"
    "                      sent per step beside the model's figure\n"
    "  --plot FILE.png     loss and accuracy curves (needs python3 and "
    "matplotlib)\n"
    "  --checkpoint FILE   rank 0 saves model and optimiser every epoch\n"
    "  --resume            continue from --checkpoint\n"
    "  --progress-every S  rank 0's progress: a bar on a terminal (also\n"
    "                      through hoop-run), else a line at most every S\n"
    "                      seconds (default 10)\n"
    "  --quiet             no progress bar or lines\n");
}

static int die_usage(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("hoop-train: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputs(" (see hoop-train --help)\n", stderr);
  va_end(ap);
  return 2;
}

static int parse_long(const char *text, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi)
    return -1;
  *out = v;
  return 0;
}

static int parse_float(const char *text, float *out) {
  char *end;
  errno = 0;
  float v = strtof(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !(v >= 0.0f))
    return -1;
  *out = v;
  return 0;
}

static int parse_hidden(const char *text, model_spec_t *spec) {
  spec->nhidden = 0;
  if (strcmp(text, "none") == 0)
    return 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", text);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok != NULL;
       tok = strtok_r(NULL, ",", &save)) {
    long w;
    if (spec->nhidden >= MLP_MAX_LAYERS - 1 || parse_long(tok, 1, 65536, &w))
      return -1;
    spec->hidden[spec->nhidden++] = (int)w;
  }
  return 0;
}

static int parse_args(int argc, char **argv, struct options *o) {
  enum { O_DATA = 256, O_HIDDEN, O_EPOCHS, O_BATCH, O_ACCUM, O_OPTIM, O_LR,
         O_MOMENTUM, O_WD, O_BUCKET, O_ALGO, O_SEED, O_TRAIN_LIMIT,
         O_TEST_LIMIT, O_THREADS, O_METRICS, O_PLOT, O_CHECKPOINT, O_RESUME,
         O_QUIET, O_HELP, O_DEVICE, O_MODEL, O_PROGRESS_EVERY };
  static const struct option longopts[] = {
      {"data", 1, 0, O_DATA},         {"hidden", 1, 0, O_HIDDEN},
      {"epochs", 1, 0, O_EPOCHS},     {"batch", 1, 0, O_BATCH},
      {"accum-steps", 1, 0, O_ACCUM}, {"optim", 1, 0, O_OPTIM},
      {"lr", 1, 0, O_LR},             {"momentum", 1, 0, O_MOMENTUM},
      {"weight-decay", 1, 0, O_WD},   {"bucket-kb", 1, 0, O_BUCKET},
      {"algo", 1, 0, O_ALGO},         {"seed", 1, 0, O_SEED},
      {"train-limit", 1, 0, O_TRAIN_LIMIT},
      {"test-limit", 1, 0, O_TEST_LIMIT},
      {"threads", 1, 0, O_THREADS},   {"metrics", 1, 0, O_METRICS},
      {"plot", 1, 0, O_PLOT},         {"checkpoint", 1, 0, O_CHECKPOINT},
      {"resume", 0, 0, O_RESUME},     {"quiet", 0, 0, O_QUIET},
      {"device", 1, 0, O_DEVICE},     {"model", 1, 0, O_MODEL},
      {"progress-every", 1, 0, O_PROGRESS_EVERY},
      {"help", 0, 0, O_HELP},         {0, 0, 0, 0}};
  *o = (struct options){.data = DEFAULT_DATA, .model = MODEL_MLP,
                        .epochs = 10, .batch = 64, .accum_steps = 1,
                        .threads = 1, .optim = OPTIM_ADAM, .momentum = 0.9f,
                        .bucket_bytes = 128 << 10, .algo = HOOP_ALGO_AUTO,
                        .seed = 1, .progress_every = 10.0f};
  int c;
  long v;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case O_DATA: o->data = optarg; break;
    case O_HIDDEN: o->hidden = optarg; break;
    case O_EPOCHS:
      if (parse_long(optarg, 1, 100000, &v))
        return die_usage("--epochs wants 1..100000, not \"%s\"", optarg);
      o->epochs = (int)v;
      break;
    case O_BATCH:
      if (parse_long(optarg, 1, 65536, &v))
        return die_usage("--batch wants 1..65536, not \"%s\"", optarg);
      o->batch = (int)v;
      break;
    case O_ACCUM:
      if (parse_long(optarg, 1, 100000, &v))
        return die_usage("--accum-steps wants 1..100000, not \"%s\"",
                         optarg);
      o->accum_steps = (int)v;
      break;
    case O_OPTIM:
      if (optim_parse(optarg) < 0)
        return die_usage("--optim is sgd or adam, not \"%s\"", optarg);
      o->optim = (optim_kind_t)optim_parse(optarg);
      break;
    case O_LR:
      if (parse_float(optarg, &o->lr) || o->lr == 0.0f)
        return die_usage("--lr wants a positive number, not \"%s\"",
                         optarg);
      o->lr_given = 1;
      break;
    case O_MOMENTUM:
      if (parse_float(optarg, &o->momentum) || o->momentum >= 1.0f)
        return die_usage("--momentum wants 0 <= x < 1, not \"%s\"", optarg);
      break;
    case O_WD:
      if (parse_float(optarg, &o->weight_decay))
        return die_usage("--weight-decay wants x >= 0, not \"%s\"", optarg);
      break;
    case O_BUCKET:
      if (parse_long(optarg, 1, 1 << 20, &v))
        return die_usage("--bucket-kb wants 1..1048576, not \"%s\"", optarg);
      o->bucket_bytes = (size_t)v << 10;
      break;
    case O_ALGO: {
      int found = -1;
      for (int a = HOOP_ALGO_AUTO; a <= HOOP_ALGO_PS; a++)
        if (strcmp(optarg, hoop_algo_name((hoop_algo_t)a)) == 0)
          found = a;
      if (found < 0)
        return die_usage("--algo is ring, tree, ps or auto, not \"%s\"",
                         optarg);
      o->algo = (hoop_algo_t)found;
      break;
    }
    case O_SEED:
      if (parse_long(optarg, 0, LONG_MAX, &v))
        return die_usage("--seed wants a number >= 0, not \"%s\"", optarg);
      o->seed = (uint64_t)v;
      break;
    case O_TRAIN_LIMIT:
    case O_TEST_LIMIT:
      if (parse_long(optarg, 1, LONG_MAX, &v))
        return die_usage("%s wants a positive count, not \"%s\"",
                         c == O_TRAIN_LIMIT ? "--train-limit"
                                            : "--test-limit", optarg);
      *(c == O_TRAIN_LIMIT ? &o->train_limit : &o->test_limit) = (size_t)v;
      break;
    case O_THREADS:
      if (parse_long(optarg, 1, 1024, &v))
        return die_usage("--threads wants 1..1024, not \"%s\"", optarg);
      o->threads = (int)v;
      break;
    case O_METRICS: o->metrics = optarg; break;
    case O_PLOT: o->plot = optarg; break;
    case O_CHECKPOINT: o->checkpoint = optarg; break;
    case O_RESUME: o->resume = 1; break;
    case O_QUIET: o->quiet = 1; break;
    case O_PROGRESS_EVERY:
      if (parse_float(optarg, &o->progress_every) || o->progress_every == 0)
        return die_usage("--progress-every wants a positive number of "
                         "seconds, not \"%s\"", optarg);
      break;
    case O_DEVICE:
      if (strcmp(optarg, "cpu") != 0 && strcmp(optarg, "cuda") != 0)
        return die_usage("--device is cpu or cuda, not \"%s\"", optarg);
      o->cuda = strcmp(optarg, "cuda") == 0;
      break;
    case O_MODEL:
      if (model_kind_parse(optarg) < 0)
        return die_usage("--model is mlp or cnn, not \"%s\"", optarg);
      o->model = (model_kind_t)model_kind_parse(optarg);
      break;
    case 'h':
    case O_HELP: usage(stdout); exit(0);
    default: return 2;
    }
  }
  if (optind < argc)
    return die_usage("unexpected argument \"%s\"", argv[optind]);
  if (o->resume && o->checkpoint == NULL)
    return die_usage("--resume needs --checkpoint FILE");
  if (o->hidden != NULL && o->model != MODEL_MLP)
    return die_usage("--hidden shapes the MLP; the CNN's layers are fixed");
  model_spec_t check;
  if (o->hidden != NULL && parse_hidden(o->hidden, &check) != 0)
    return die_usage("--hidden wants up to %d widths 1..65536 separated by "
                     "commas, or none, not \"%s\"", MLP_MAX_LAYERS - 1,
                     o->hidden);
  if (!o->lr_given)
    o->lr = o->optim == OPTIM_ADAM ? 0.001f : 0.05f;
  if (o->plot != NULL && o->metrics == NULL) {
    snprintf(o->plot_metrics, sizeof o->plot_metrics, "%s.csv", o->plot);
    o->metrics = o->plot_metrics;
  }
  return 0;
}

/* Started by a launcher, or alone as the only rank. */
static hoop_result_t join(hoop_comm_t *comm) {
  static const char *launcher_vars[] = {"HOOP_RANK", "RANK",
                                        "OMPI_COMM_WORLD_RANK",
                                        "SLURM_PROCID"};
  for (size_t i = 0; i < sizeof launcher_vars / sizeof *launcher_vars; i++)
    if (getenv(launcher_vars[i]) != NULL)
      return hoop_comm_init_env(comm, NULL);
  hoop_unique_id_t id;
  hoop_result_t res = hoop_get_unique_id(&id);
  return res != HOOP_SUCCESS ? res : hoop_comm_init_rank(comm, 1, &id, 0,
                                                         NULL);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* What one epoch did, summed over ranks where it says so. */
struct epoch_report {
  int epoch;
  double loss, train_acc, test_acc;
  double seconds, samples_per_s;
  double compute_s, wait_s, comm_s; /* rank 0's, per epoch */
  double late_s; /* of comm_s, waiting for the other ranks to join */
  /* Medians over steps of a step's all-reduce time, and of it less the
   * wait for late ranks: what hoop-bench's median call compares with. */
  double step_comm_us, step_moving_us;
  /* Each step's least moving time over the ranks: from the last rank's
   * arrival, as hoop-bench -S times the late rank. */
  double step_last_in_us;
  double bytes_sent_per_step, model_bytes_per_step;
  hoop_algo_t algo;
};

/*
 * The bytes rank 0 sends per all-reduce of K gradient bytes under `algo`:
 * the ring sends 2(N-1)K/N from every rank; the parameter server's root
 * sends (N-1)K (and receives as much: 2(N-1)K through its link).  The tree
 * depends on a rank's place in both trees; -1 says there is no one figure.
 */
static double model_bytes(hoop_algo_t algo, int nranks, double k) {
  if (nranks == 1)
    return 0.0;
  if (algo == HOOP_ALGO_RING)
    return 2.0 * (nranks - 1) * k / nranks;
  if (algo == HOOP_ALGO_PS)
    return (nranks - 1) * k;
  if (algo == HOOP_ALGO_ONESHOT) /* every peer gets it whole */
    return (nranks - 1) * k;
  return -1.0;
}

/*
 * Rank 0's progress through an epoch, on stderr.  On a terminal, or through
 * hoop-run to one (HOOP_STDERR_TTY=1), a bar that each update overwrites
 * and the epoch's end blanks, so that only the epoch lines stay.  In a log
 * a line every `every_s` seconds, which short epochs never reach.
 */
enum { BAR_REFRESH_MS = 100, BAR_WIDTH = 30 };

struct progress {
  enum { PROGRESS_NONE, PROGRESS_BAR, PROGRESS_LINES } mode;
  double every_s; /* between lines */
  double last_s;  /* when last drawn or printed */
  int drawn;      /* characters of bar on the terminal's line */
};

static struct progress progress_init(const struct options *o, int rank) {
  struct progress p = {.mode = PROGRESS_NONE, .every_s = o->progress_every};
  const char *hint = getenv("HOOP_STDERR_TTY");
  if (rank != 0 || o->quiet)
    return p;
  p.mode = isatty(STDERR_FILENO) || (hint != NULL && strcmp(hint, "1") == 0)
               ? PROGRESS_BAR : PROGRESS_LINES;
  return p;
}

/* A bar shows at the epoch's first step; a log waits its interval. */
static void progress_start(struct progress *p) {
  p->last_s = p->mode == PROGRESS_BAR ? -1e9 : now_s();
}

static void progress_step(struct progress *p, int epoch, int epochs,
                          long step, long steps, double loss) {
  if (p->mode == PROGRESS_NONE)
    return;
  double now = now_s(), since = now - p->last_s;
  int pct = (int)(100 * step / steps);
  if (p->mode == PROGRESS_LINES && since >= p->every_s) {
    fprintf(stderr, "epoch %d/%d: step %ld/%ld (%d%%), loss %.4f\n", epoch,
            epochs, step, steps, pct, loss);
  } else if (p->mode == PROGRESS_BAR && since * 1000 >= BAR_REFRESH_MS) {
    int done = (int)(BAR_WIDTH * step / steps);
    char bar[BAR_WIDTH + 1];
    for (int i = 0; i < BAR_WIDTH; i++)
      bar[i] = i < done ? '=' : (i == done ? '>' : ' ');
    bar[BAR_WIDTH] = '\0';
    /* The carriage return after the text, not before it: hoop-run shows
     * an update once its end has come. */
    p->drawn = fprintf(stderr, "epoch %d/%d [%s] %3d%% loss %.4f", epoch,
                       epochs, bar, pct, loss);
    fputc('\r', stderr);
  } else {
    return;
  }
  fflush(stderr);
  p->last_s = now;
}

/* Blanks the bar, before the epoch's line or an error. */
static void progress_clear(struct progress *p) {
  if (p->drawn <= 0)
    return;
  fprintf(stderr, "%*s\r", p->drawn, "");
  fflush(stderr);
  p->drawn = 0;
}

static FILE *open_metrics(const struct options *o) {
  const char *path = o->metrics;
  if (path == NULL)
    return NULL;
  struct stat st;
  int fresh = !o->resume || stat(path, &st) != 0 || st.st_size == 0;
  FILE *f = fopen(path, fresh ? "w" : "a");
  if (f == NULL) {
    fprintf(stderr, "hoop-train: cannot write metrics to %s: %s\n", path,
            strerror(errno));
    return NULL;
  }
  if (fresh)
    fprintf(f, "epoch,loss,train_acc,test_acc,seconds,samples_per_s,"
               "compute_s,wait_s,comm_s,algo,bytes_sent_per_step,"
               "model_bytes_per_step,late_s,step_comm_median_us,"
               "step_moving_median_us,step_last_in_median_us\n");
  return f;
}

static void write_metrics(FILE *f, const struct epoch_report *r) {
  fprintf(f,
          "%d,%.6f,%.6f,%.6f,%.4f,%.1f,%.4f,%.4f,%.4f,%s,%.0f,%.0f,%.4f,"
          "%.1f,%.1f,%.1f\n",
          r->epoch, r->loss, r->train_acc, r->test_acc, r->seconds,
          r->samples_per_s, r->compute_s, r->wait_s, r->comm_s,
          hoop_algo_name(r->algo), r->bytes_sent_per_step,
          r->model_bytes_per_step, r->late_s, r->step_comm_us,
          r->step_moving_us, r->step_last_in_us);
  fflush(f);
}

/* The plotting script sits beside the binary, installed or in the build. */
static int plot(const char *csv, const char *png) {
  char exe[PATH_MAX], script[PATH_MAX + 32];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n < 0)
    return -1;
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  *slash = '\0';
  snprintf(script, sizeof script, "%s/hoop-plot-metrics", exe);
  /* Debian's interpreter first: python3-matplotlib installs for it, while
   * a python3 earlier on PATH (a virtualenv, pyenv) may lack it. */
  const char *python = access("/usr/bin/python3", X_OK) == 0
                           ? "/usr/bin/python3" : "python3";
  char *argv[] = {(char *)python, script, (char *)csv, (char *)png, NULL};
  pid_t pid;
  int err = posix_spawnp(&pid, python, NULL, NULL, argv, environ);
  if (err != 0) {
    fprintf(stderr, "hoop-train: --plot needs python3: %s\n", strerror(err));
    return -1;
  }
  int status;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "hoop-train: %s failed; metrics are in %s\n", script,
            csv);
    return -1;
  }
  return 0;
}

static int allreduce_sums(hoop_comm_t comm, double *v, size_t n) {
  return hoop_allreduce(comm, v, v, n, HOOP_F64, HOOP_SUM, NULL) ==
                 HOOP_SUCCESS ? 0 : -1;
}

static int train(const struct options *o, hoop_comm_t comm, int rank,
                 int nranks) {
  char err[1024];
  dataset_t train_set, test_set;
  if (dataset_load(o->data, "train", o->train_limit, &train_set, err,
                   sizeof err) != 0) {
    fprintf(stderr, "hoop-train: rank %d: %s\n", rank, err);
    return 1;
  }
  if (dataset_load(o->data, "t10k", o->test_limit, &test_set, err,
                   sizeof err) != 0) {
    fprintf(stderr, "hoop-train: rank %d: %s\n", rank, err);
    dataset_free(&train_set);
    return 1;
  }
  if (test_set.rows != train_set.rows || test_set.cols != train_set.cols) {
    fprintf(stderr, "hoop-train: rank %d: the test images in %s are %dx%d, "
            "the training images %dx%d\n", rank, o->data, test_set.rows,
            test_set.cols, train_set.rows, train_set.cols);
    dataset_free(&test_set);
    dataset_free(&train_set);
    return 1;
  }
  trainer_config_t cfg = {.batch = o->batch, .optim = o->optim, .lr = o->lr,
                          .momentum = o->momentum,
                          .weight_decay = o->weight_decay,
                          .bucket_bytes = o->bucket_bytes, .seed = o->seed,
                          .cuda = o->cuda};
  cfg.model = (model_spec_t){.kind = o->model, .height = train_set.rows,
                             .width = train_set.cols,
                             .classes = train_set.classes};
  parse_hidden(o->hidden != NULL ? o->hidden : DEFAULT_HIDDEN, &cfg.model);
  int rc = 1;
  trainer_t t;
  size_t *order = NULL;
  FILE *metrics = NULL;
  if (trainer_init(&t, comm, &cfg, err, sizeof err) != 0) {
    fprintf(stderr, "hoop-train: rank %d: %s\n", rank, err);
    goto out_data;
  }
  int start_epoch = 0;
  if (o->resume) {
    /* Rank 0 alone reads the file; its verdict travels with the state so
     * that a bad checkpoint stops every rank, not only rank 0. */
    double verdict[2] = {1.0, 0.0};
    if (rank == 0) {
      int done = 0;
      if (ckpt_load(o->checkpoint, &t.model, &t.opt, &done, o->seed, err,
                    sizeof err) != 0) {
        fprintf(stderr, "hoop-train: %s\n", err);
        verdict[0] = 0.0;
      }
      verdict[1] = done;
    }
    if (hoop_broadcast(comm, verdict, verdict, 2, HOOP_F64, 0, NULL) !=
        HOOP_SUCCESS) {
      fprintf(stderr, "hoop-train: rank %d: %s\n", rank,
              hoop_comm_last_error(comm));
      goto out_trainer;
    }
    if (verdict[0] == 0.0) {
      if (rank != 0)
        fprintf(stderr, "hoop-train: rank %d: rank 0 could not load the "
                "checkpoint %s\n", rank, o->checkpoint);
      goto out_trainer;
    }
    if (trainer_share_state(&t, err, sizeof err) != 0) {
      fprintf(stderr, "hoop-train: rank %d: %s\n", rank, err);
      goto out_trainer;
    }
    start_epoch = (int)verdict[1];
  }
  if (rank == 0) {
    metrics = open_metrics(o);
    if (o->metrics != NULL && metrics == NULL)
      goto out_trainer;
    char shape[MODEL_DESCRIBE_MAX];
    model_describe(&cfg.model, shape, sizeof shape);
    printf("hoop-train: %d rank%s, %s", nranks, nranks > 1 ? "s" : "", shape);
    printf(" (%zu parameters, %zu gradient bytes) on %s, %s lr %g, batch %d "
           "per rank x %d accumulation step%s, %zu train / %zu test "
           "samples\n",
           t.model.nparams, t.model.nparams * sizeof(float),
           o->cuda ? "cuda" : "cpu", optim_name(o->optim), (double)o->lr,
           o->batch, o->accum_steps, o->accum_steps > 1 ? "s" : "",
           train_set.n, test_set.n);
    printf("hoop-train: gradient buckets (bytes, in reduction order):");
    for (int i = 0; i < ddp_nbuckets(t.ddp); i++)
      printf(" %zu", ddp_bucket_bytes(t.ddp, i));
    printf("\n");
    if (start_epoch > 0)
      printf("hoop-train: resumed from %s after epoch %d\n", o->checkpoint,
             start_epoch);
    fflush(stdout);
  }
  struct progress prog = progress_init(o, rank);
  for (int epoch = start_epoch; epoch < o->epochs; epoch++) {
    size_t count;
    order = dataset_shard(train_set.n, o->seed, epoch, rank, nranks, &count);
    if (order == NULL) {
      fprintf(stderr, "hoop-train: rank %d: out of memory\n", rank);
      goto out_order;
    }
    long steps = (long)((count + (size_t)o->batch - 1) / (size_t)o->batch);
    ddp_counts_t before = ddp_allreduce_counts(comm, o->algo);
    double comm0 = ddp_comm_seconds(t.ddp), wait0 = t.wait_s;
    double loss_sum = 0.0, t0 = now_s();
    long correct = 0;
    progress_start(&prog);
    for (long s = 0; s < steps; s++) {
      long group = s / o->accum_steps;
      long group_end = (group + 1) * o->accum_steps;
      long group_len = (group_end < steps ? group_end : steps) -
                       group * o->accum_steps;
      size_t first = (size_t)s * (size_t)o->batch;
      int batch = (int)(count - first < (size_t)o->batch ? count - first
                                                          : (size_t)o->batch);
      float scale = 1.0f / ((float)batch * (float)group_len);
      int sync = s + 1 == group_end || s + 1 == steps;
      if (trainer_step(&t, &train_set, order + first, batch, scale, sync,
                       &loss_sum, &correct, err, sizeof err) != 0) {
        progress_clear(&prog);
        fprintf(stderr, "hoop-train: rank %d: epoch %d step %ld: %s\n",
                rank, epoch + 1, s + 1, err);
        goto out_order;
      }
      progress_step(&prog, epoch + 1, o->epochs, s + 1, steps,
                    loss_sum / (double)(first + (size_t)batch));
    }
    progress_clear(&prog);
    if (trainer_sync(&t, err, sizeof err) != 0) {
      fprintf(stderr, "hoop-train: rank %d: epoch %d: %s\n", rank,
              epoch + 1, err);
      goto out_order;
    }
    double seconds = now_s() - t0;
    ddp_counts_t after = ddp_allreduce_counts(comm, o->algo);
    /* After the counters are read: combining the ranks' step times is
     * itself an all-reduce, which the gradients' traffic leaves out. */
    ddp_step_times_t steps_med;
    if (ddp_step_medians(t.ddp, &steps_med, err, sizeof err) != 0) {
      fprintf(stderr, "hoop-train: rank %d: epoch %d: %s\n", rank,
              epoch + 1, err);
      goto out_order;
    }
    long syncs = (steps + o->accum_steps - 1) / o->accum_steps;

    double sums[3] = {loss_sum, (double)correct, (double)count};
    long test_right, test_total;
    if (allreduce_sums(comm, sums, 3) != 0) {
      fprintf(stderr, "hoop-train: rank %d: epoch %d: %s\n", rank,
              epoch + 1, hoop_comm_last_error(comm));
      goto out_order;
    }
    if (trainer_evaluate(&t, &test_set, &test_right, &test_total, err,
                         sizeof err) != 0) {
      fprintf(stderr, "hoop-train: rank %d: epoch %d: %s\n", rank,
              epoch + 1, err);
      goto out_order;
    }
    free(order);
    order = NULL;
    if (rank != 0)
      continue;
    double grad_bytes = (double)t.model.nparams * sizeof(float);
    struct epoch_report r = {
        .epoch = epoch + 1, .loss = sums[0] / sums[2],
        .train_acc = sums[1] / sums[2],
        .test_acc = (double)test_right / (double)test_total,
        .seconds = seconds, .samples_per_s = sums[2] / seconds,
        /* On the GPU the communication thread only queues the calls. */
        .comm_s = o->cuda ? after.seconds - before.seconds
                          : ddp_comm_seconds(t.ddp) - comm0,
        .wait_s = t.wait_s - wait0,
        .late_s = after.late_s - before.late_s,
        .step_comm_us = steps_med.comm_s * 1e6,
        .step_moving_us = steps_med.moving_s * 1e6,
        .step_last_in_us = steps_med.last_in_s * 1e6,
        .bytes_sent_per_step =
            (double)(after.sent - before.sent) / (double)syncs,
        .model_bytes_per_step = model_bytes(after.busiest, nranks,
                                            grad_bytes),
        .algo = after.calls > before.calls ? after.busiest : o->algo};
    r.compute_s = seconds - r.wait_s;
    /* One line a person reads at a glance; the timings behind it, the
     * median steps and the bytes sent go to --metrics. */
    char waited[64] = "";
    if (nranks > 1)
      snprintf(waited, sizeof waited, " (%.2f s waiting on all-reduce)",
               r.wait_s);
    printf("epoch %d/%d: loss %.4f, accuracy train %.4f test %.4f, %.0f "
           "samples/s, %.1f s%s\n",
           r.epoch, o->epochs, r.loss, r.train_acc, r.test_acc,
           r.samples_per_s, r.seconds, waited);
    fflush(stdout);
    if (metrics != NULL)
      write_metrics(metrics, &r);
    if (o->checkpoint != NULL &&
        (trainer_pull_state(&t, err, sizeof err) != 0 ||
         ckpt_save(o->checkpoint, &t.model, &t.opt, epoch + 1, o->seed, err,
                   sizeof err) != 0)) {
      fprintf(stderr, "hoop-train: %s\n", err);
      goto out_order;
    }
  }
  rc = 0;
out_order:
  free(order);
out_trainer:
  if (metrics != NULL)
    fclose(metrics);
  trainer_free(&t);
out_data:
  dataset_free(&test_set);
  dataset_free(&train_set);
  return rc;
}

int main(int argc, char **argv) {
  struct options o;
  int rc = parse_args(argc, argv, &o);
  if (rc != 0)
    return rc;
  openblas_set_num_threads(o.threads);

  hoop_comm_t comm;
  hoop_result_t res = join(&comm);
  if (res != HOOP_SUCCESS) {
    fprintf(stderr, "hoop-train: joining the other ranks failed: %s: %s\n",
            hoop_result_name(res), hoop_last_error());
    return 1;
  }
  int rank, nranks;
  hoop_comm_rank(comm, &rank);
  hoop_comm_size(comm, &nranks);
  if (o.algo != HOOP_ALGO_AUTO)
    hoop_comm_set_algo(comm, o.algo);
  rc = train(&o, comm, rank, nranks);
  if (rc != 0) {
    hoop_comm_abort(comm);
    return rc;
  }
  hoop_comm_destroy(comm);
  if (rank == 0 && o.plot != NULL)
    return plot(o.metrics, o.plot) == 0 ? 0 : 1;
  return 0;
}
