/* Names and sizes of the public dtypes, ops, algorithms and collectives. */
#include "hoop.h"

#include <string.h>
#include <strings.h>

#include "core/error.h"
#include "core/types.h"
#include "hoop_build_config.h"

static const struct {
  const char *name;
  size_t size;
} dtype_info[HOOP_DTYPE_COUNT] = {
    [HOOP_I8] = {"int8", 1},       [HOOP_U8] = {"uint8", 1},
    [HOOP_I32] = {"int32", 4},     [HOOP_U32] = {"uint32", 4},
    [HOOP_I64] = {"int64", 8},     [HOOP_U64] = {"uint64", 8},
    [HOOP_F16] = {"half", 2},      [HOOP_F32] = {"float", 4},
    [HOOP_F64] = {"double", 8},    [HOOP_BF16] = {"bfloat16", 2},
    [HOOP_F8E4M3] = {"float8e4m3", 1}, [HOOP_F8E5M2] = {"float8e5m2", 1},
};

static const char *const op_names[HOOP_OP_COUNT] = {
    [HOOP_SUM] = "sum", [HOOP_PROD] = "prod", [HOOP_MIN] = "min",
    [HOOP_MAX] = "max", [HOOP_AVG] = "avg",
};

size_t hoop_dtype_size(hoop_dtype_t dtype) {
  return ((unsigned)dtype < HOOP_DTYPE_COUNT) ? dtype_info[dtype].size : 0;
}

const char *hoop_dtype_name(hoop_dtype_t dtype) {
  return ((unsigned)dtype < HOOP_DTYPE_COUNT) ? dtype_info[dtype].name
                                                : "invalid-dtype";
}

const char *hoop_op_name(hoop_op_t op) {
  return ((unsigned)op < HOOP_OP_COUNT) ? op_names[op] : "invalid-op";
}

static const char *const algo_names[HOOP_ALGO_COUNT] = {
    [HOOP_ALGO_AUTO] = "auto", [HOOP_ALGO_RING] = "ring",
    [HOOP_ALGO_TREE] = "tree", [HOOP_ALGO_PS] = "ps",
    [HOOP_ALGO_P2P] = "p2p", [HOOP_ALGO_ONESHOT] = "oneshot",
    [HOOP_ALGO_HIER] = "hier",
};

const char *hoop_algo_name(hoop_algo_t algo) {
  return (unsigned)algo < HOOP_ALGO_COUNT ? algo_names[algo] : "invalid-algo";
}

/*
 * Each collective's short name and the call a user made, indexed by
 * value: HOOP_COLL_ALLREDUCE is 1, so entry 0 stays empty.
 */
static const struct {
  const char *name;
  const char *call;
} colls[HOOP_COLL_COUNT] = {
    [HOOP_COLL_ALLREDUCE] = {"allreduce", "hoop_allreduce"},
    [HOOP_COLL_REDUCE_SCATTER] = {"reduce_scatter", "hoop_reduce_scatter"},
    [HOOP_COLL_ALLGATHER] = {"allgather", "hoop_allgather"},
    [HOOP_COLL_BROADCAST] = {"broadcast", "hoop_broadcast"},
    [HOOP_COLL_REDUCE] = {"reduce", "hoop_reduce"},
    [HOOP_COLL_BARRIER] = {"barrier", "hoop_barrier"},
    [HOOP_COLL_SENDRECV] = {"send/recv", "hoop_send/hoop_recv"},
    [HOOP_COLL_ALLTOALL] = {"alltoall", "hoop_alltoall"},
};

const char *hoop__coll_name(hoop_coll_t coll) {
  if ((unsigned)coll >= HOOP_COLL_COUNT || colls[coll].name == NULL)
    return "unknown-collective";
  return colls[coll].name;
}

const char *hoop__coll_call(hoop_coll_t coll) {
  if ((unsigned)coll >= HOOP_COLL_COUNT || colls[coll].call == NULL)
    return "hoop collective";
  return colls[coll].call;
}

int hoop__keyed_cmp(const void *a, const void *b) {
  const struct hoop_keyed *x = a, *y = b;
  if (x->key != y->key)
    return x->key < y->key ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

/* The two fields every versioned struct starts with. */
struct versioned_head {
  size_t size;
  unsigned int version;
};

hoop_result_t hoop__check_versioned(const char *fn, const char *type,
                                    const char *init, const void *out,
                                    size_t first, size_t full_size,
                                    unsigned version) {
  struct versioned_head head;
  memcpy(&head, out, sizeof head);
  if (head.size > first && head.size <= full_size && head.version >= 1 &&
      head.version <= version)
    return HOOP_SUCCESS;
  return HOOP_ERROR(NULL, HOOP_ERR_INVALID_ARGUMENT,
                    "%s: %s has size %zu and version %u; set them with %s "
                    "(this hoop takes sizes %zu to %zu, versions 1 to %u)",
                    fn, type, head.size, head.version, init, first + 1,
                    full_size, version);
}

void hoop__fill_versioned(void *out, const void *full, size_t first) {
  struct versioned_head head;
  memcpy(&head, out, sizeof head);
  memcpy((char *)out + first, (const char *)full + first, head.size - first);
}

int hoop__algo_selectable(int algo) {
  return (algo >= HOOP_ALGO_AUTO && algo <= HOOP_ALGO_PS) ||
         algo == HOOP_ALGO_HIER;
}

int hoop__parse_algo(const char *text) {
  for (int a = HOOP_ALGO_AUTO; a < HOOP_ALGO_COUNT; a++) {
    if (hoop__algo_selectable(a) && strcasecmp(text, algo_names[a]) == 0)
      return a;
  }
  return -1;
}

const char *hoop_version_string(void) { return HOOP_VERSION_STRING; }
