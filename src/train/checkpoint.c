/*
 * Checkpoint file: a fixed header (native byte order: checkpoints move
 * between machines of one kind), the parameters, the optimiser state, and a
 * CRC-32 of everything before it.
 */
#include "checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

/* 2: the model's shape as text, so that either network fits. */
#define CKPT_MAGIC "HOOPCKP2"

struct ckpt_header {
  char magic[8];
  char shape[MODEL_DESCRIBE_MAX];
  int32_t optim;
  int32_t epochs_done;
  int64_t optim_steps;
  uint64_t seed;
  uint64_t nparams;
};

static int write_all(int fd, const void *buf, size_t len, uLong *crc) {
  *crc = crc32(*crc, buf, (uInt)len);
  const char *p = buf;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

int ckpt_save(const char *path, const model_t *m, const optim_t *o,
              int epochs_done, uint64_t seed, char *err, size_t errlen) {
  struct ckpt_header h;
  memset(&h, 0, sizeof h);
  memcpy(h.magic, CKPT_MAGIC, sizeof h.magic);
  model_describe(&m->spec, h.shape, sizeof h.shape);
  h.optim = o->kind;
  h.epochs_done = epochs_done;
  h.optim_steps = o->steps;
  h.seed = seed;
  h.nparams = m->nparams;

  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    snprintf(err, errlen, "checkpoint: open(%s): %s", tmp, strerror(errno));
    return -1;
  }
  uLong crc = crc32(0L, Z_NULL, 0);
  int bad = write_all(fd, &h, sizeof h, &crc) ||
            write_all(fd, m->params, m->nparams * sizeof(float), &crc);
  for (int i = 0; i < optim_nstate(o->kind) && !bad; i++)
    bad = write_all(fd, o->state[i], o->n * sizeof(float), &crc);
  uint32_t sum = (uint32_t)crc;
  bad = bad || write_all(fd, &sum, sizeof sum, &crc) || fsync(fd) != 0;
  int saved = errno;
  if (close(fd) != 0 && !bad) {
    bad = 1;
    saved = errno;
  }
  if (bad || rename(tmp, path) != 0) {
    if (!bad)
      saved = errno;
    snprintf(err, errlen, "checkpoint: writing %s: %s", path,
             strerror(saved));
    unlink(tmp);
    return -1;
  }
  /* The rename is durable only once the directory is on disk too. */
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return 0;
}

static int read_part(FILE *f, void *buf, size_t len, uLong *crc) {
  if (fread(buf, 1, len, f) != len)
    return -1;
  *crc = crc32(*crc, buf, (uInt)len);
  return 0;
}

int ckpt_load(const char *path, model_t *m, optim_t *o, int *epochs_done,
              uint64_t seed, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    snprintf(err, errlen, "checkpoint %s: %s", path, strerror(errno));
    return -1;
  }
  struct ckpt_header h;
  uLong crc = crc32(0L, Z_NULL, 0);
  int rc = -1;
  char want[sizeof h.shape];
  if (read_part(f, &h, sizeof h, &crc) != 0 ||
      memcmp(h.magic, CKPT_MAGIC, sizeof h.magic) != 0) {
    snprintf(err, errlen, "checkpoint %s: not a hoop-train checkpoint",
             path);
    goto out;
  }
  model_describe(&m->spec, want, sizeof want);
  h.shape[sizeof h.shape - 1] = '\0';
  if (strcmp(h.shape, want) != 0 || h.nparams != m->nparams) {
    snprintf(err, errlen, "checkpoint %s holds a model %s, this run builds "
             "%s", path, h.shape, want);
    goto out;
  }
  if (h.optim != (int32_t)o->kind) {
    snprintf(err, errlen, "checkpoint %s was written with optimiser %s, "
             "this run uses %s", path, optim_name((optim_kind_t)h.optim),
             optim_name(o->kind));
    goto out;
  }
  if (h.seed != seed) {
    snprintf(err, errlen, "checkpoint %s was written with --seed %llu, "
             "this run has --seed %llu", path,
             (unsigned long long)h.seed, (unsigned long long)seed);
    goto out;
  }
  int bad = read_part(f, m->params, m->nparams * sizeof(float), &crc);
  for (int i = 0; i < optim_nstate(o->kind) && !bad; i++)
    bad = read_part(f, o->state[i], o->n * sizeof(float), &crc);
  uint32_t sum;
  if (bad || fread(&sum, sizeof sum, 1, f) != 1) {
    snprintf(err, errlen, "checkpoint %s is truncated", path);
    goto out;
  }
  if (sum != (uint32_t)crc || fgetc(f) != EOF) {
    snprintf(err, errlen, "checkpoint %s is corrupt (checksum mismatch or "
             "trailing data)", path);
    goto out;
  }
  o->steps = h.optim_steps;
  *epochs_done = h.epochs_done;
  rc = 0;
out:
  fclose(f);
  return rc;
}
