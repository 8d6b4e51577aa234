// Two ends of one transport connection in one process, joined over a
// socketpair in place of the dial and accept that core/connect.c makes:
// for tests that drive a transport's operations in a chosen order, as
// the engine of two ranks would interleave them.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "core/error.h"
#include "transport/ib.h"
#include "transport/transport.h"
}

namespace hooptest {

struct ConnPair {
  hoop_conn *lower = nullptr; // rank 0
  hoop_conn *higher = nullptr; // rank 1
  std::string error;          // empty when both connected

  ~ConnPair() {
    for (hoop_conn *c : {lower, higher})
      if (c != nullptr)
        c->ops->close(c);
  }
};

// Connects rank 0 and rank 1 through `ops`; `port` (may be null) is the
// RDMA port each rank published for ib.
inline void connect_pair(const hoop_transport_ops &ops, ConnPair &pair,
                         const hoop_rdma_port *port = nullptr) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    pair.error = "socketpair failed";
    return;
  }
  uint8_t ib_blob[HOOP_BLOB_BYTES];
  size_t ib_len = port != nullptr
                      ? hoop__ib_blob_encode(port, 1, ib_blob, sizeof ib_blob)
                      : 0;
  auto setup_for = [&](int rank, int *fd) {
    hoop_conn_setup s{};
    s.rank = rank;
    s.peer = 1 - rank;
    s.comm_id = 0x7e57;
    s.deadline = hoop__now_ms() + 10000;
    s.slice_bytes = 256 * 1024;
    s.peer_desc = rank == 0 ? "rank 1 (the test's)" : "rank 0 (the test's)";
    s.self.blob = ib_blob;
    s.self.len = ib_len;
    s.open_socket = [](void *ctx, int *out) {
      *out = *(int *)ctx;
      return HOOP_SUCCESS;
    };
    s.ctx = fd;
    return s;
  };
  hoop_result_t lower_res = HOOP_SUCCESS;
  std::string lower_error;
  std::thread lower([&] {
    hoop_conn_setup s = setup_for(0, &sv[0]);
    lower_res = ops.connect(&s, &pair.lower);
    if (lower_res != HOOP_SUCCESS)
      lower_error = hoop_last_error();
  });
  hoop_conn_setup s = setup_for(1, &sv[1]);
  hoop_result_t res = ops.connect(&s, &pair.higher);
  if (res != HOOP_SUCCESS)
    pair.error = hoop_last_error();
  lower.join();
  if (lower_res != HOOP_SUCCESS)
    pair.error = lower_error;
}

// The engine arms a connection's receive link and then its send link
// before it sleeps.  Here news for the receive link (64 bytes from the
// peer) arrives between the two, while the send link has to wait (its
// ring is full): the send link's arm must say "ready", or the engine
// sleeps on bytes it has until poll's cap.  Sets *ready to what it said.
inline void arm_both_links_in_turn(const ConnPair &pair, bool *ready) {
  hoop_conn *a = pair.lower, *b = pair.higher;
  *ready = false;
  std::vector<char> bytes(1 << 20, 1);
  for (size_t sent = 1; sent > 0;) {
    iovec iov = {bytes.data(), bytes.size()};
    ASSERT_EQ(a->ops->send(a, &iov, 1, &sent), HOOP_SUCCESS)
        << hoop_last_error();
  }
  pollfd pfd;
  bool recv_ready = true;
  ASSERT_EQ(a->ops->arm(a, 0, &pfd, &recv_ready), HOOP_SUCCESS);
  ASSERT_FALSE(recv_ready) << "nothing was sent to rank 0 yet";
  iovec one = {bytes.data(), 64};
  size_t sent = 0;
  ASSERT_EQ(b->ops->send(b, &one, 1, &sent), HOOP_SUCCESS);
  ASSERT_EQ(sent, 64u);
  ASSERT_EQ(a->ops->arm(a, 1, &pfd, ready), HOOP_SUCCESS);
}

} // namespace hooptest
