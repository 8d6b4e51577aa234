// The Python module hoop_torch._C: makes the backend for torch.distributed
// (hoop_torch/__init__.py registers it under the name "hoop") and reads a
// group's hoop counters.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "backend.hpp"

namespace py = pybind11;

namespace {

using hoop_torch::HoopBackend;

const char* collective_name(int coll) {
  switch (coll) {
    case HOOP_COLL_ALLREDUCE:
      return "allreduce";
    case HOOP_COLL_REDUCE_SCATTER:
      return "reduce_scatter";
    case HOOP_COLL_ALLGATHER:
      return "allgather";
    case HOOP_COLL_BROADCAST:
      return "broadcast";
    case HOOP_COLL_REDUCE:
      return "reduce";
    case HOOP_COLL_BARRIER:
      return "barrier";
    case HOOP_COLL_SENDRECV:
      return "sendrecv";
    case HOOP_COLL_ALLTOALL:
      return "alltoall";
    default:
      return "unknown";
  }
}

// hoop_comm_get_stats as a dict: the bytes sent and received, and per
// (collective, algorithm) that ran, its calls, seconds, seconds waiting for
// late ranks and bytes.
py::dict stats(const HoopBackend& backend) {
  hoop_comm_t comm = backend.comm();
  hoop_stats_t s = HOOP_STATS_INIT;
  hoop_result_t r;
  {
    py::gil_scoped_release unlocked;  // waits for queued device calls
    r = hoop_comm_get_stats(comm, &s);
  }
  if (r != HOOP_SUCCESS)
    hoop_torch::throw_hoop_error(comm, r, "hoop_comm_get_stats");
  py::dict calls;
  for (int coll = 0; coll < HOOP_COLL_COUNT; coll++)
    for (int algo = 0; algo < HOOP_ALGO_COUNT; algo++) {
      const hoop_coll_stats_t& c = s.by_coll[coll][algo];
      if (c.calls == 0)
        continue;
      py::dict entry;
      entry["calls"] = c.calls;
      entry["seconds"] = c.time_ns * 1e-9;
      entry["wait_seconds"] = c.wait_ns * 1e-9;
      entry["bytes_sent"] = c.bytes_sent;
      entry["bytes_received"] = c.bytes_received;
      calls[py::make_tuple(collective_name(coll),
                           hoop_algo_name(static_cast<hoop_algo_t>(algo)))] =
          entry;
    }
  py::dict out;
  out["bytes_sent"] = s.bytes_sent;
  out["bytes_received"] = s.bytes_received;
  out["bytes_sent_off_host"] = s.bytes_sent_off_host;
  out["bytes_received_off_host"] = s.bytes_received_off_host;
  out["peers_connected"] = s.peers_connected;
  out["calls"] = calls;
  return out;
}

// A communicator of the survivors (or of members and newcomers), held for
// Python between the calls of hoop_torch.elastic as an integer.
hoop_comm_t comm_of(uintptr_t handle) {
  return reinterpret_cast<hoop_comm_t>(handle);
}

// hoop_comm_shrink on the group's communicator: (new rank, new size, old
// ranks of the survivors, their communicator's handle).
py::tuple shrink(const HoopBackend& backend) {
  hoop_comm_t comm = backend.comm();
  int size = 0;
  hoop_comm_size(comm, &size);
  std::vector<int> old_ranks(static_cast<size_t>(size), -1);
  hoop_comm_t next = nullptr;
  hoop_result_t r;
  {
    py::gil_scoped_release unlocked;
    r = hoop_comm_shrink(comm, nullptr, &next, old_ranks.data());
  }
  if (r != HOOP_SUCCESS)
    hoop_torch::throw_hoop_error(comm, r, "hoop_comm_shrink");
  int rank = 0;
  hoop_comm_rank(next, &rank);
  hoop_comm_size(next, &size);
  old_ranks.resize(static_cast<size_t>(size));
  return py::make_tuple(rank, size, old_ranks,
                        reinterpret_cast<uintptr_t>(next));
}

// hoop_comm_grow on the group's communicator: (newcomers let in, then, when
// there were some, the members' new rank and size and the handle of the
// grown communicator; else the group's own rank and size and handle 0).
py::tuple grow(const HoopBackend& backend) {
  hoop_comm_t comm = backend.comm();
  hoop_comm_t next = nullptr;
  int joined = 0;
  hoop_result_t r;
  {
    py::gil_scoped_release unlocked;
    r = hoop_comm_grow(comm, nullptr, &next, &joined);
  }
  if (r != HOOP_SUCCESS)
    hoop_torch::throw_hoop_error(comm, r, "hoop_comm_grow");
  hoop_comm_t now = next != nullptr ? next : comm;
  int rank = 0, size = 0;
  hoop_comm_rank(now, &rank);
  hoop_comm_size(now, &size);
  return py::make_tuple(joined, rank, size, reinterpret_cast<uintptr_t>(next));
}

// hoop_comm_join from this process: (rank, size, handle of the job's
// communicator).
py::tuple join(int timeout_ms) {
  hoop_config_t config = HOOP_CONFIG_INIT;
  config.timeout_ms = timeout_ms;
  hoop_comm_t comm = nullptr;
  hoop_result_t r;
  {
    py::gil_scoped_release unlocked;
    r = hoop_comm_join(&comm, &config);
  }
  if (r != HOOP_SUCCESS)
    hoop_torch::throw_hoop_error(nullptr, r, "hoop_comm_join");
  int rank = 0, size = 0;
  hoop_comm_rank(comm, &rank);
  hoop_comm_size(comm, &size);
  return py::make_tuple(rank, size, reinterpret_cast<uintptr_t>(comm));
}

// Rank 0's text to every rank of a survivors' (or grown) communicator.
std::string share_text(uintptr_t handle, const std::string& text) {
  hoop_comm_t comm = comm_of(handle);
  char buf[256] = {0};
  text.copy(buf, sizeof buf - 1);
  hoop_result_t r;
  {
    py::gil_scoped_release unlocked;
    r = hoop_broadcast(comm, buf, buf, sizeof buf, HOOP_U8, 0, nullptr);
  }
  if (r != HOOP_SUCCESS)
    hoop_torch::throw_hoop_error(comm, r, "hoop_broadcast");
  return std::string(buf);
}

// Where rank 0 of a survivors' or grown communicator listens (an IP
// address), for the store that their new process group meets on.
std::string listen_address(uintptr_t handle) {
  hoop_comm_t comm = comm_of(handle);
  hoop_rank_info_t info = HOOP_RANK_INFO_INIT;
  hoop_result_t r = hoop_comm_rank_info(comm, 0, &info);
  if (r != HOOP_SUCCESS)
    hoop_torch::throw_hoop_error(comm, r, "hoop_comm_rank_info");
  return std::string(info.address);
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "hoop as a torch.distributed backend (import hoop_torch)";
  py::class_<HoopBackend, hoop_torch::BackendBase,
             c10::intrusive_ptr<HoopBackend>>(m, "ProcessGroupHoop")
      .def("stats", &stats,
           "hoop's counters of this group's collectives (not its "
           "point-to-point messages, which have communicators of their "
           "own): bytes_sent, bytes_received, and calls[(collective, "
           "algorithm)] = {calls, seconds, wait_seconds, bytes_sent, "
           "bytes_received}");
  m.def(
      "create_backend",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         std::chrono::duration<float> timeout) {
        return c10::make_intrusive<HoopBackend>(
            store, rank, size,
            std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
      py::call_guard<py::gil_scoped_release>(),
      "Joins the group's hoop communicator (rank 0 puts its unique id in "
      "the store); torch.distributed calls it with the group's store, "
      "rank, size and timeout");
  m.def("shrink", &shrink,
        "After a failure: the survivors agree on who is left "
        "(hoop_comm_shrink on the group's communicator); returns (rank, "
        "size, old_ranks, handle of their communicator)");
  m.def("grow", &grow,
        "At a step boundary, every member: lets in the processes waiting "
        "to join (hoop_comm_grow on the group's communicator); returns "
        "(joined, rank, size, handle of the grown communicator or 0)");
  m.def("join", &join, py::arg("timeout_ms"),
        "In a replacement: joins the running job (hoop_comm_join) once its "
        "members grow; returns (rank, size, handle of its communicator)");
  m.def("share_text", &share_text,
        "Rank 0's text (up to 255 bytes) to every rank of a survivors' or "
        "grown communicator");
  m.def("listen_address", &listen_address,
        "The IP address rank 0 of a survivors' or grown communicator "
        "listens on");
  m.def(
      "destroy",
      [](uintptr_t handle) { hoop_comm_destroy(comm_of(handle)); },
      "Destroys a survivors' or grown communicator");
  m.attr("hoop_version") = hoop_version_string();
  m.attr("cuda") = static_cast<bool>(HOOP_TORCH_CUDA);
}
