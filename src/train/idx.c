/*
 * IDX reading through zlib's gzread, which passes uncompressed files
 * through unchanged, so one path serves both forms.  Every size in the
 * header is checked against what the file really holds: a truncated
 * download must fail here, not train on zeros.
 */
#include "idx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* Larger than any IDX set in use (60000 x 28 x 28 is 47 MB). */
#define IDX_MAX_BYTES ((size_t)1 << 31)

static int read_exact(gzFile f, void *buf, size_t len, size_t *got) {
  size_t done = 0;
  while (done < len) {
    unsigned chunk = len - done > (1u << 30) ? (1u << 30)
                                             : (unsigned)(len - done);
    int n = gzread(f, (char *)buf + done, chunk);
    if (n < 0)
      return -1;
    if (n == 0) {
      /* A gzip stream cut short ends like a file, but leaves an error. */
      int code;
      gzerror(f, &code);
      if (code != Z_OK)
        return -1;
      break;
    }
    done += (size_t)n;
  }
  *got = done;
  return 0;
}

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
         (uint32_t)p[3];
}

static int fail(char *err, size_t errlen, gzFile f, const char *fmt,
                const char *path, const char *detail) {
  snprintf(err, errlen, fmt, path, detail);
  if (f != NULL)
    gzclose(f);
  return -1;
}

static const char *gz_detail(gzFile f) {
  int code;
  const char *msg = gzerror(f, &code);
  return code == Z_ERRNO ? strerror(errno) : msg;
}

int idx_read_u8(const char *path, int want_dims, idx_array_t *out,
                char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  gzFile f = gzopen(path, "rb");
  if (f == NULL)
    return fail(err, errlen, NULL, "%s: cannot open: %s", path,
                errno ? strerror(errno) : "out of memory");

  uint8_t head[4];
  size_t got;
  if (read_exact(f, head, sizeof head, &got) != 0)
    return fail(err, errlen, f, "%s: corrupt compressed data: %s", path,
                gz_detail(f));
  if (got != sizeof head)
    return fail(err, errlen, f, "%s: %s", path,
                "too short for an IDX header (truncated or empty file)");
  if (head[0] != 0 || head[1] != 0)
    return fail(err, errlen, f, "%s: %s", path,
                "not an IDX file (the first two bytes must be zero)");
  if (head[2] != 0x08)
    return fail(err, errlen, f, "%s: %s", path,
                "IDX values are not unsigned bytes (type code is not 0x08)");
  if (head[3] != want_dims) {
    char detail[96];
    snprintf(detail, sizeof detail, "has %d dimensions, expected %d",
             head[3], want_dims);
    return fail(err, errlen, f, "%s: IDX file %s", path, detail);
  }

  uint8_t dimbuf[4 * IDX_MAX_DIMS];
  size_t dimbytes = 4 * (size_t)want_dims;
  if (read_exact(f, dimbuf, dimbytes, &got) != 0)
    return fail(err, errlen, f, "%s: corrupt compressed data: %s", path,
                gz_detail(f));
  if (got != dimbytes)
    return fail(err, errlen, f, "%s: %s", path,
                "truncated inside the IDX header");
  size_t count = 1;
  for (int i = 0; i < want_dims; i++) {
    out->dims[i] = be32(dimbuf + 4 * i);
    if (out->dims[i] == 0 || count > IDX_MAX_BYTES / out->dims[i])
      return fail(err, errlen, f, "%s: %s", path,
                  "IDX header gives an empty or implausibly large size");
    count *= out->dims[i];
  }
  out->ndims = want_dims;
  out->count = count;
  out->data = malloc(count);
  if (out->data == NULL)
    return fail(err, errlen, f, "%s: %s", path, "out of memory");
  if (read_exact(f, out->data, count, &got) != 0) {
    idx_free(out);
    return fail(err, errlen, f, "%s: corrupt compressed data: %s", path,
                gz_detail(f));
  }
  if (got != count) {
    char detail[128];
    snprintf(detail, sizeof detail,
             "truncated: the header promises %zu bytes of data, the file "
             "holds %zu", count, got);
    idx_free(out);
    return fail(err, errlen, f, "%s: %s", path, detail);
  }
  uint8_t extra;
  if (read_exact(f, &extra, 1, &got) != 0 || got != 0) {
    idx_free(out);
    return fail(err, errlen, f, "%s: %s", path,
                "has data past what its header describes");
  }
  gzclose(f);
  return 0;
}

void idx_free(idx_array_t *a) {
  free(a->data);
  memset(a, 0, sizeof *a);
}
