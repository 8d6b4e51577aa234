/*
 * hoop-train: data-parallel training of an MLP or a small CNN on an IDX
 * image set (Fashion-MNIST by default), gradients averaged by hoop.
 * Started alone it trains as one rank; under hoop-run, mpirun, srun or torchrun it joins the
 * other ranks through hoop_comm_init_env.
 */
#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "dataset.h"
#include "elastic.h"
#include "hoop.h"
#include "options.h"
#include "trainer.h"

extern char **environ;

/* A lost rank's replacement (hoop-run --respawn sets it): it joins the
   running job instead of starting one. */
static int joining(void) {
  const char *join = getenv("HOOP_JOIN");
  return join != NULL && strcmp(join, "1") == 0;
}

/* Started by a launcher, or alone as the only rank. */
static hoop_result_t join(hoop_comm_t *comm) {
  static const char *launcher_vars[] = {"HOOP_RANK", "RANK",
                                        "OMPI_COMM_WORLD_RANK",
                                        "SLURM_PROCID"};
  if (joining())
    return hoop_comm_join(comm, NULL);
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
  /* At the epoch's end; lost and let in during it (--elastic). */
  int ranks, ranks_left, ranks_joined;
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

/*
 * Appends to the file when resuming, or for a rank that became rank 0
 * when the first one was lost (--elastic).
 */
static FILE *open_metrics(const struct options *o, int append) {
  const char *path = o->metrics;
  if (path == NULL)
    return NULL;
  struct stat st;
  int fresh = !(o->resume || append) || stat(path, &st) != 0 ||
              st.st_size == 0;
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
               "step_moving_median_us,step_last_in_median_us,ranks,"
               "ranks_left,ranks_joined\n");
  return f;
}

static void write_metrics(FILE *f, const struct epoch_report *r) {
  fprintf(f,
          "%d,%.6f,%.6f,%.6f,%.4f,%.1f,%.4f,%.4f,%.4f,%s,%.0f,%.0f,%.4f,"
          "%.1f,%.1f,%.1f,%d,%d,%d\n",
          r->epoch, r->loss, r->train_acc, r->test_acc, r->seconds,
          r->samples_per_s, r->compute_s, r->wait_s, r->comm_s,
          hoop_algo_name(r->algo), r->bytes_sent_per_step,
          r->model_bytes_per_step, r->late_s, r->step_comm_us,
          r->step_moving_us, r->step_last_in_us, r->ranks, r->ranks_left,
          r->ranks_joined);
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

/* What the set-up and the epochs of one run share. */
struct run {
  const struct options *o;
  hoop_comm_t comm;
  int rank, nranks;
  dataset_t train_set, test_set;
  trainer_t t;
  struct progress prog;
  FILE *metrics; /* rank 0's --metrics, else NULL */
  elastic_t el;  /* --elastic: the ranks left of the launched ones */
};

/*
 * Loads both image sets, or says why not and leaves nothing loaded.  `who`
 * names this process in the message ("rank 2", or a replacement's).
 */
static int load_data(struct run *run, const char *who) {
  const struct options *o = run->o;
  char err[1024];
  if (dataset_load(o->data, "train", o->train_limit, &run->train_set, err,
                   sizeof err) != 0) {
    fprintf(stderr, "hoop-train: %s: %s\n", who, err);
    return -1;
  }
  if (dataset_load(o->data, "t10k", o->test_limit, &run->test_set, err,
                   sizeof err) != 0) {
    fprintf(stderr, "hoop-train: %s: %s\n", who, err);
    dataset_free(&run->train_set);
    return -1;
  }
  const dataset_t *train = &run->train_set, *test = &run->test_set;
  if (test->rows != train->rows || test->cols != train->cols) {
    fprintf(stderr, "hoop-train: %s: the test images in %s are %dx%d, "
            "the training images %dx%d\n", who, o->data, test->rows,
            test->cols, train->rows, train->cols);
    dataset_free(&run->test_set);
    dataset_free(&run->train_set);
    return -1;
  }
  return 0;
}

/* Rank 0 loads --checkpoint and shares its state with every rank;
 * *start_epoch gets the epochs it had done. */
static int resume(struct run *run, int *start_epoch) {
  const struct options *o = run->o;
  char err[1024];
  /* Rank 0 alone reads the file; its verdict travels with the state so
   * that a bad checkpoint stops every rank, not only rank 0. */
  double verdict[2] = {1.0, 0.0};
  if (run->rank == 0) {
    int done = 0;
    if (ckpt_load(o->checkpoint, &run->t.model, &run->t.opt, &done, o->seed,
                  err, sizeof err) != 0) {
      fprintf(stderr, "hoop-train: %s\n", err);
      verdict[0] = 0.0;
    }
    verdict[1] = done;
  }
  if (hoop_broadcast(run->comm, verdict, verdict, 2, HOOP_F64, 0, NULL) !=
      HOOP_SUCCESS) {
    fprintf(stderr, "hoop-train: rank %d: %s\n", run->rank,
            hoop_comm_last_error(run->comm));
    return -1;
  }
  if (verdict[0] == 0.0) {
    if (run->rank != 0)
      fprintf(stderr, "hoop-train: rank %d: rank 0 could not load the "
              "checkpoint %s\n", run->rank, o->checkpoint);
    return -1;
  }
  if (trainer_share_state(&run->t, err, sizeof err) != 0) {
    fprintf(stderr, "hoop-train: rank %d: %s\n", run->rank, err);
    return -1;
  }
  *start_epoch = (int)verdict[1];
  return 0;
}

/* Rank 0's opening lines: the job, the model and its gradient buckets. */
static void print_start(const struct run *run, const model_spec_t *spec,
                        int start_epoch) {
  const struct options *o = run->o;
  const trainer_t *t = &run->t;
  char shape[MODEL_DESCRIBE_MAX];
  model_describe(spec, shape, sizeof shape);
  printf("hoop-train: %d rank%s, %s", run->nranks, run->nranks > 1 ? "s" : "",
         shape);
  printf(" (%zu parameters, %zu gradient bytes) on %s, %s lr %g, batch %d "
         "per rank x %d accumulation step%s, %zu train / %zu test "
         "samples\n",
         t->model.nparams, t->model.nparams * sizeof(float),
         o->cuda ? "cuda" : "cpu", optim_name(o->optim), (double)o->lr,
         o->batch, o->accum_steps, o->accum_steps > 1 ? "s" : "",
         run->train_set.n, run->test_set.n);
  printf("hoop-train: gradient buckets (bytes, in reduction order):");
  for (int i = 0; i < ddp_nbuckets(t->ddp); i++)
    printf(" %zu", ddp_bucket_bytes(t->ddp, i));
  printf("\n");
  if (start_epoch > 0)
    printf("hoop-train: resumed from %s after epoch %d\n", o->checkpoint,
           start_epoch);
  fflush(stdout);
}

/* The steps of one epoch over this rank's shard order[0..count), each
 * accum_steps-th (and the last) updating the model; adds up the loss and
 * the samples classified right. */
static int train_steps(struct run *run, int epoch, const size_t *order,
                       size_t count, long steps, double *loss_sum,
                       long *correct) {
  const struct options *o = run->o;
  char err[1024];
  progress_start(&run->prog);
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
    if (trainer_step(&run->t, &run->train_set, order + first, batch, scale,
                     sync, loss_sum, correct, err, sizeof err) != 0) {
      progress_clear(&run->prog);
      fprintf(stderr, "hoop-train: rank %d: epoch %d step %ld: %s\n",
              run->rank, epoch + 1, s + 1, err);
      return -1;
    }
    progress_step(&run->prog, epoch + 1, o->epochs, s + 1, steps,
                  *loss_sum / (double)(first + (size_t)batch));
  }
  progress_clear(&run->prog);
  if (trainer_sync(&run->t, err, sizeof err) != 0) {
    fprintf(stderr, "hoop-train: rank %d: epoch %d: %s\n", run->rank,
            epoch + 1, err);
    return -1;
  }
  return 0;
}

/* Trains epoch (from 0) on every rank and evaluates the model; on rank 0,
 * also fills r with the figures summed over the ranks. */
static int run_epoch(struct run *run, int epoch, struct epoch_report *r) {
  const struct options *o = run->o;
  hoop_comm_t comm = run->comm;
  char err[1024];
  size_t count;
  size_t *order = dataset_shard(run->train_set.n, o->seed, epoch, run->rank,
                                run->nranks, &count);
  if (order == NULL) {
    fprintf(stderr, "hoop-train: rank %d: out of memory\n", run->rank);
    return -1;
  }
  long steps = (long)((count + (size_t)o->batch - 1) / (size_t)o->batch);
  ddp_counts_t before = ddp_allreduce_counts(comm, o->algo);
  double comm0 = ddp_comm_seconds(run->t.ddp), wait0 = run->t.wait_s;
  double loss_sum = 0.0, t0 = now_s();
  long correct = 0;
  int rc = train_steps(run, epoch, order, count, steps, &loss_sum, &correct);
  free(order);
  if (rc != 0)
    return -1;
  double seconds = now_s() - t0;
  ddp_counts_t after = ddp_allreduce_counts(comm, o->algo);
  /* After the counters are read: combining the ranks' step times is
   * itself an all-reduce, which the gradients' traffic leaves out. */
  ddp_step_times_t steps_med;
  if (ddp_step_medians(run->t.ddp, &steps_med, err, sizeof err) != 0) {
    fprintf(stderr, "hoop-train: rank %d: epoch %d: %s\n", run->rank,
            epoch + 1, err);
    return -1;
  }
  long syncs = (steps + o->accum_steps - 1) / o->accum_steps;

  double sums[3] = {loss_sum, (double)correct, (double)count};
  long test_right, test_total;
  if (allreduce_sums(comm, sums, 3) != 0) {
    fprintf(stderr, "hoop-train: rank %d: epoch %d: %s\n", run->rank,
            epoch + 1, hoop_comm_last_error(comm));
    return -1;
  }
  if (trainer_evaluate(&run->t, &run->test_set, &test_right, &test_total,
                       err, sizeof err) != 0) {
    fprintf(stderr, "hoop-train: rank %d: epoch %d: %s\n", run->rank,
            epoch + 1, err);
    return -1;
  }
  if (run->rank != 0)
    return 0;
  double grad_bytes = (double)run->t.model.nparams * sizeof(float);
  *r = (struct epoch_report){
      .epoch = epoch + 1, .loss = sums[0] / sums[2],
      .train_acc = sums[1] / sums[2],
      .test_acc = (double)test_right / (double)test_total,
      .seconds = seconds, .samples_per_s = sums[2] / seconds,
      /* On the GPU the communication thread only queues the calls. */
      .comm_s = o->cuda ? after.seconds - before.seconds
                        : ddp_comm_seconds(run->t.ddp) - comm0,
      .wait_s = run->t.wait_s - wait0,
      .late_s = after.late_s - before.late_s,
      .step_comm_us = steps_med.comm_s * 1e6,
      .step_moving_us = steps_med.moving_s * 1e6,
      .step_last_in_us = steps_med.last_in_s * 1e6,
      .bytes_sent_per_step =
          (double)(after.sent - before.sent) / (double)syncs,
      .model_bytes_per_step = model_bytes(after.busiest, run->nranks,
                                          grad_bytes),
      .algo = after.calls > before.calls ? after.busiest : o->algo,
      .ranks = run->nranks};
  r->compute_s = seconds - r->wait_s;
  return 0;
}

/*
 * run_epoch's --elastic form: the samples split step by step among the
 * ranks left (elastic.h), and the epoch's figures and the evaluation
 * redone after a loss.  Reports the loss, accuracies, time, the ranks at
 * the end and those lost; the timings of the gradient all-reduces, whose
 * combining is itself a collective to redo, are not measured.
 */
static int run_elastic_epoch(struct run *run, int epoch,
                             struct epoch_report *r) {
  const struct options *o = run->o;
  char err[1024];
  double loss_sum = 0.0, t0 = now_s();
  long correct = 0, test_right = 0, test_total = 0;
  size_t samples = 0;
  if (elastic_train_epoch(&run->el, &run->train_set, epoch, o->seed,
                          &loss_sum, &correct, &samples, err,
                          sizeof err) != 0) {
    fprintf(stderr, "hoop-train: rank %d: epoch %d: %s\n", run->rank,
            epoch + 1, err);
    return -1;
  }
  double seconds = now_s() - t0, sums[3];
  for (;;) {
    sums[0] = loss_sum;
    sums[1] = (double)correct;
    sums[2] = (double)samples;
    if (allreduce_sums(run->t.comm, sums, 3) != 0)
      snprintf(err, sizeof err, "all-reduce of the epoch's figures: %s",
               hoop_comm_last_error(run->t.comm));
    else if (trainer_evaluate(&run->t, &run->test_set, &test_right,
                              &test_total, err, sizeof err) == 0)
      break;
    if (elastic_recover(&run->el, err, sizeof err) != 0) {
      fprintf(stderr, "hoop-train: rank %d: epoch %d: %s\n", run->rank,
              epoch + 1, err);
      return -1;
    }
  }
  run->comm = run->t.comm;
  run->rank = run->t.rank;
  run->nranks = run->t.nranks;
  int left, joined;
  elastic_take_changes(&run->el, &left, &joined);
  if (run->rank != 0)
    return 0;
  /* The log says how long each recovery took; the CSV's timing columns
     stay 0, not measured. */
  *r = (struct epoch_report){
      .epoch = epoch + 1, .loss = sums[0] / sums[2],
      .train_acc = sums[1] / sums[2],
      .test_acc = (double)test_right / (double)test_total,
      .seconds = seconds, .samples_per_s = sums[2] / seconds,
      .algo = o->algo, .ranks = run->nranks, .ranks_left = left,
      .ranks_joined = joined};
  return 0;
}

/* Rank 0, after an epoch: its line, its --metrics row, the checkpoint. */
static int finish_epoch(struct run *run, const struct epoch_report *r) {
  const struct options *o = run->o;
  char err[1024];
  /* One line a person reads at a glance; the timings behind it, the
   * median steps and the bytes sent go to --metrics. */
  char waited[64] = "";
  if (run->nranks > 1 && !o->elastic)
    snprintf(waited, sizeof waited, " (%.2f s waiting on all-reduce)",
             r->wait_s);
  printf("epoch %d/%d: loss %.4f, accuracy train %.4f test %.4f, %.0f "
         "samples/s, %.1f s%s\n",
         r->epoch, o->epochs, r->loss, r->train_acc, r->test_acc,
         r->samples_per_s, r->seconds, waited);
  fflush(stdout);
  if (run->metrics == NULL && o->metrics != NULL) {
    run->metrics = open_metrics(o, 1);
    if (run->metrics == NULL)
      return -1;
  }
  if (run->metrics != NULL)
    write_metrics(run->metrics, r);
  if (o->checkpoint != NULL &&
      (trainer_pull_state(&run->t, err, sizeof err) != 0 ||
       ckpt_save(o->checkpoint, &run->t.model, &run->t.opt, r->epoch,
                 o->seed, err, sizeof err) != 0)) {
    fprintf(stderr, "hoop-train: %s\n", err);
    return -1;
  }
  return 0;
}

/*
 * *comm is the communicator the run ends on (--elastic shrinks it).
 * `loaded` holds the options and the loaded data sets, which are freed
 * here.
 */
static int train(const struct run *loaded, hoop_comm_t *comm, int rank,
                 int nranks) {
  struct run run = *loaded;
  const struct options *o = run.o;
  run.comm = *comm;
  run.rank = rank;
  run.nranks = nranks;
  trainer_config_t cfg = {.batch = o->batch, .optim = o->optim, .lr = o->lr,
                          .momentum = o->momentum,
                          .weight_decay = o->weight_decay,
                          .bucket_bytes = o->bucket_bytes, .seed = o->seed,
                          .cuda = o->cuda, .local_init = o->elastic};
  cfg.model = (model_spec_t){.kind = o->model, .height = run.train_set.rows,
                             .width = run.train_set.cols,
                             .classes = run.train_set.classes};
  parse_hidden(o->hidden != NULL ? o->hidden : DEFAULT_HIDDEN, &cfg.model);
  int rc = 1;
  char err[1024];
  if (trainer_init(&run.t, *comm, &cfg, err, sizeof err) != 0) {
    fprintf(stderr, "hoop-train: rank %d: %s\n", rank, err);
    goto out_data;
  }
  if (o->elastic && elastic_init(&run.el, &run.t) != 0) {
    fprintf(stderr, "hoop-train: rank %d: out of memory\n", rank);
    goto out_trainer;
  }
  int start_epoch = 0;
  if (joining()) {
    if (elastic_join(&run.el, &start_epoch, err, sizeof err) != 0) {
      fprintf(stderr, "hoop-train: rank %d: joining: %s\n", rank, err);
      goto out_trainer;
    }
  } else if (o->resume && resume(&run, &start_epoch) != 0) {
    goto out_trainer;
  }
  if (rank == 0) {
    run.metrics = open_metrics(o, 0);
    if (o->metrics != NULL && run.metrics == NULL)
      goto out_trainer;
    print_start(&run, &cfg.model, start_epoch);
  }
  run.prog = progress_init(o, rank);
  for (int epoch = start_epoch; epoch < o->epochs; epoch++) {
    struct epoch_report r = {0}; /* filled on rank 0 only */
    if ((o->elastic ? run_elastic_epoch(&run, epoch, &r)
                    : run_epoch(&run, epoch, &r)) != 0 ||
        (run.rank == 0 && finish_epoch(&run, &r) != 0))
      goto out_trainer;
  }
  rc = 0;
out_trainer:
  if (run.metrics != NULL)
    fclose(run.metrics);
  *comm = run.t.comm != NULL ? run.t.comm : *comm;
  elastic_free(&run.el);
  trainer_free(&run.t);
out_data:
  dataset_free(&run.test_set);
  dataset_free(&run.train_set);
  return rc;
}

int main(int argc, char **argv) {
  struct options o;
  int rc = parse_args(argc, argv, &o);
  if (rc != 0)
    return rc;
  openblas_set_num_threads(o.threads);

  /* --elastic ranks also form without one lost before they all met. */
  if (o.elastic)
    setenv("HOOP_ELASTIC", "1", 0);
  /*
   * A replacement loads its data before it joins: from its admission on,
   * the members wait for it to take their state.  The others load theirs
   * once they have met.
   */
  struct run run = {.o = &o};
  if (joining() && load_data(&run, "the replacement") != 0)
    return 1;
  hoop_comm_t comm;
  hoop_result_t res = join(&comm);
  if (res != HOOP_SUCCESS) {
    fprintf(stderr, "hoop-train: joining the other ranks failed: %s: %s\n",
            hoop_result_name(res), hoop_last_error());
    dataset_free(&run.test_set);
    dataset_free(&run.train_set);
    return 1;
  }
  int rank, nranks;
  hoop_comm_rank(comm, &rank);
  hoop_comm_size(comm, &nranks);
  char who[32];
  snprintf(who, sizeof who, "rank %d", rank);
  if (!joining() && load_data(&run, who) != 0) {
    hoop_comm_abort(comm);
    return 1;
  }
  if (o.algo != HOOP_ALGO_AUTO)
    hoop_comm_set_algo(comm, o.algo);
  rc = train(&run, &comm, rank, nranks);
  if (rc != 0) {
    hoop_comm_abort(comm);
    return rc;
  }
  hoop_comm_rank(comm, &rank);
  hoop_comm_destroy(comm);
  if (rank == 0 && o.plot != NULL)
    return plot(o.metrics, o.plot) == 0 ? 0 : 1;
  return 0;
}
