/* Loading an IDX image set and sharding its epochs across ranks. */
#include "dataset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "idx.h"

/* Prefers the file as named, then its .gz form. */
static void find_file(const char *dir, const char *prefix, const char *kind,
                      char *path, size_t len) {
  snprintf(path, len, "%s/%s-%s", dir, prefix, kind);
  if (access(path, F_OK) == 0)
    return;
  char gz[4096];
  snprintf(gz, sizeof gz, "%s.gz", path);
  if (access(gz, F_OK) == 0)
    snprintf(path, len, "%s", gz);
}

int dataset_load(const char *dir, const char *prefix, size_t limit,
                 dataset_t *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  char ipath[4096], lpath[4096];
  find_file(dir, prefix, "images-idx3-ubyte", ipath, sizeof ipath);
  find_file(dir, prefix, "labels-idx1-ubyte", lpath, sizeof lpath);

  idx_array_t images, labels;
  if (idx_read_u8(ipath, 3, &images, err, errlen) != 0)
    return -1;
  if (idx_read_u8(lpath, 1, &labels, err, errlen) != 0) {
    idx_free(&images);
    return -1;
  }
  int rc = -1;
  if (images.dims[0] != labels.dims[0]) {
    snprintf(err, errlen, "%s holds %u images but %s holds %u labels",
             ipath, images.dims[0], lpath, labels.dims[0]);
    goto out_free;
  }
  size_t n = images.dims[0];
  for (size_t i = 0; i < n; i++) {
    if (labels.data[i] >= DATASET_CLASSES) {
      snprintf(err, errlen, "%s: label %zu is %u, not a class 0..%d",
               lpath, i, labels.data[i], DATASET_CLASSES - 1);
      goto out_free;
    }
  }
  if (limit > 0 && limit < n)
    n = limit;
  size_t features = (size_t)images.dims[1] * images.dims[2];
  out->x = malloc(n * features * sizeof *out->x);
  out->y = malloc(n);
  if (out->x == NULL || out->y == NULL) {
    snprintf(err, errlen, "out of memory for %zu samples of %s", n, ipath);
    dataset_free(out);
    goto out_free;
  }
  for (size_t i = 0; i < n * features; i++)
    out->x[i] = (images.data[i] / 255.0f - DATASET_MEAN) / DATASET_STD;
  memcpy(out->y, labels.data, n);
  out->n = n;
  out->features = features;
  out->rows = (int)images.dims[1];
  out->cols = (int)images.dims[2];
  out->classes = DATASET_CLASSES;
  rc = 0;
out_free:
  idx_free(&labels);
  idx_free(&images);
  return rc;
}

void dataset_free(dataset_t *d) {
  free(d->x);
  free(d->y);
  memset(d, 0, sizeof *d);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void rng_seed(rng_t *r, uint64_t seed) {
  /* splitmix64 spreads any seed (0 included) over the whole state. */
  for (int i = 0; i < 4; i++) {
    seed += 0x9e3779b97f4a7c15ull;
    uint64_t z = seed;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    r->s[i] = z ^ (z >> 31);
  }
}

uint64_t rng_next(rng_t *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double rng_uniform(rng_t *r) { return (rng_next(r) >> 11) * 0x1.0p-53; }

size_t *dataset_permutation(size_t n, uint64_t seed, int epoch) {
  size_t *perm = malloc((n > 0 ? n : 1) * sizeof *perm);
  if (perm == NULL)
    return NULL;
  rng_t r;
  rng_seed(&r, seed * 1000003u + (uint64_t)epoch);
  for (size_t i = 0; i < n; i++)
    perm[i] = i;
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t)(rng_next(&r) % i);
    size_t t = perm[i - 1];
    perm[i - 1] = perm[j];
    perm[j] = t;
  }
  return perm;
}

size_t *dataset_shard(size_t n, uint64_t seed, int epoch, int rank,
                      int nranks, size_t *count) {
  size_t per_rank = (n + (size_t)nranks - 1) / (size_t)nranks;
  size_t *perm = dataset_permutation(n, seed, epoch);
  size_t *mine = malloc((per_rank > 0 ? per_rank : 1) * sizeof *mine);
  if (perm == NULL || mine == NULL) {
    free(perm);
    free(mine);
    return NULL;
  }
  for (size_t k = 0; k < per_rank; k++)
    mine[k] = perm[(k * (size_t)nranks + (size_t)rank) % n];
  free(perm);
  *count = n > 0 ? per_rank : 0;
  return mine;
}
