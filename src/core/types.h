/* Internal helpers for the public enums' names. */
#ifndef HOOP_TYPES_H
#define HOOP_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "hoop.h"

/* The collective's name in messages ("allreduce", "send/recv"). */
const char *hoop__coll_name(hoop_coll_t coll);
/* The call that runs it, for messages: "hoop_allreduce". */
const char *hoop__coll_call(hoop_coll_t coll);

/*
 * The structs hoop fills that start with `size_t size; unsigned version;`
 * (hoop_model_t, hoop_rank_info_t, hoop_stats_t).  Checks the caller's
 * size and version against this library's struct (`full_size` bytes,
 * fields from offset `first`, versions 1..`version`) and refuses, naming
 * `fn`, `type` and `init`, what no program made with `init`.
 */
hoop_result_t hoop__check_versioned(const char *fn, const char *type,
                                    const char *init, const void *out,
                                    size_t first, size_t full_size,
                                    unsigned version);

/* Copies `full` into a checked `out`: the caller's size less its size and
   version fields, which stay as the caller set them. */
void hoop__fill_versioned(void *out, const void *full, size_t first);

/* Whether a setting may name the algorithm: auto, ring, tree, ps, hier. */
int hoop__algo_selectable(int algo);

/* Parses HOOP_ALGO's text; returns -1 when it names no algorithm. */
int hoop__parse_algo(const char *text);

/*
 * An id with a sort key, for qsort with hoop__keyed_cmp: by key, then by
 * id, so that equal keys keep one order on every rank.
 */
struct hoop_keyed {
  uint64_t key;
  int32_t id;
};

int hoop__keyed_cmp(const void *a, const void *b);

#endif /* HOOP_TYPES_H */
