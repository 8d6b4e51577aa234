/*
 * A labelled image set in memory: the four IDX files of MNIST or
 * Fashion-MNIST, pixels scaled to floats, plus the per-epoch sample order
 * that every rank derives on its own.
 */
#ifndef HOOP_TRAIN_DATASET_H
#define HOOP_TRAIN_DATASET_H

#include <stddef.h>
#include <stdint.h>

typedef struct dataset {
  size_t n;          /* samples */
  size_t features;   /* pixels per sample: rows x cols */
  int rows, cols;
  float *x;          /* n x features, normalised */
  uint8_t *y;        /* n labels, each < classes */
  int classes;
} dataset_t;

/* Pixel normalisation used by the trainer and its PyTorch peer alike. */
#define DATASET_MEAN 0.2860f
#define DATASET_STD 0.3530f
#define DATASET_CLASSES 10

/*
 * Loads `prefix`-images-idx3-ubyte[.gz] and `prefix`-labels-idx1-ubyte[.gz]
 * from dir (prefix "train" or "t10k"), keeping the first `limit` samples
 * when limit > 0.  Returns 0, or -1 with the reason in err.
 */
int dataset_load(const char *dir, const char *prefix, size_t limit,
                 dataset_t *out, char *err, size_t errlen);
void dataset_free(dataset_t *d);

/* The permutation of 0..n-1 that (seed, epoch) draws, in a new array. */
size_t *dataset_permutation(size_t n, uint64_t seed, int epoch);

/*
 * The indices rank `rank` of `nranks` visits in `epoch`, as PyTorch's
 * DistributedSampler does: one permutation of 0..n-1 seeded by (seed,
 * epoch), padded by wrapping to a multiple of nranks, then every nranks-th
 * index from `rank` on.  Writes *count indices into a new array.
 */
size_t *dataset_shard(size_t n, uint64_t seed, int epoch, int rank,
                      int nranks, size_t *count);

/* The shared generator (xoshiro256**), so every rank draws alike. */
typedef struct rng {
  uint64_t s[4];
} rng_t;

void rng_seed(rng_t *r, uint64_t seed);
uint64_t rng_next(rng_t *r);
/* Uniform in [0, 1). */
double rng_uniform(rng_t *r);

#endif
