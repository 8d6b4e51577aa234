/*
 * hoop-train's command line.  A bad option stops the run before it joins
 * any other rank, with exit status 2 as for getopt_long's own complaints.
 */
#include "options.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_DATA "/usr/share/datasets/fashion-mnist"

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
    "  --algo ring|tree|ps|hier|auto  all-reduce algorithm (default auto)\n"
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
    "  --quiet             no progress bar or lines\n"
    "  --elastic           go on when ranks die or stop: the others shrink\n"
    "                      the job, redo the step and split each epoch's\n"
    "                      samples among those left (CPU, --accum-steps 1)\n");
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

int parse_hidden(const char *text, model_spec_t *spec) {
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

enum {
  O_DATA = 256, O_HIDDEN, O_EPOCHS, O_BATCH, O_ACCUM, O_OPTIM, O_LR,
  O_MOMENTUM, O_WD, O_BUCKET, O_ALGO, O_SEED, O_TRAIN_LIMIT, O_TEST_LIMIT,
  O_THREADS, O_METRICS, O_PLOT, O_CHECKPOINT, O_RESUME, O_QUIET, O_HELP,
  O_DEVICE, O_MODEL, O_PROGRESS_EVERY, O_ELASTIC
};

/* The options that take a whole number.  Returns 0, or 2 after saying
 * what is wrong. */
static int parse_count(int c, const char *arg, struct options *o) {
  long v;
  switch (c) {
  case O_EPOCHS:
    if (parse_long(arg, 1, 100000, &v))
      return die_usage("--epochs wants 1..100000, not \"%s\"", arg);
    o->epochs = (int)v;
    break;
  case O_BATCH:
    if (parse_long(arg, 1, 65536, &v))
      return die_usage("--batch wants 1..65536, not \"%s\"", arg);
    o->batch = (int)v;
    break;
  case O_ACCUM:
    if (parse_long(arg, 1, 100000, &v))
      return die_usage("--accum-steps wants 1..100000, not \"%s\"", arg);
    o->accum_steps = (int)v;
    break;
  case O_BUCKET:
    if (parse_long(arg, 1, 1 << 20, &v))
      return die_usage("--bucket-kb wants 1..1048576, not \"%s\"", arg);
    o->bucket_bytes = (size_t)v << 10;
    break;
  case O_SEED:
    if (parse_long(arg, 0, LONG_MAX, &v))
      return die_usage("--seed wants a number >= 0, not \"%s\"", arg);
    o->seed = (uint64_t)v;
    break;
  case O_TRAIN_LIMIT:
  case O_TEST_LIMIT:
    if (parse_long(arg, 1, LONG_MAX, &v))
      return die_usage("%s wants a positive count, not \"%s\"",
                       c == O_TRAIN_LIMIT ? "--train-limit" : "--test-limit",
                       arg);
    *(c == O_TRAIN_LIMIT ? &o->train_limit : &o->test_limit) = (size_t)v;
    break;
  case O_THREADS:
    if (parse_long(arg, 1, 1024, &v))
      return die_usage("--threads wants 1..1024, not \"%s\"", arg);
    o->threads = (int)v;
    break;
  }
  return 0;
}

/* The options that take a real number; as parse_count. */
static int parse_real(int c, const char *arg, struct options *o) {
  switch (c) {
  case O_LR:
    if (parse_float(arg, &o->lr) || o->lr == 0.0f)
      return die_usage("--lr wants a positive number, not \"%s\"", arg);
    o->lr_given = 1;
    break;
  case O_MOMENTUM:
    if (parse_float(arg, &o->momentum) || o->momentum >= 1.0f)
      return die_usage("--momentum wants 0 <= x < 1, not \"%s\"", arg);
    break;
  case O_WD:
    if (parse_float(arg, &o->weight_decay))
      return die_usage("--weight-decay wants x >= 0, not \"%s\"", arg);
    break;
  case O_PROGRESS_EVERY:
    if (parse_float(arg, &o->progress_every) || o->progress_every == 0)
      return die_usage("--progress-every wants a positive number of "
                       "seconds, not \"%s\"", arg);
    break;
  }
  return 0;
}

/* The options that name one of a few choices; as parse_count. */
static int parse_choice(int c, const char *arg, struct options *o) {
  switch (c) {
  case O_OPTIM:
    if (optim_parse(arg) < 0)
      return die_usage("--optim is sgd or adam, not \"%s\"", arg);
    o->optim = (optim_kind_t)optim_parse(arg);
    break;
  case O_ALGO: {
    int found = -1;
    hoop_algo_t choices[] = {HOOP_ALGO_AUTO, HOOP_ALGO_RING, HOOP_ALGO_TREE,
                             HOOP_ALGO_PS, HOOP_ALGO_HIER};
    for (size_t i = 0; i < sizeof choices / sizeof *choices; i++)
      if (strcmp(arg, hoop_algo_name(choices[i])) == 0)
        found = choices[i];
    if (found < 0)
      return die_usage("--algo is ring, tree, ps, hier or auto, not \"%s\"",
                       arg);
    o->algo = (hoop_algo_t)found;
    break;
  }
  case O_DEVICE:
    if (strcmp(arg, "cpu") != 0 && strcmp(arg, "cuda") != 0)
      return die_usage("--device is cpu or cuda, not \"%s\"", arg);
    o->cuda = strcmp(arg, "cuda") == 0;
    break;
  case O_MODEL:
    if (model_kind_parse(arg) < 0)
      return die_usage("--model is mlp or cnn, not \"%s\"", arg);
    o->model = (model_kind_t)model_kind_parse(arg);
    break;
  }
  return 0;
}

/* One option from getopt_long; as parse_count. */
static int parse_option(int c, const char *arg, struct options *o) {
  switch (c) {
  case O_DATA: o->data = arg; return 0;
  case O_HIDDEN: o->hidden = arg; return 0;
  case O_METRICS: o->metrics = arg; return 0;
  case O_PLOT: o->plot = arg; return 0;
  case O_CHECKPOINT: o->checkpoint = arg; return 0;
  case O_RESUME: o->resume = 1; return 0;
  case O_QUIET: o->quiet = 1; return 0;
  case O_ELASTIC: o->elastic = 1; return 0;
  case O_EPOCHS: case O_BATCH: case O_ACCUM: case O_BUCKET: case O_SEED:
  case O_TRAIN_LIMIT: case O_TEST_LIMIT: case O_THREADS:
    return parse_count(c, arg, o);
  case O_LR: case O_MOMENTUM: case O_WD: case O_PROGRESS_EVERY:
    return parse_real(c, arg, o);
  case O_OPTIM: case O_ALGO: case O_DEVICE: case O_MODEL:
    return parse_choice(c, arg, o);
  case 'h':
  case O_HELP: usage(stdout); exit(0);
  default: return 2; /* getopt_long has said what is wrong */
  }
}

/* What no single option can check, and the defaults that hang on others. */
static int finish_args(struct options *o) {
  if (o->resume && o->checkpoint == NULL)
    return die_usage("--resume needs --checkpoint FILE");
  const char *join = getenv("HOOP_JOIN");
  if (join != NULL && strcmp(join, "1") == 0 && !o->elastic)
    return die_usage("HOOP_JOIN=1 (a replacement joining a running job) "
                     "needs --elastic");
  if (o->elastic && (o->cuda || o->accum_steps != 1))
    return die_usage("--elastic trains on the CPU, one update per step "
                     "(not with --device cuda or --accum-steps)");
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

int parse_args(int argc, char **argv, struct options *o) {
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
      {"elastic", 0, 0, O_ELASTIC},
      {"device", 1, 0, O_DEVICE},     {"model", 1, 0, O_MODEL},
      {"progress-every", 1, 0, O_PROGRESS_EVERY},
      {"help", 0, 0, O_HELP},         {0, 0, 0, 0}};
  *o = (struct options){.data = DEFAULT_DATA, .model = MODEL_MLP,
                        .epochs = 10, .batch = 64, .accum_steps = 1,
                        .threads = 1, .optim = OPTIM_ADAM, .momentum = 0.9f,
                        .bucket_bytes = 128 << 10, .algo = HOOP_ALGO_AUTO,
                        .seed = 1, .progress_every = 10.0f};
  int c;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    int rc = parse_option(c, optarg, o);
    if (rc != 0)
      return rc;
  }
  if (optind < argc)
    return die_usage("unexpected argument \"%s\"", argv[optind]);
  return finish_args(o);
}
