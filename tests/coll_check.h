// The collectives the device-buffer tests run (test_cuda.cc over shm and
// CUDA IPC, test_ib_cuda.cc staged over ib), how they are called, and the
// check of a call's output once it is back on the host: one place, so that
// both judge a result by the same rules.
#ifndef HOOP_TESTS_COLL_CHECK_H
#define HOOP_TESTS_COLL_CHECK_H

#include <cstdint>
#include <string>

#include "harness.h"
#include "hoop.h"
#include "reference.h"

namespace hooptest {

enum class Coll {
  AllReduce,
  ReduceScatter,
  AllGather,
  Broadcast,
  Reduce,
  AllToAll
};

inline const char *coll_name(Coll c) {
  switch (c) {
  case Coll::AllReduce: return "allreduce";
  case Coll::ReduceScatter: return "reduce_scatter";
  case Coll::AllGather: return "allgather";
  case Coll::Broadcast: return "broadcast";
  case Coll::Reduce: return "reduce";
  case Coll::AllToAll: return "alltoall";
  }
  return "?";
}

// Whether a call's count is one rank's block, of which the whole buffer
// holds one per rank, rather than the whole buffer.
inline bool coll_blocks(Coll c) {
  return c == Coll::ReduceScatter || c == Coll::AllGather ||
         c == Coll::AllToAll;
}

// `op` matters only to the collectives that reduce, `root` only to those
// that have one.
inline hoop_result_t call_coll(hoop_comm_t comm, Coll coll, const void *in,
                               void *out, size_t count, hoop_dtype_t dtype,
                               hoop_op_t op, int root, hoop_stream_t stream) {
  switch (coll) {
  case Coll::AllReduce:
    return hoop_allreduce(comm, in, out, count, dtype, op, stream);
  case Coll::ReduceScatter:
    return hoop_reduce_scatter(comm, in, out, count, dtype, op, stream);
  case Coll::AllGather:
    return hoop_allgather(comm, in, out, count, dtype, stream);
  case Coll::Broadcast:
    return hoop_broadcast(comm, in, out, count, dtype, root, stream);
  case Coll::Reduce:
    return hoop_reduce(comm, in, out, count, dtype, op, root, stream);
  case Coll::AllToAll:
    return hoop_alltoall(comm, in, out, count, dtype, stream);
  }
  return HOOP_ERR_INTERNAL;
}

// Where a call of `count` (`total` elements in all) reads and writes: out
// of place from send to recv, in place inside one buffer as each
// collective lays it out.  The input is elements [in_first, in_first +
// in_n) of the whole that reference.h makes.
struct Placement {
  char *in, *out;
  size_t in_first, in_n;
};

inline Placement place(Coll coll, bool in_place, char *send, char *recv,
                       size_t esz, size_t count, size_t total, int rank) {
  Placement p = {send, recv, 0, total};
  switch (coll) {
  case Coll::AllReduce:
  case Coll::Broadcast:
  case Coll::Reduce:
    if (in_place)
      p.in = p.out;
    break;
  case Coll::ReduceScatter:
    if (in_place)
      p.out = send + (size_t)rank * count * esz;
    break;
  case Coll::AllGather:
    p.in_first = (size_t)rank * count;
    p.in_n = count;
    if (in_place)
      p.in = recv + p.in_first * esz;
    break;
  case Coll::AllToAll:
    break;
  }
  return p;
}

// What a call's output is held against: every rank's input as reference.h
// makes it for `seed`, `count` elements or blocks (coll_blocks) of `dtype`.
struct Expected {
  Coll coll;
  hoop_dtype_t dtype;
  hoop_op_t op;
  size_t count;
  int root;
  uint64_t seed;
};

// Elements of `got`, the output this rank holds, that differ from the
// reference, the first at *bad.  A reduce's other ranks hold none.
inline size_t count_wrong_output(const char *got, const Expected &x, int rank,
                                 int nranks, size_t *bad) {
  size_t esz = hoop_dtype_size(x.dtype);
  size_t total = coll_blocks(x.coll) ? x.count * (size_t)nranks : x.count;
  size_t own = (size_t)rank * x.count, wrong = 0;
  switch (x.coll) {
  case Coll::AllReduce:
    return count_wrong(got, x.dtype, x.op, x.seed, nranks, 0, total, 0, -1,
                       bad);
  case Coll::ReduceScatter:
    return count_wrong(got, x.dtype, x.op, x.seed, nranks, own, x.count, 0,
                       -1, bad);
  case Coll::AllGather:
    for (int owner = 0; owner < nranks; owner++)
      wrong += count_wrong(got + (size_t)owner * x.count * esz, x.dtype,
                           HOOP_SUM, x.seed, nranks, (size_t)owner * x.count,
                           x.count, 1, owner, bad);
    return wrong;
  case Coll::Broadcast:
    return count_wrong(got, x.dtype, HOOP_SUM, x.seed, nranks, 0, total, 1,
                       x.root, bad);
  case Coll::Reduce:
    return rank == x.root ? count_wrong(got, x.dtype, x.op, x.seed, nranks, 0,
                                        total, 0, -1, bad)
                          : 0;
  case Coll::AllToAll:
    // Block q came from rank q: its input's block for this rank.
    for (int q = 0; q < nranks; q++)
      wrong += count_wrong(got + (size_t)q * x.count * esz, x.dtype, HOOP_SUM,
                           x.seed, nranks, own, x.count, 1, q, bad);
    return wrong;
  }
  return 0;
}

// Fails `what` where the call failed after it returned (an error found
// on its stream) or its output differs from the reference.  False in the
// first case, where the output means nothing and there is no more to see.
inline bool check_output(RankLog &log, hoop_comm_t comm,
                         const std::string &what, const char *got,
                         const Expected &x, int rank, int nranks) {
  hoop_result_t async = HOOP_SUCCESS;
  hoop_comm_get_async_error(comm, &async);
  if (async != HOOP_SUCCESS) {
    log.fail("%s: failed after returning: %s", what.c_str(),
             hoop_comm_last_error(comm));
    return false;
  }
  size_t bad = 0;
  size_t wrong = count_wrong_output(got, x, rank, nranks, &bad);
  if (wrong > 0)
    log.fail("%s: %zu wrong elements (first at %zu)", what.c_str(), wrong,
             bad);
  return true;
}

} // namespace hooptest

#endif // HOOP_TESTS_COLL_CHECK_H
