// An in-process fake of the verbs table (src/transport/ib_verbs.h), so
// that ib's data path runs in CI, where no RDMA device exists.  Ranks are
// threads of one process; every endpoint is a reliable-connected queue
// pair on the one port "fake0":1 that fake_discover publishes, and an
// RDMA write is a memcpy into the peer's registered memory.
//
// What it keeps of real hardware, because the transport must cope with
// it: completions arrive in order per queue pair, and a poller that sees
// one sees the bytes; a write with immediate waits (receiver not ready)
// until the peer posts a receive; a completion channel signals only the
// first completion after notify(), never ones already queued; a bad
// remote key puts both queue pairs in error, flushing what they had
// posted; a write to a peer whose host died (fake_verbs_kill), that
// closed, or that is in error fails with "retry counter exceeded"; a
// full send or receive queue refuses the post with ENOMEM; a port that
// went down moves nothing more.  What it skips: retry timing (a write to
// a dead peer fails at once), packet loss, and memory ordering beyond
// what its locks give.
#ifndef HOOP_TESTS_FAKE_VERBS_H
#define HOOP_TESTS_FAKE_VERBS_H

#include <cstddef>
#include <cstdint>

extern "C" {
#include "transport/rdma.h"
#include "transport/ib_verbs.h"
}

namespace hooptest {

// The table; the same one every call.
const struct hoop_ib_verbs *fake_verbs();

// A discovery for hoop__rdma_set_discover: the one ACTIVE InfiniBand port
// fake0:1 that every rank of the process shares.
bool fake_discover(struct hoop_rdma_local_port **ports, int *nports,
                   char *why, size_t why_len);

// The endpoints this thread opens from now on belong to `rank`, for
// fake_verbs_kill_rank: hoop opens them in the thread that calls it.
void fake_verbs_tag_thread(int rank);

// The endpoint's host dies: it delivers nothing more, completes nothing
// more, and writes to it fail on the writer with "retry counter
// exceeded".  An unknown qpn is ignored.
void fake_verbs_kill(uint32_t qpn);

// fake_verbs_kill for every endpoint that `rank`'s thread opened.
void fake_verbs_kill_rank(int rank);

// Every endpoint gets an asynchronous event, "port 1 of fake0 went down",
// and from then on no write is placed or completes: each stays in its
// retries, as on hardware for the seconds after the event.  For good:
// call it in a process of its own.
void fake_verbs_port_down();

// Endpoints and memory regions not yet closed or deregistered: leaks.
size_t fake_verbs_endpoints();
size_t fake_verbs_regions();

} // namespace hooptest

#endif // HOOP_TESTS_FAKE_VERBS_H
