/*
 * Reader for the IDX format of MNIST and Fashion-MNIST: a big-endian header
 * (two zero bytes, a type code, the number of dimensions, then each
 * dimension as a 32-bit count) followed by the raw values.  Files may be
 * gzip-compressed or not; zlib reads both.
 */
#ifndef HOOP_TRAIN_IDX_H
#define HOOP_TRAIN_IDX_H

#include <stddef.h>
#include <stdint.h>

#define IDX_MAX_DIMS 4

typedef struct idx_array {
  int ndims;
  uint32_t dims[IDX_MAX_DIMS];
  size_t count;     /* product of dims */
  uint8_t *data;    /* count unsigned bytes */
} idx_array_t;

/*
 * Reads an IDX file of unsigned bytes (type code 0x08) with `want_dims`
 * dimensions.  Returns 0, or -1 with a message naming the file and what is
 * wrong with it in err.
 */
int idx_read_u8(const char *path, int want_dims, idx_array_t *out,
                char *err, size_t errlen);
void idx_free(idx_array_t *a);

#endif
