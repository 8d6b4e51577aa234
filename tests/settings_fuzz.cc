// Settings fuzzer (issue 36, "never a deadlock"): every valid combination
// of hoop's tunables must give every call its correct result, promptly.
// Each case draws the tunables, 2-5 ranks over shm or tcp, and a few
// collectives and send/recv groups whose sizes sit around the thresholds
// those tunables set; the ranks are forked processes, each checking its
// output against reference.h.  A case is one line that holds all of it,
// so that a failure found by chance replays exactly (--replay), and can
// be cut down by hand by deleting settings and calls from the line.
//
//   hoop-settings-fuzz [--seconds N] [--seed S] [--cases K]
//                      [--replay "<case line>"] [--verbose]
//
// A case fails on a hang (hoop's HOOP_ERR_TIMEOUT, or ranks still running
// well past it), a call that crawls (over kSlowCallS), an error returned,
// a crash or a wrong result.  Exit 0 when every case passed, 1 when one
// failed (its line and the ranks' stderr are printed), 2 on bad usage.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "coll_check.h"

extern "C" {
#include "core/param.h"
#include "transport/params.h"
}

using namespace hooptest;

namespace {

// Without progress for this long hoop fails the call with
// HOOP_ERR_TIMEOUT, which the fuzzer reports as a hang; a healthy case
// takes well under a second, so this is margin for a loaded machine.
const int kTimeoutMs = 10000;
// Past hoop's own timeout and the probe of the ranks that follows it
// (timeout/5, at most 3 s), a case still running is killed: a hang that
// hoop's timeout did not catch.
const int kKillMarginS = 20;
// A call of at most kMaxBytes takes under 2 s on 5 ranks sharing 2 busy
// cores; one that takes longer stalled, if not for the whole timeout.
const double kSlowCallS = 5.0;
// Every buffer at most this: the sizes that matter are the thresholds,
// and a case has to stay quick on 5 ranks sharing 2 cores.
const size_t kMaxBytes = (size_t)4 << 20;
// And at most this many elements: the reference takes about a microsecond
// an element (fp8 most), on every rank.
const size_t kMaxElements = (size_t)1 << 20;
// Of a replayed line; drawn cases have 2-5 ranks and 3-8 calls.
const int kMaxRanks = 64;
const size_t kMaxCalls = 256;
// Each connection maps two rings of slots * slot bytes; 5 ranks hold 20.
const int64_t kMaxRingBytes = (int64_t)32 << 20;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() { return state_ = mix(state_); }
  size_t below(size_t n) { return n == 0 ? 0 : (size_t)(next() % n); }
  bool chance(double p) { return (double)(next() >> 11) * 0x1p-53 < p; }
  template <typename T> T pick(std::initializer_list<T> v) {
    return v.begin()[below(v.size())];
  }

 private:
  uint64_t state_;
};

// Sizes as hoop reads them: with K or M when exact, which is how a person
// would write them when cutting a line down.
std::string size_text(int64_t v) {
  if (v != 0 && v % (1 << 20) == 0)
    return std::to_string(v >> 20) + "M";
  if (v != 0 && v % 1024 == 0)
    return std::to_string(v >> 10) + "K";
  return std::to_string(v);
}

std::string draw_multiple_of_64(Rng &rng, int64_t lo, int64_t hi) {
  return size_text(lo + 64 * (int64_t)rng.below((size_t)((hi - lo) / 64 + 1)));
}

struct Tunable {
  const char *name;
  double p_set; // otherwise left unset: hoop's default is fuzzed too
  std::string (*draw)(Rng &rng);
};

// The valid ranges are those of README.md's table and of apply_config()
// in src/core/comm.c; small values, where pieces are many and rings
// fill, are drawn more often than their share of the range.
const Tunable kTunables[] = {
    {"HOOP_TIMEOUT_MS", 1.0,
     [](Rng &) { return std::to_string(kTimeoutMs); }},
    {"HOOP_TRANSPORT", 1.0,
     [](Rng &rng) { return std::string(rng.pick({"shm", "tcp"})); }},
    {"HOOP_ALGO", 0.5,
     [](Rng &rng) {
       return std::string(rng.pick({"auto", "ring", "tree", "ps"}));
     }},
    {"HOOP_NSOCKS", 0.6,
     [](Rng &rng) { return std::to_string(1 + rng.below(4)); }},
    {"HOOP_SLICE_BYTES", 0.7,
     [](Rng &rng) {
       if (rng.chance(0.4))
         return draw_multiple_of_64(rng, 4096, 1 << 20);
       // 5000 and 70001: hoop rounds a slice down to a multiple of 64.
       return size_text(rng.pick<int64_t>({4096, 4160, 5000, 12288, 65536,
                                           70001, 100032, 262144,
                                           1 << 20}));
     }},
    {"HOOP_PIPELINE_BYTES", 0.6,
     [](Rng &rng) {
       return size_text(rng.pick<int64_t>({4096, 8192, 65536, 200000,
                                           262144, 1 << 20, 4 << 20,
                                           16 << 20}));
     }},
    // 0 or at least 64K: below, loopback TCP waits on window probes.
    {"HOOP_SOCKBUF_BYTES", 0.6,
     [](Rng &rng) {
       if (rng.chance(0.2))
         return size_text(65536 + (int64_t)rng.below(1 << 20));
       return size_text(
           rng.pick<int64_t>({0, 65536, 65536, 131072, 262144, 4 << 20}));
     }},
    {"HOOP_ONESHOT_BYTES", 0.6,
     [](Rng &rng) {
       if (rng.chance(0.2))
         return size_text((int64_t)rng.below(1 << 20));
       return size_text(rng.pick<int64_t>({0, 4096, 65536, 262144, 1 << 20,
                                           1 << 20, 4 << 20, 4 << 20}));
     }},
    {"HOOP_COLD_BYTES", 0.5,
     [](Rng &rng) {
       return size_text(rng.pick<int64_t>({4096, 65536, 300000, 1 << 20,
                                           64 << 20}));
     }},
    {"HOOP_SPIN_US", 0.5,
     [](Rng &rng) { return std::to_string(rng.pick({0, 1, 5, 100})); }},
    {"HOOP_YIELD_US", 0.5,
     [](Rng &rng) { return std::to_string(rng.pick({0, 10, 200, 2000})); }},
    {"HOOP_RUNTIME_CONNECT", 0.3,
     [](Rng &rng) { return std::to_string(rng.pick({0, 1})); }},
    {"HOOP_SHM_SLOT_BYTES", 0.8,
     [](Rng &rng) {
       if (rng.chance(0.3))
         return draw_multiple_of_64(rng, 4096, 512 << 10);
       return size_text(rng.pick<int64_t>({4096, 4096, 4160, 8192, 12288,
                                           65472, 65536, 65536, 262144,
                                           1 << 20, 4 << 20}));
     }},
    {"HOOP_SHM_SLOTS", 0.8,
     [](Rng &rng) {
       if (rng.chance(0.3))
         return std::to_string(2 + rng.below(63));
       return std::to_string(rng.pick({2, 2, 3, 4, 8, 16, 64}));
     }},
    {"HOOP_SHM_STORES", 0.5,
     [](Rng &rng) {
       return std::string(rng.pick({"auto", "plain", "nt"}));
     }},
    // The cost model only steers HOOP_ALGO=auto; extreme rates make it
    // pick schedules it would not pick on this machine.
    {"HOOP_ALPHA_NS", 0.2,
     [](Rng &rng) {
       return std::to_string(rng.pick({0, 1000, 20000, 1000000}));
     }},
    {"HOOP_HOST_ALPHA_NS", 0.2,
     [](Rng &rng) {
       return std::to_string(rng.pick({0, 1000, 20000, 1000000}));
     }},
    {"HOOP_LINK_MBPS", 0.2,
     [](Rng &rng) {
       return std::to_string(rng.pick({1, 100, 2000, 100000}));
     }},
    {"HOOP_HOST_MBPS", 0.2,
     [](Rng &rng) {
       return std::to_string(rng.pick({1, 100, 5000, 100000}));
     }},
};

// Tunables in core/param.h and transport/params.h that a case leaves
// unset, and why.  Any other one without a line in kTunables stops the
// fuzzer, so that a new tunable cannot go unfuzzed unnoticed.
const char *const kNotDrawn[] = {
    // Device buffers only; the fuzzer's buffers are host memory.
    "HOOP_CUDA_CHUNK_BYTES", "HOOP_CUDA_IPC_CHUNK_BYTES",
    "HOOP_CUDA_IPC_ONESHOT_BYTES",
    // Read only with HOOP_TRANSPORT=ib, which needs RDMA hardware.
    "HOOP_IB_HCA", "HOOP_IB_GID_INDEX", "HOOP_IB_TIMEOUT",
    "HOOP_IB_RETRY_CNT", "HOOP_IB_SL", "HOOP_IB_TC",
    // The parent reads it once, making the ids, so it cannot vary by case.
    "HOOP_SOCKET_IFNAME",
    // Read only by hoop_comm_init_env; the fuzzer's ranks meet on ids.
    "HOOP_ELASTIC",
};

std::vector<std::string> hoop_param_names() {
  std::vector<std::string> names;
#define NAME_(name, env, def) names.push_back(env);
  HOOP_PARAMS(NAME_)
  HOOP_STRING_PARAMS(NAME_)
  HOOP_TRANSPORT_PARAMS(NAME_)
  HOOP_TRANSPORT_STRING_PARAMS(NAME_)
#undef NAME_
  return names;
}

bool every_param_covered() {
  bool ok = true;
  for (const std::string &name : hoop_param_names()) {
    bool known = false;
    for (const Tunable &t : kTunables)
      known = known || name == t.name;
    for (const char *skip : kNotDrawn)
      known = known || name == skip;
    if (!known) {
      fprintf(stderr, "settings_fuzz: %s is in core/param.h or "
                      "transport/params.h but neither drawn nor listed as "
                      "not drawn\n", name.c_str());
      ok = false;
    }
  }
  return ok;
}

// ---- Calls ---------------------------------------------------------------

enum class Kind { Coll, Barrier, SendRecv };

struct Call {
  Kind kind = Kind::Barrier;
  Coll coll = Coll::AllReduce;
  hoop_dtype_t dtype = HOOP_F32;
  hoop_op_t op = HOOP_SUM;
  size_t count = 0; // coll_blocks(): one rank's block
  bool in_place = false;
  int root = 0;
  // Send/recv: dests[k][r] is where rank r sends its k-th message (itself
  // too: a rank may send to itself in a group); recv_first queues each
  // receive before its send.
  std::vector<std::vector<int>> dests;
  bool recv_first = false;
};

bool coll_reduces(Coll c) {
  return c == Coll::AllReduce || c == Coll::ReduceScatter ||
         c == Coll::Reduce;
}

bool coll_has_root(Coll c) {
  return c == Coll::Broadcast || c == Coll::Reduce;
}

bool coll_in_place_exists(Coll c) { return c != Coll::AllToAll; }

// allreduce:float:sum:65536:ip   reduce:int8:max:100:oop:r2
// allgather:half:77:ip   alltoall:uint8:1000   barrier
// sendrecv:float:262144:sf:1-0-2+2-0-1
std::string call_text(const Call &c) {
  if (c.kind == Kind::Barrier)
    return "barrier";
  std::string s;
  if (c.kind == Kind::SendRecv) {
    s = std::string("sendrecv:") + hoop_dtype_name(c.dtype) + ":" +
        std::to_string(c.count) + (c.recv_first ? ":rf:" : ":sf:");
    for (size_t k = 0; k < c.dests.size(); k++) {
      if (k > 0)
        s += "+";
      for (size_t r = 0; r < c.dests[k].size(); r++)
        s += (r > 0 ? "-" : "") + std::to_string(c.dests[k][r]);
    }
    return s;
  }
  s = std::string(coll_name(c.coll)) + ":" + hoop_dtype_name(c.dtype);
  if (coll_reduces(c.coll))
    s += std::string(":") + hoop_op_name(c.op);
  s += ":" + std::to_string(c.count);
  if (coll_in_place_exists(c.coll))
    s += c.in_place ? ":ip" : ":oop";
  if (coll_has_root(c.coll))
    s += ":r" + std::to_string(c.root);
  return s;
}

std::vector<std::string> split(const std::string &s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep))
    out.push_back(cur);
  return out;
}

bool parse_count(const std::string &s, size_t *v) {
  char *end = nullptr;
  errno = 0;
  unsigned long long x = strtoull(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno != 0)
    return false;
  *v = (size_t)x;
  return true;
}

bool parse_call(const std::string &text, int nranks, Call *c,
                std::string *why) {
  std::vector<std::string> f = split(text, ':');
  *why = "bad call \"" + text + "\"";
  if (f.empty())
    return false;
  if (f[0] == "barrier") {
    c->kind = Kind::Barrier;
    return f.size() == 1;
  }
  size_t at = 1;
  auto field = [&]() { return at < f.size() ? f[at++] : std::string(); };
  auto dtype = [&]() {
    std::string name = field();
    for (int t = 0; t < HOOP_DTYPE_COUNT; t++)
      if (name == hoop_dtype_name((hoop_dtype_t)t)) {
        c->dtype = (hoop_dtype_t)t;
        return true;
      }
    return false;
  };
  if (f[0] == "sendrecv") {
    c->kind = Kind::SendRecv;
    if (!dtype() || !parse_count(field(), &c->count))
      return false;
    std::string order = field();
    if (order != "rf" && order != "sf")
      return false;
    c->recv_first = order == "rf";
    for (const std::string &perm : split(field(), '+')) {
      std::vector<int> d;
      for (const std::string &x : split(perm, '-')) {
        size_t v;
        if (!parse_count(x, &v) || v >= (size_t)nranks)
          return false;
        d.push_back((int)v);
      }
      std::vector<int> sorted = d;
      std::sort(sorted.begin(), sorted.end());
      for (int r = 0; r < (int)sorted.size(); r++)
        if (sorted[(size_t)r] != r)
          return false; // each rank must receive exactly one message
      if ((int)d.size() != nranks)
        return false;
      c->dests.push_back(d);
    }
    return !c->dests.empty() && at == f.size();
  }
  c->kind = Kind::Coll;
  bool named = false;
  for (Coll k : {Coll::AllReduce, Coll::ReduceScatter, Coll::AllGather,
                 Coll::Broadcast, Coll::Reduce, Coll::AllToAll})
    if (f[0] == coll_name(k)) {
      c->coll = k;
      named = true;
    }
  if (!named || !dtype())
    return false;
  if (coll_reduces(c->coll)) {
    std::string name = field();
    bool found = false;
    for (int o = 0; o < HOOP_OP_COUNT; o++)
      if (name == hoop_op_name((hoop_op_t)o)) {
        c->op = (hoop_op_t)o;
        found = true;
      }
    if (!found)
      return false;
  }
  if (!parse_count(field(), &c->count))
    return false;
  if (coll_in_place_exists(c->coll)) {
    std::string p = field();
    if (p != "ip" && p != "oop")
      return false;
    c->in_place = p == "ip";
  }
  if (coll_has_root(c->coll)) {
    std::string r = field();
    size_t v;
    if (r.size() < 2 || r[0] != 'r' || !parse_count(r.substr(1), &v) ||
        v >= (size_t)nranks)
      return false;
    c->root = (int)v;
  }
  return at == f.size();
}

// ---- Cases ---------------------------------------------------------------

struct Case {
  uint64_t seed = 0; // of the inputs; the rest is spelled out
  int nranks = 2;
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<Call> calls;

  const char *get(const char *name) const {
    for (const auto &e : env)
      if (e.first == name)
        return e.second.c_str();
    return nullptr;
  }
  int64_t get_size(const char *name, int64_t def) const {
    const char *v = get(name);
    int64_t x;
    return v != nullptr && hoop__parse_size(v, &x) == 0 ? x : def;
  }
};

std::string case_text(const Case &c) {
  char seed[32];
  snprintf(seed, sizeof seed, "seed=%" PRIu64, c.seed);
  std::string s = std::string(seed) + " n=" + std::to_string(c.nranks);
  for (const auto &e : c.env)
    s += " " + e.first + "=" + e.second;
  s += " calls=";
  for (size_t i = 0; i < c.calls.size(); i++)
    s += (i > 0 ? "," : "") + call_text(c.calls[i]);
  return s;
}

bool parse_case(const std::string &line, Case *c, std::string *why) {
  std::istringstream in(line);
  std::string calls;
  bool have_seed = false, have_n = false, have_calls = false;
  for (std::string tok; in >> tok;) {
    size_t eq = tok.find('=');
    if (eq == std::string::npos)
      continue; // "case 12:" and the like, copied along with the line
    std::string key = tok.substr(0, eq), value = tok.substr(eq + 1);
    size_t v;
    if (key == "seed" && parse_count(value, &v)) {
      c->seed = v;
      have_seed = true;
    } else if (key == "n" && parse_count(value, &v) && v >= 1 &&
               v <= (size_t)kMaxRanks) {
      c->nranks = (int)v;
      have_n = true;
    } else if (key == "calls") {
      calls = value;
      have_calls = true;
    } else if (key.compare(0, 5, "HOOP_") == 0) {
      c->env.emplace_back(key, value);
    } else {
      *why = "unknown item \"" + tok + "\"";
      return false;
    }
  }
  if (!have_seed || !have_n || !have_calls) {
    *why = "a case line needs seed=, n= and calls=";
    return false;
  }
  for (const std::string &t : split(calls, ',')) {
    Call call;
    if (!parse_call(t, c->nranks, &call, why))
      return false;
    c->calls.push_back(call);
  }
  if (c->calls.size() > kMaxCalls) {
    *why = "more than " + std::to_string(kMaxCalls) + " calls";
    return false;
  }
  return true;
}

// The byte sizes at which hoop's schedules change with this case's
// settings: a call a little under, at or over one of them, or at a
// multiple that a per-rank or per-socket share of it reaches, is where an
// off-by-one in splitting, ring capacity or flow control shows.
std::vector<int64_t> thresholds(const Case &c) {
  int64_t slot = c.get_size("HOOP_SHM_SLOT_BYTES", 256 << 10);
  int64_t slots = c.get_size("HOOP_SHM_SLOTS", 8);
  // Near enough to hoop's auto: the last-level cache over twice the ranks.
  long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  int64_t cold_auto = llc > 0 ? llc / (2 * c.nranks) : 4 << 20;
  std::vector<int64_t> t = {
      c.get_size("HOOP_SLICE_BYTES", 256 << 10) & ~(int64_t)63,
      slot,
      slot * slots,
      slot * (slots - 1),
      c.get_size("HOOP_PIPELINE_BYTES", 4 << 20),
      c.get_size("HOOP_ONESHOT_BYTES", 256 << 10),
      c.get_size("HOOP_COLD_BYTES", cold_auto),
      c.get_size("HOOP_SOCKBUF_BYTES", 4 << 20),
      65536, // shm's stores choose per piece from here
  };
  t.erase(std::remove_if(t.begin(), t.end(),
                         [](int64_t x) {
                           return x <= 0 || x > (int64_t)kMaxBytes;
                         }),
          t.end());
  return t;
}

size_t max_elements(size_t esz) {
  return std::min(kMaxBytes / esz, kMaxElements);
}

// A call's buffer in bytes: whole buffer for most, one rank's block for
// those whose count is a block (the caller decides which the threshold
// applies to).
size_t draw_bytes(Rng &rng, const Case &c, size_t esz) {
  int n = c.nranks;
  size_t kind = rng.below(100);
  if (kind < 6)
    return 0;
  if (kind < 14)
    return esz * (1 + rng.below(3 * (size_t)n + 2));
  if (kind < 22)
    return esz * rng.below(65536 / esz);
  if (kind < 28)
    return esz * (1 + rng.below(max_elements(esz)));
  std::vector<int64_t> t = thresholds(c);
  if (t.empty())
    return esz;
  int64_t cap = (int64_t)(max_elements(esz) * esz);
  if (kind < 45) {
    // Between two thresholds: where one schedule's limit is passed while
    // another's is not (a one-shot call larger than the shm ring was).
    int64_t a = t[rng.below(t.size())], b = t[rng.below(t.size())];
    int64_t lo = std::min(a, b), hi = std::min(std::max(a, b), cap);
    if (hi <= lo)
      return (size_t)std::min(lo, cap) / esz * esz;
    return (size_t)(lo + 1 + (int64_t)rng.below((size_t)(hi - lo))) / esz *
           esz;
  }
  int64_t nsocks = c.get_size("HOOP_NSOCKS", 1);
  double scale = 1;
  if (rng.chance(0.4))
    scale = rng.pick<double>({(double)n, (double)(n - 1), 2, 1.0 / n,
                              (double)nsocks, (double)(nsocks * n)});
  int64_t at = (int64_t)((double)t[rng.below(t.size())] * scale);
  int64_t e = (int64_t)esz;
  int64_t delta = rng.pick<int64_t>({-e, 0, 0, e, -64, 64, -e * n, e * n,
                                     -4096, 4096});
  if (rng.chance(0.15))
    delta = (int64_t)rng.below(8192) - 4096;
  int64_t bytes = std::min(std::max<int64_t>(0, at + delta), cap);
  return (size_t)bytes / esz * esz;
}

std::vector<int> random_dests(Rng &rng, int n) {
  std::vector<int> d((size_t)n);
  for (int r = 0; r < n; r++)
    d[(size_t)r] = r;
  if (rng.chance(0.4)) {
    // Pairs that swap, both ends sending at once: each blocks on the
    // other unless the transport keeps both directions moving.
    for (int r = n - 1; r > 0; r--)
      std::swap(d[(size_t)r], d[rng.below((size_t)r + 1)]);
    std::vector<int> pairs = d;
    for (int r = 0; r < n; r++)
      d[(size_t)r] = r;
    for (int k = 0; k + 1 < n; k += 2) {
      d[(size_t)pairs[(size_t)k]] = pairs[(size_t)k + 1];
      d[(size_t)pairs[(size_t)k + 1]] = pairs[(size_t)k];
    }
    return d;
  }
  for (int r = n - 1; r > 0; r--)
    std::swap(d[(size_t)r], d[rng.below((size_t)r + 1)]);
  return d;
}

Call draw_call(Rng &rng, const Case &c) {
  Call call;
  int n = c.nranks;
  size_t which = rng.below(100);
  call.dtype = (hoop_dtype_t)rng.below(HOOP_DTYPE_COUNT);
  call.op = (hoop_op_t)rng.below(HOOP_OP_COUNT);
  size_t esz = hoop_dtype_size(call.dtype);
  if (which < 4)
    return call; // barrier
  if (which < 18) {
    call.kind = Kind::SendRecv;
    call.count = draw_bytes(rng, c, esz) / esz;
    call.recv_first = rng.chance(0.5);
    size_t perms = rng.chance(0.3) ? 2 : 1;
    for (size_t k = 0; k < perms; k++)
      call.dests.push_back(random_dests(rng, n));
    return call;
  }
  call.kind = Kind::Coll;
  call.coll = which < 48   ? Coll::AllReduce
              : which < 58 ? Coll::ReduceScatter
              : which < 68 ? Coll::AllGather
              : which < 78 ? Coll::Broadcast
              : which < 89 ? Coll::Reduce
                           : Coll::AllToAll;
  call.in_place = coll_in_place_exists(call.coll) && rng.chance(0.5);
  call.root = (int)rng.below((size_t)n);
  size_t bytes = draw_bytes(rng, c, esz);
  call.count = bytes / esz;
  if (coll_blocks(call.coll)) {
    // The threshold applies to the whole buffer as often as to a block.
    if (rng.chance(0.5))
      call.count = bytes / esz / (size_t)n;
    call.count = std::min(call.count, max_elements(esz) / (size_t)n);
  }
  return call;
}

Case draw_case(uint64_t seed) {
  Rng rng(seed);
  Case c;
  c.seed = seed;
  // Two ranks most: they alone have the one-shot all-reduce.
  c.nranks = rng.pick({2, 2, 2, 3, 3, 4, 4, 5});
  for (const Tunable &t : kTunables) {
    // Drawn whether set or not, so that one setting's draw does not shift
    // the others'.
    std::string v = t.draw(rng);
    if (rng.chance(t.p_set))
      c.env.emplace_back(t.name, v);
  }
  int64_t slot = c.get_size("HOOP_SHM_SLOT_BYTES", 256 << 10);
  int64_t slots = c.get_size("HOOP_SHM_SLOTS", 8);
  if (slot * slots > kMaxRingBytes) {
    slots = std::max<int64_t>(2, kMaxRingBytes / slot);
    bool found = false;
    for (auto &e : c.env)
      if (e.first == "HOOP_SHM_SLOTS") {
        e.second = std::to_string(slots);
        found = true;
      }
    if (!found)
      c.env.emplace_back("HOOP_SHM_SLOTS", std::to_string(slots));
  }
  size_t ncalls = 3 + rng.below(6);
  for (size_t i = 0; i < ncalls; i++)
    c.calls.push_back(draw_call(rng, c));
  return c;
}

// ---- Running a case ------------------------------------------------------

// Where each rank is, and when it entered and left each hoop call, in
// memory the forked ranks share with the parent: a rank killed in a hang
// can no longer say which call it was in, and only the parent sees every
// rank's times.
const int kInit = -1, kDone = -2;
struct Progress {
  int where; // a call's index, kInit or kDone
  double entered[kMaxCalls], left[kMaxCalls]; // steady clock, 0: not yet
};
Progress *g_progress = nullptr;

void set_progress(int rank, int where) {
  __atomic_store_n(&g_progress[rank].where, where, __ATOMIC_RELAXED);
}

double clock_now() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch())
      .count();
}

// Brackets the hoop call of one rank's call `call`, without the work of
// filling and checking its buffers around it.
struct Stamp {
  int rank;
  size_t call;
  void enter() const { g_progress[rank].entered[call] = clock_now(); }
  void leave() const { g_progress[rank].left[call] = clock_now(); }
  double seconds() const {
    return g_progress[rank].left[call] - g_progress[rank].entered[call];
  }
};

std::string progress_text(int nranks) {
  std::string s;
  for (int r = 0; r < nranks; r++) {
    int w = __atomic_load_n(&g_progress[r].where, __ATOMIC_RELAXED);
    s += (r > 0 ? ", " : "") + std::string("rank ") + std::to_string(r) +
         (w == kInit ? " in init" : w == kDone ? " done"
                                     : " in call " + std::to_string(w));
  }
  return s;
}

// A rank's exit status: the worst of what it saw.
enum Verdict { kOk = 0, kWrong = 1, kError = 2, kTimedOut = 4 };

uint64_t call_seed(const Case &c, size_t i) { return mix(c.seed + i); }

Verdict failed_call(RankLog &log, hoop_comm_t comm, const std::string &what,
                    hoop_result_t res) {
  log.fail("%s: %s: %s", what.c_str(), hoop_result_name(res),
           hoop_comm_last_error(comm));
  return res == HOOP_ERR_TIMEOUT ? kTimedOut : kError;
}

Verdict run_coll(RankLog &log, hoop_comm_t comm, int rank, int n,
                 const Call &c, uint64_t seed, const std::string &what,
                 const Stamp &stamp) {
  size_t esz = hoop_dtype_size(c.dtype);
  size_t total = coll_blocks(c.coll) ? c.count * (size_t)n : c.count;
  size_t out_n = c.coll == Coll::ReduceScatter ? c.count : total;
  Guarded send(total, esz), recv(out_n, esz);
  Placement p = place(c.coll, c.in_place, send.data(), recv.data(), esz,
                      c.count, total, rank);
  hoop_op_t fill_op = coll_reduces(c.coll) ? c.op : HOOP_SUM;
  fill_input(p.in, c.dtype, fill_op, seed, rank, p.in_first, p.in_n);
  std::vector<char> input;
  if (!c.in_place)
    input.assign(p.in, p.in + p.in_n * esz);
  stamp.enter();
  hoop_result_t res = call_coll(comm, c.coll, p.in, p.out, c.count, c.dtype,
                                c.op, c.root, nullptr);
  stamp.leave();
  if (res != HOOP_SUCCESS)
    return failed_call(log, comm, what, res);
  Verdict v = kOk;
  size_t bad = 0;
  size_t wrong = count_wrong_output(
      p.out, {c.coll, c.dtype, c.op, c.count, c.root, seed}, rank, n, &bad);
  if (wrong > 0) {
    log.fail("%s: %zu wrong elements (first at %zu)", what.c_str(), wrong,
             bad);
    v = kWrong;
  }
  if (!send.guards_intact() || !recv.guards_intact()) {
    log.fail("%s: wrong: wrote outside its buffers", what.c_str());
    v = kWrong;
  }
  if (!input.empty() && memcmp(p.in, input.data(), input.size()) != 0) {
    log.fail("%s: wrong: changed its send buffer", what.c_str());
    v = kWrong;
  }
  if (c.coll == Coll::Reduce && !c.in_place && rank != c.root &&
      !recv.all_canary()) {
    log.fail("%s: wrong: wrote the recv buffer of a rank not the root",
             what.c_str());
    v = kWrong;
  }
  return v;
}

Verdict run_sendrecv(RankLog &log, hoop_comm_t comm, int rank,
                     const Call &c, uint64_t seed, const std::string &what,
                     const Stamp &stamp) {
  size_t esz = hoop_dtype_size(c.dtype);
  size_t nmsg = c.dests.size();
  std::vector<Guarded> out, in;
  std::vector<int> from(nmsg);
  for (size_t k = 0; k < nmsg; k++) {
    out.emplace_back(c.count, esz);
    in.emplace_back(c.count, esz);
    // Message k of each sender starts at element k * count of its input,
    // so that two messages from one sender differ.
    fill_input(out[k].data(), c.dtype, HOOP_SUM, seed, rank, k * c.count,
               c.count);
    for (int q = 0; q < (int)c.dests[k].size(); q++)
      if (c.dests[k][(size_t)q] == rank)
        from[k] = q;
  }
  stamp.enter();
  hoop_result_t res = hoop_group_start();
  for (size_t k = 0; k < nmsg && res == HOOP_SUCCESS; k++) {
    int to = c.dests[k][(size_t)rank];
    if (c.recv_first)
      res = hoop_recv(comm, in[k].data(), c.count, c.dtype, from[k], nullptr);
    if (res == HOOP_SUCCESS)
      res = hoop_send(comm, out[k].data(), c.count, c.dtype, to, nullptr);
    if (res == HOOP_SUCCESS && !c.recv_first)
      res = hoop_recv(comm, in[k].data(), c.count, c.dtype, from[k], nullptr);
  }
  hoop_result_t end = hoop_group_end();
  stamp.leave();
  if (res == HOOP_SUCCESS)
    res = end;
  if (res != HOOP_SUCCESS)
    return failed_call(log, comm, what, res);
  Verdict v = kOk;
  for (size_t k = 0; k < nmsg; k++) {
    size_t bad = 0;
    // Gather mode: the message is compared with the sender's input alone.
    size_t wrong = count_wrong(in[k].data(), c.dtype, HOOP_SUM, seed, 1,
                               k * c.count, c.count, 1, from[k], &bad);
    if (wrong > 0) {
      log.fail("%s: message %zu from rank %d: %zu wrong elements (first at "
               "%zu)", what.c_str(), k, from[k], wrong, bad);
      v = kWrong;
    }
    if (!in[k].guards_intact() || !out[k].guards_intact()) {
      log.fail("%s: wrong: wrote outside its buffers", what.c_str());
      v = kWrong;
    }
  }
  return v;
}

// Checks that the case's settings reached this forked rank, as param.h
// says they do: the transport and the algorithm are the two it can ask.
Verdict check_settings(RankLog &log, hoop_comm_t comm, const Case &c,
                       int rank) {
  Verdict v = kOk;
  const char *want = c.get("HOOP_TRANSPORT");
  const char *got = nullptr;
  if (want != nullptr &&
      (hoop_comm_transport(comm, rank, (rank + 1) % c.nranks, &got) !=
           HOOP_SUCCESS ||
       strcmp(got, want) != 0)) {
    log.fail("HOOP_TRANSPORT=%s, but the rank uses %s", want,
             got != nullptr ? got : "?");
    v = kError;
  }
  const char *algo = c.get("HOOP_ALGO");
  hoop_algo_t a = HOOP_ALGO_AUTO;
  if (algo != nullptr &&
      (hoop_comm_get_algo(comm, &a) != HOOP_SUCCESS ||
       strcmp(hoop_algo_name(a), algo) != 0)) {
    log.fail("HOOP_ALGO=%s, but the communicator has %s", algo,
             hoop_algo_name(a));
    v = kError;
  }
  return v;
}

int rank_main(const Case &c, const hoop_unique_id_t &id, int rank,
              bool verbose) {
  RankLog log(rank);
  g_progress[rank] = Progress{};
  set_progress(rank, kInit);
  hoop_comm_t comm = nullptr;
  hoop_result_t res = hoop_comm_init_rank(&comm, c.nranks, &id, rank,
                                          nullptr);
  if (res != HOOP_SUCCESS) {
    log.fail("init: %s: %s", hoop_result_name(res), hoop_last_error());
    return res == HOOP_ERR_TIMEOUT ? kTimedOut : kError;
  }
  int worst = check_settings(log, comm, c, rank);
  for (size_t i = 0; i < c.calls.size() && worst < kError; i++) {
    const Call &call = c.calls[i];
    std::string what = "call " + std::to_string(i) + " " + call_text(call);
    set_progress(rank, (int)i);
    Stamp stamp{rank, i};
    Verdict v = kOk;
    switch (call.kind) {
    case Kind::Barrier:
      stamp.enter();
      res = hoop_barrier(comm);
      stamp.leave();
      v = res == HOOP_SUCCESS ? kOk : failed_call(log, comm, what, res);
      break;
    case Kind::Coll:
      v = run_coll(log, comm, rank, c.nranks, call, call_seed(c, i), what,
                   stamp);
      break;
    case Kind::SendRecv:
      v = run_sendrecv(log, comm, rank, call, call_seed(c, i), what, stamp);
      break;
    }
    worst = std::max<int>(worst, v);
    if (verbose)
      fprintf(stderr, "[rank %d] %s: %.1f ms\n", rank, what.c_str(),
              stamp.seconds() * 1e3);
  }
  if (worst < kError)
    set_progress(rank, kDone);
  hoop_comm_destroy(comm);
  return worst;
}

// Everything the ranks write to stderr goes to a file while they run, to
// be shown with the case that failed rather than mixed into the list.
class CapturedStderr {
 public:
  CapturedStderr() {
    fflush(stderr);
    saved_ = dup(2);
    file_ = tmpfile();
    if (file_ != nullptr)
      dup2(fileno(file_), 2);
  }
  std::string finish() {
    fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    std::string text;
    if (file_ == nullptr)
      return text;
    rewind(file_);
    char buf[4096];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, file_)) > 0)
      text.append(buf, got);
    fclose(file_);
    return text;
  }

 private:
  int saved_;
  FILE *file_;
};

struct Outcome {
  bool ok;
  std::string verdict; // "ok", "hang: ...", "wrong", "error", "crash: ..."
  std::string ranks_stderr;
  double seconds;
};

void apply_env(const Case &c) {
  for (const std::string &name : hoop_param_names())
    unsetenv(name.c_str());
  for (const auto &e : c.env)
    setenv(e.first.c_str(), e.second.c_str(), 1);
}

// A call that kept moving, so hoop's timeout never fired, yet took far
// longer than any call of these sizes needs: a stall that something
// other than the data (a kernel timer, a sleep) ended.  Timed from the
// last rank's arrival, since the first ones wait for the others to check
// the previous call's output.
std::string slow_call(const Case &c) {
  int slowest = -1;
  double slowest_s = 0;
  for (size_t i = 0; i < c.calls.size(); i++) {
    double in = 0, out = 0;
    for (int r = 0; r < c.nranks; r++) {
      in = std::max(in, g_progress[r].entered[i]);
      out = std::max(out, g_progress[r].left[i]);
    }
    if (out - in > slowest_s) {
      slowest = (int)i;
      slowest_s = out - in;
    }
  }
  if (slowest_s <= kSlowCallS)
    return "ok";
  char text[128];
  snprintf(text, sizeof text,
           "slow: call %d took %.1f s after the last rank came", slowest,
           slowest_s);
  return text;
}

Outcome run_case(const Case &c, bool verbose) {
  Outcome o{false, "", "", 0};
  // The parent reads no setting after its first id, and each forked rank
  // reads the environment afresh (param.h), so setting it here reaches
  // the ranks; check_settings() holds them to it.
  apply_env(c);
  hoop_unique_id_t id;
  if (hoop_get_unique_id(&id) != HOOP_SUCCESS) {
    o.verdict = std::string("error: hoop_get_unique_id: ") +
                hoop_last_error();
    return o;
  }
  // A replayed line may shorten hoop's timeout, to cut a hang down fast.
  int kill_after_s =
      (int)(c.get_size("HOOP_TIMEOUT_MS", 300000) / 1000) + kKillMarginS;
  CapturedStderr captured;
  RunResult r = fork_ranks(
      c.nranks, [&](int rank) { return rank_main(c, id, rank, verbose); },
      kill_after_s);
  o.ranks_stderr = captured.finish();
  // Rank 0 adopted the listener; the parent's copy would pile up, one per
  // case.
  hoop_unique_id_release(&id);
  o.seconds = r.seconds;
  int worst = 0, signal = 0;
  for (int code : r.exit_codes) {
    if (code > 128)
      signal = code - 128;
    else if (code > 0)
      worst = std::max(worst, code);
  }
  if (r.timed_out)
    o.verdict = "hang: ranks killed after " + std::to_string(kill_after_s) +
                " s, hoop's timeout did not end the call (" +
                progress_text(c.nranks) + ")";
  else if (signal != 0)
    o.verdict = "crash: a rank died of signal " + std::to_string(signal);
  else if (worst == kTimedOut)
    o.verdict = "hang: HOOP_ERR_TIMEOUT (" + progress_text(c.nranks) + ")";
  else if (worst == kError)
    o.verdict = "error (" + progress_text(c.nranks) + ")";
  else if (worst == kWrong)
    o.verdict = "wrong result";
  else if (worst != 0)
    o.verdict = "error: a rank exited " + std::to_string(worst);
  else
    o.verdict = slow_call(c);
  o.ok = o.verdict == "ok";
  return o;
}

// The first failure message of the ranks, to name the failure in the
// summary.
std::string first_failure(const std::string &text) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.compare(0, 6, "[rank ") == 0 &&
        line.find(" ms") == std::string::npos)
      return line;
  return "";
}

void usage() {
  fprintf(stderr,
          "usage: hoop-settings-fuzz [--seconds N] [--seed S] [--cases K]\n"
          "                          [--replay \"<case line>\"] "
          "[--verbose]\n"
          "  runs random cases for N seconds (default 60) or K cases;\n"
          "  without --seed the seed comes from the clock\n");
}

} // namespace

int main(int argc, char **argv) {
  double seconds = 60;
  long long cases = 0;
  bool seeded = false, verbose = false;
  uint64_t seed = 0;
  const char *replay = nullptr;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    bool has_value = i + 1 < argc;
    if (a == "--seconds" && has_value)
      seconds = atof(argv[++i]);
    else if (a == "--cases" && has_value)
      cases = atoll(argv[++i]);
    else if (a == "--seed" && has_value) {
      seed = strtoull(argv[++i], nullptr, 0);
      seeded = true;
    } else if (a == "--replay" && has_value)
      replay = argv[++i];
    else if (a == "--verbose")
      verbose = true;
    else {
      usage();
      return 2;
    }
  }
  if (!every_param_covered())
    return 2;
  g_progress = (Progress *)mmap(nullptr, kMaxRanks * sizeof(Progress),
                                PROT_READ | PROT_WRITE,
                                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_progress == MAP_FAILED) {
    perror("mmap");
    return 2;
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);

  if (replay != nullptr) {
    Case c;
    std::string why;
    if (!parse_case(replay, &c, &why)) {
      fprintf(stderr, "--replay: %s\n", why.c_str());
      return 2;
    }
    printf("%s\n", case_text(c).c_str());
    Outcome o = run_case(c, verbose);
    printf("  %s (%.2f s)\n", o.verdict.c_str(), o.seconds);
    if (!o.ok || verbose)
      fputs(o.ranks_stderr.c_str(), stdout);
    return o.ok ? 0 : 1;
  }

  if (!seeded)
    seed = (uint64_t)std::chrono::system_clock::now().time_since_epoch()
               .count();
  printf("hoop-settings-fuzz: seed %" PRIu64 "; replay a case with "
         "--replay \"<its line>\"\n", seed);
  Clock::time_point start = Clock::now();
  std::vector<std::pair<std::string, std::string>> failures;
  long long ran = 0;
  for (;; ran++) {
    if (cases > 0 ? ran >= cases : seconds_since(start) >= seconds)
      break;
    Case c = draw_case(mix(seed ^ mix((uint64_t)ran)));
    std::string line = case_text(c);
    printf("case %lld: %s\n", ran, line.c_str());
    Outcome o = run_case(c, verbose);
    printf("  %s (%.2f s)\n", o.verdict.c_str(), o.seconds);
    if (!o.ok || verbose)
      fputs(o.ranks_stderr.c_str(), stdout);
    if (!o.ok)
      failures.emplace_back(o.verdict + ": " + first_failure(o.ranks_stderr),
                            line);
  }
  printf("hoop-settings-fuzz: %lld cases, %zu failed (seed %" PRIu64 ")\n",
         ran, failures.size(), seed);
  for (const auto &f : failures)
    printf("FAILED %s\n  --replay \"%s\"\n", f.first.c_str(),
           f.second.c_str());
  return failures.empty() ? 0 : 1;
}
