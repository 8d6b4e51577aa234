// Two ends of one transport connection in one process, joined over a
// socketpair in place of the dial and accept that core/connect.c makes:
// for tests that drive a transport's operations in a chosen order, as
// the engine of two ranks would interleave them.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

extern "C" {
#include "core/error.h"
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

// Connects rank 0 and rank 1 through `ops`; `port` (may be null) is what
// both ranks published for RDMA.
inline void connect_pair(const hoop_transport_ops &ops, ConnPair &pair,
                         const hoop_rdma_port *port = nullptr) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    pair.error = "socketpair failed";
    return;
  }
  auto setup_for = [&](int rank, int *fd) {
    hoop_conn_setup s{};
    s.rank = rank;
    s.peer = 1 - rank;
    s.comm_id = 0x7e57;
    s.deadline = hoop__now_ms() + 10000;
    s.slice_bytes = 256 * 1024;
    s.peer_desc = rank == 0 ? "rank 1 (the test's)" : "rank 0 (the test's)";
    s.self_port = port;
    s.peer_port = port;
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

} // namespace hooptest
