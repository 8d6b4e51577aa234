// The fake verbs table (fake_verbs.h): queue pairs, memory regions and
// completion queues as plain memory of one process.
//
// Locking: g_lock guards the registry and everything a post changes on
// either end of a connection (who is paired with whom, error states,
// posted receives, writes not yet placed), so that a write moves between
// two endpoints under one lock.  Each endpoint's own mutex guards what
// its owner reads without g_lock: the completion queue, the counts of
// unpolled work requests, the arming of the completion channel and the
// asynchronous events.  The order is g_lock, then one endpoint's mutex.
// Bytes are copied before the completion that announces them is pushed
// under the receiver's mutex, so a poller that sees it sees them.
#include "fake_verbs.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>

namespace {

const char kDevice[] = "fake0";
const int kPort = 1;
const uint8_t kMtu = 5; // 4096 bytes
const uint16_t kLid = 1;
// Link-local subnet prefix fe80::/64 and a made-up port GUID.
const uint8_t kGid[16] = {0xfe, 0x80, 0, 0,    0,    0,    0, 0,
                          0x02, 0x00, 0, 0xff, 0xfe, 0x00, 0, 0x01};
// Real devices allow some thousands of work requests per queue.
const int kMaxDepth = 16384;
const char kPortDown[] = "port 1 of fake0 went down";

// The verbs specification's completion statuses that the fake produces.
enum WcStatus {
  kSuccess = 0,
  kFlushed = 5,
  kRemoteAccess = 10,
  kRetryExceeded = 12,
};

const char *status_text(int status) {
  switch (status) {
  case kFlushed: return "work request flushed";
  case kRemoteAccess: return "remote access error";
  case kRetryExceeded: return "retry counter exceeded";
  default: return "success";
  }
}

// An RDMA write posted and not yet placed at the peer: it waits there
// while the peer is not yet connected or, with immediate data, has no
// receive posted.  The sender keeps src valid until the completion.
struct Write {
  hoop_ib_ep *from;
  uint64_t wr_id;
  const void *src;
  size_t len;
  uint64_t raddr;
  uint32_t rkey;
  bool with_imm;
  uint32_t imm;
};

struct Region {
  hoop_ib_ep *ep; // nullptr once its endpoint closed without deregistering
  uintptr_t addr;
  size_t len;
  bool remote_write;
  uint32_t lkey, rkey;
};

bool inside(const Region *r, uint64_t addr, size_t len) {
  return addr >= r->addr && len <= r->len && addr - r->addr <= r->len - len;
}

} // namespace

struct hoop_ib_ep {
  uint32_t qpn = 0;
  int rank = -1; // fake_verbs_tag_thread's tag
  int send_depth = 0, recv_depth = 0;
  int event_fd = -1, async_fd = -1;

  // Under g_lock.
  uint32_t peer_qpn = 0; // 0: INIT, not yet connected
  bool error = false;
  bool dead = false;
  std::deque<uint64_t> recvs; // posted and not yet consumed
  std::deque<Write> incoming; // from the peer, not yet placed

  // Under mu.
  std::mutex mu;
  std::deque<hoop_ib_wc> cq;
  int sends_unpolled = 0; // posted, completion not yet polled
  int recvs_unpolled = 0;
  bool armed = false;
  std::deque<std::string> events;
};

namespace {

std::mutex g_lock;
std::map<uint32_t, hoop_ib_ep *> g_eps;
std::map<uint32_t, Region *> g_lkeys, g_rkeys;
uint32_t g_next_qpn = 0x1c4; // real QPNs are seldom small
uint32_t g_next_key = 0x2a01;
// Once down, the port moves nothing: a write stays in its retries, which
// on hardware outlast the async event by seconds, so it never completes.
bool g_port_down = false;
thread_local int t_rank = -1;

void set_why(char *why, size_t why_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void set_why(char *why, size_t why_len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, why_len, fmt, ap);
  va_end(ap);
}

hoop_ib_ep *find_ep(uint32_t qpn) {
  auto it = g_eps.find(qpn);
  return it == g_eps.end() ? nullptr : it->second;
}

// A host that died completes nothing more.
void push_wc(hoop_ib_ep *ep, uint64_t wr_id, bool recv, int status,
             uint32_t imm) {
  if (ep->dead)
    return;
  hoop_ib_wc wc{};
  wc.wr_id = wr_id;
  wc.ok = status == kSuccess;
  wc.flushed = status == kFlushed;
  wc.recv = recv;
  wc.imm = imm;
  if (status != kSuccess)
    snprintf(wc.status, sizeof wc.status, "%s (%d)", status_text(status),
             status);
  std::lock_guard<std::mutex> hold(ep->mu);
  ep->cq.push_back(wc);
  if (ep->armed) {
    ep->armed = false;
    eventfd_write(ep->event_fd, 1);
  }
}

void fail_qp(hoop_ib_ep *ep);

// A write that cannot be placed: the first of a queue pair's failures
// carries the cause and puts it in error; once in error, the rest of its
// send queue is flushed.
void fail_write(const Write &w, int status) {
  push_wc(w.from, w.wr_id, false, w.from->error ? kFlushed : status, 0);
  fail_qp(w.from);
}

// The queue pair goes to the error state: what it had posted is flushed,
// and writes waiting at it go unanswered, which their senders learn as
// exhausted retries.
void fail_qp(hoop_ib_ep *ep) {
  if (ep->error)
    return;
  ep->error = true;
  for (uint64_t wr_id : ep->recvs)
    push_wc(ep, wr_id, true, kFlushed, 0);
  ep->recvs.clear();
  std::deque<Write> unanswered;
  unanswered.swap(ep->incoming);
  for (const Write &w : unanswered)
    fail_write(w, kRetryExceeded);
  for (auto &entry : g_eps) {
    std::deque<Write> &q = entry.second->incoming;
    for (const Write &w : q)
      if (w.from == ep)
        push_wc(ep, w.wr_id, false, kFlushed, 0);
    q.erase(std::remove_if(q.begin(), q.end(),
                           [ep](const Write &w) { return w.from == ep; }),
            q.end());
  }
}

void kill_locked(hoop_ib_ep *ep) {
  ep->dead = true;
  fail_qp(ep);
}

// Places the writes waiting at `ep`, in order, as far as it can.
void drain(hoop_ib_ep *ep) {
  while (!ep->incoming.empty() && ep->peer_qpn != 0 && !g_port_down) {
    Write w = ep->incoming.front();
    if (w.from->qpn != ep->peer_qpn) {
      // Joined to another queue pair, it drops these packets.
      ep->incoming.pop_front();
      fail_write(w, kRetryExceeded);
      continue;
    }
    if (w.with_imm && ep->recvs.empty())
      return; // receiver not ready: the sender retries
    ep->incoming.pop_front();
    if (w.len > 0) {
      auto it = g_rkeys.find(w.rkey);
      const Region *r = it == g_rkeys.end() ? nullptr : it->second;
      if (r == nullptr || r->ep != ep || !r->remote_write ||
          !inside(r, w.raddr, w.len)) {
        fail_write(w, kRemoteAccess);
        fail_qp(ep);
        return;
      }
      memcpy((void *)(uintptr_t)w.raddr, w.src, w.len);
    }
    if (w.with_imm) {
      uint64_t recv_id = ep->recvs.front();
      ep->recvs.pop_front();
      push_wc(ep, recv_id, true, kSuccess, w.imm);
    }
    push_wc(w.from, w.wr_id, false, kSuccess, 0);
  }
}

uint32_t new_qpn() {
  // 24 bits; 0 and 1 are the special queue pairs.
  while (g_next_qpn < 2 || g_next_qpn > 0xffffff || find_ep(g_next_qpn))
    g_next_qpn = g_next_qpn > 0xffffff ? 2 : g_next_qpn + 1;
  return g_next_qpn++;
}

void fake_close(hoop_ib_ep *ep) {
  if (ep == nullptr)
    return;
  {
    std::lock_guard<std::mutex> hold(g_lock);
    kill_locked(ep);
    g_eps.erase(ep->qpn);
    // Left registered they stay counted, so a test sees the leak.
    for (auto &entry : g_lkeys)
      if (entry.second->ep == ep)
        entry.second->ep = nullptr;
  }
  close(ep->event_fd);
  close(ep->async_fd);
  delete ep;
}

int fake_open(const hoop_ib_open *o, hoop_ib_ep **out, hoop_ib_local *local,
              char *why, size_t why_len) {
  *out = nullptr;
  if (strcmp(o->device, kDevice) != 0) {
    set_why(why, why_len, "ibv_open_device: no RDMA device named %s",
            o->device);
    return ENODEV;
  }
  if (o->port != kPort) {
    set_why(why, why_len, "ibv_query_port(%s, %d): Invalid argument",
            o->device, o->port);
    return EINVAL;
  }
  if (o->gid_index != 0) {
    set_why(why, why_len, "ibv_query_gid(%s, port %d, index %d): Invalid "
            "argument", o->device, o->port, o->gid_index);
    return EINVAL;
  }
  if (o->send_depth < 1 || o->send_depth > kMaxDepth || o->recv_depth < 1 ||
      o->recv_depth > kMaxDepth) {
    set_why(why, why_len, "ibv_create_qp: Invalid argument (send depth %d, "
            "receive depth %d; %s allows 1..%d)", o->send_depth,
            o->recv_depth, kDevice, kMaxDepth);
    return EINVAL;
  }
  hoop_ib_ep *ep = new hoop_ib_ep;
  ep->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ep->async_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (ep->event_fd < 0 || ep->async_fd < 0) {
    int err = errno;
    set_why(why, why_len, "ibv_create_comp_channel: %s", strerror(err));
    if (ep->event_fd >= 0)
      close(ep->event_fd);
    if (ep->async_fd >= 0)
      close(ep->async_fd);
    delete ep;
    return err;
  }
  ep->rank = t_rank;
  ep->send_depth = o->send_depth;
  ep->recv_depth = o->recv_depth;
  {
    std::lock_guard<std::mutex> hold(g_lock);
    ep->qpn = new_qpn();
    g_eps[ep->qpn] = ep;
  }
  *local = hoop_ib_local{};
  local->lid = kLid;
  local->mtu = kMtu;
  local->link_layer = HOOP_LINK_IB;
  local->qpn = ep->qpn;
  memcpy(local->gid, kGid, sizeof kGid);
  *out = ep;
  return 0;
}

int fake_reg_mr(hoop_ib_ep *ep, void *addr, size_t len, bool remote_write,
                hoop_ib_mr *mr, char *why, size_t why_len) {
  if (addr == nullptr || len == 0) {
    set_why(why, why_len, "ibv_reg_mr(%p, %zu bytes): Invalid argument",
            addr, len);
    return EINVAL;
  }
  std::lock_guard<std::mutex> hold(g_lock);
  Region *r = new Region{ep, (uintptr_t)addr, len, remote_write, g_next_key,
                         g_next_key + 1};
  g_next_key += 2;
  g_lkeys[r->lkey] = r;
  g_rkeys[r->rkey] = r;
  mr->handle = r;
  mr->lkey = r->lkey;
  mr->rkey = r->rkey;
  return 0;
}

void fake_dereg_mr(hoop_ib_ep *ep, hoop_ib_mr *mr) {
  if (mr->handle == nullptr)
    return;
  std::lock_guard<std::mutex> hold(g_lock);
  Region *r = (Region *)mr->handle;
  g_lkeys.erase(r->lkey);
  g_rkeys.erase(r->rkey);
  delete r;
  mr->handle = nullptr;
}

int fake_connect(hoop_ib_ep *ep, const hoop_ib_path *p, char *why,
                 size_t why_len) {
  std::lock_guard<std::mutex> hold(g_lock);
  const char *rtr = "ibv_modify_qp to RTR: Invalid argument";
  if (ep->error || ep->peer_qpn != 0) {
    set_why(why, why_len, "%s (the queue pair is %s, not INIT)", rtr,
            ep->error ? "in error" : "already connected");
    return EINVAL;
  }
  if (p->link_layer != HOOP_LINK_IB) {
    set_why(why, why_len, "%s (link layer %u, but %s port %d is "
            "InfiniBand)", rtr, p->link_layer, kDevice, kPort);
    return EINVAL;
  }
  if (p->mtu < HOOP_MTU_MIN || p->mtu > kMtu) {
    set_why(why, why_len, "%s (path MTU %u; the port's is %u)", rtr, p->mtu,
            kMtu);
    return EINVAL;
  }
  if (p->dlid == 0 || p->sgid_index != 0 || p->sl > 15) {
    set_why(why, why_len, "%s (DLID %u, source GID index %d, SL %d)", rtr,
            p->dlid, p->sgid_index, p->sl);
    return EINVAL;
  }
  hoop_ib_ep *dest = find_ep(p->dest_qpn);
  if (dest == nullptr || dest == ep) {
    set_why(why, why_len, "%s (no queue pair 0x%x to join on %s)", rtr,
            p->dest_qpn, kDevice);
    return EINVAL;
  }
  if (p->timeout < 1 || p->timeout > 31 || p->retry_cnt < 0 ||
      p->retry_cnt > 7) {
    set_why(why, why_len, "ibv_modify_qp to RTS: Invalid argument (timeout "
            "%d, retry count %d)", p->timeout, p->retry_cnt);
    return EINVAL;
  }
  ep->peer_qpn = p->dest_qpn;
  drain(ep);
  return 0;
}

int fake_post_write(hoop_ib_ep *ep, uint64_t wr_id, const void *src,
                    uint32_t lkey, size_t len, uint64_t raddr, uint32_t rkey,
                    bool with_imm, uint32_t imm, char *why, size_t why_len) {
  std::lock_guard<std::mutex> hold(g_lock);
  if (ep->peer_qpn == 0 && !ep->error) {
    set_why(why, why_len, "ibv_post_send: Invalid argument (the queue pair "
            "is in INIT, not RTS)");
    return EINVAL;
  }
  if (len > 0) {
    auto it = g_lkeys.find(lkey);
    if (it == g_lkeys.end() || it->second->ep != ep ||
        !inside(it->second, (uintptr_t)src, len)) {
      set_why(why, why_len, "ibv_post_send: Invalid argument ([%p, +%zu) "
              "is not inside a region of lkey 0x%x)", src, len, lkey);
      return EINVAL;
    }
  }
  {
    std::lock_guard<std::mutex> mine(ep->mu);
    if (ep->sends_unpolled >= ep->send_depth) {
      set_why(why, why_len, "ibv_post_send: Cannot allocate memory (the "
              "send queue holds %d work requests)", ep->send_depth);
      return ENOMEM;
    }
    ep->sends_unpolled++;
  }
  Write w{ep, wr_id, src, len, raddr, rkey, with_imm, imm};
  if (ep->error) {
    push_wc(ep, wr_id, false, kFlushed, 0);
    return 0;
  }
  hoop_ib_ep *peer = find_ep(ep->peer_qpn);
  if (peer == nullptr || peer->error) {
    fail_write(w, kRetryExceeded);
    return 0;
  }
  peer->incoming.push_back(w);
  drain(peer);
  return 0;
}

int fake_post_recv(hoop_ib_ep *ep, uint64_t wr_id, char *why,
                   size_t why_len) {
  std::lock_guard<std::mutex> hold(g_lock);
  {
    std::lock_guard<std::mutex> mine(ep->mu);
    if (ep->recvs_unpolled >= ep->recv_depth) {
      set_why(why, why_len, "ibv_post_recv: Cannot allocate memory (the "
              "receive queue holds %d work requests)", ep->recv_depth);
      return ENOMEM;
    }
    ep->recvs_unpolled++;
  }
  if (ep->error) {
    push_wc(ep, wr_id, true, kFlushed, 0);
    return 0;
  }
  ep->recvs.push_back(wr_id);
  drain(ep);
  return 0;
}

int fake_poll(hoop_ib_ep *ep, hoop_ib_wc *wc, int max) {
  if (max < 0)
    return -EINVAL;
  std::lock_guard<std::mutex> mine(ep->mu);
  int n = 0;
  while (n < max && !ep->cq.empty()) {
    wc[n] = ep->cq.front();
    ep->cq.pop_front();
    if (wc[n].recv)
      ep->recvs_unpolled--;
    else
      ep->sends_unpolled--;
    n++;
  }
  return n;
}

int fake_notify(hoop_ib_ep *ep) {
  std::lock_guard<std::mutex> mine(ep->mu);
  ep->armed = true;
  return 0;
}

int fake_event_fd(hoop_ib_ep *ep) { return ep->event_fd; }

void fake_consume(hoop_ib_ep *ep) {
  eventfd_t events;
  eventfd_read(ep->event_fd, &events);
}

int fake_async_fd(hoop_ib_ep *ep) { return ep->async_fd; }

int fake_async_take(hoop_ib_ep *ep, char *what, size_t what_len) {
  std::lock_guard<std::mutex> mine(ep->mu);
  if (ep->events.empty())
    return 0;
  snprintf(what, what_len, "%s", ep->events.front().c_str());
  ep->events.pop_front();
  if (ep->events.empty()) {
    eventfd_t events;
    eventfd_read(ep->async_fd, &events);
  }
  return 1;
}

const hoop_ib_verbs kFakeVerbs = {
    .name = "fake",
    .open = fake_open,
    .reg_mr = fake_reg_mr,
    .dereg_mr = fake_dereg_mr,
    .connect = fake_connect,
    .post_write = fake_post_write,
    .post_recv = fake_post_recv,
    .poll = fake_poll,
    .notify = fake_notify,
    .event_fd = fake_event_fd,
    .consume = fake_consume,
    .async_fd = fake_async_fd,
    .async_take = fake_async_take,
    .close = fake_close,
};

} // namespace

namespace hooptest {

const struct hoop_ib_verbs *fake_verbs() { return &kFakeVerbs; }

bool fake_discover(struct hoop_rdma_local_port **ports, int *nports,
                   char *why, size_t why_len) {
  auto *p = (hoop_rdma_local_port *)calloc(1, sizeof(hoop_rdma_local_port));
  if (p == nullptr) {
    snprintf(why, why_len, "fake discovery: out of memory");
    return false;
  }
  snprintf(p->device, sizeof p->device, "%s", kDevice);
  p->port = kPort;
  p->state = HOOP_PORT_ACTIVE;
  p->link_layer = HOOP_LINK_IB;
  p->mtu = kMtu;
  p->lid = kLid;
  p->ngids = 1;
  memcpy(p->gids[0].raw, kGid, sizeof kGid);
  p->gids[0].index = 0;
  p->gids[0].type = HOOP_GID_IB;
  *ports = p;
  *nports = 1;
  return true;
}

void fake_verbs_tag_thread(int rank) { t_rank = rank; }

void fake_verbs_kill(uint32_t qpn) {
  std::lock_guard<std::mutex> hold(g_lock);
  if (hoop_ib_ep *ep = find_ep(qpn))
    kill_locked(ep);
}

void fake_verbs_kill_rank(int rank) {
  std::lock_guard<std::mutex> hold(g_lock);
  for (auto &entry : g_eps)
    if (entry.second->rank == rank)
      kill_locked(entry.second);
}

void fake_verbs_port_down() {
  std::lock_guard<std::mutex> hold(g_lock);
  g_port_down = true;
  for (auto &entry : g_eps) {
    hoop_ib_ep *ep = entry.second;
    std::lock_guard<std::mutex> mine(ep->mu);
    ep->events.push_back(kPortDown);
    eventfd_write(ep->async_fd, 1);
  }
}

size_t fake_verbs_endpoints() {
  std::lock_guard<std::mutex> hold(g_lock);
  return g_eps.size();
}

size_t fake_verbs_regions() {
  std::lock_guard<std::mutex> hold(g_lock);
  return g_lkeys.size();
}

} // namespace hooptest
