/*
 * hoop-train's command line.  The options outlive parsing (every stage of
 * a run reads them), so their struct lives here rather than in options.c.
 */
#ifndef HOOP_TRAIN_OPTIONS_H
#define HOOP_TRAIN_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "hoop.h"
#include "model.h"
#include "optim.h"

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
  int elastic; /* --elastic: go on without lost ranks (elastic.h) */
};

/*
 * Fills o from argv, defaults included.  Returns 0, or the exit status
 * after saying what is wrong; --help prints the usage and exits 0.
 */
int parse_args(int argc, char **argv, struct options *o);

/* The MLP's widths into spec, for --hidden or DEFAULT_HIDDEN; 0, or -1
 * for text that parse_args refuses. */
int parse_hidden(const char *text, model_spec_t *spec);

#endif
