// The "hoop" backend of torch.distributed: every call of a process group
// made with backend="hoop" lands here and runs through libhoop's public
// API (include/hoop.h) only.
//
// Collectives run in call order on one communicator, the group's main
// lane.  Point-to-point messages go through a lane of their own per peer
// and direction (a communicator of two ranks, made on first use through
// the group's store), so that, as with gloo, a send waits only for its
// receive: hoop matches the messages of one call or group between two
// ranks as a whole, and two ranks that both send first would otherwise
// wait on each other.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "lane.hpp"

namespace hoop_torch {

class HoopBackend : public BackendBase {
 public:
  // Joins the group: rank 0 makes hoop's unique id and puts it in `store`
  // (a store of this group alone, as torch.distributed passes it); the
  // others read it there.  `timeout` becomes hoop's timeout.
  HoopBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
              int size, std::chrono::milliseconds timeout);
  ~HoopBackend() override;

  const std::string getBackendName() const override { return "hoop"; }

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts) override;
#if HOOP_TORCH_AT_LEAST(2, 1)
  // From 2.1 PyTorch hands sparse tensors here; allreduce takes them.
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts) override {
    return allreduce(tensors, opts);
  }
#endif
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output, at::Tensor& input,
      std::vector<int64_t>& output_splits,
      std::vector<int64_t>& input_splits,
      const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors,
                                      int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors,
                                      int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts) override;

  // The collectives this group has started, the same on every rank while
  // they agree: TORCH_DISTRIBUTED_DEBUG=DETAIL compares it across ranks
  // (PyTorch 2.x wraps third-party backends for that, too).
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return collectives_; }

#if HOOP_TORCH_AT_LEAST(2, 1)
  // Between the two, each call's Work is also kept, and endCoalescing
  // returns one Work for them all, which torch.distributed hands back in
  // their place: batch_isend_irecv on CUDA tensors, _coalescing_manager.
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
#endif

  // The collectives' communicator, for the queries (counters, topology).
  hoop_comm_t comm() const { return main_->comm(); }

 private:
  // Queues `body` on `lane`, or, for a collective on CUDA tensors, runs it
  // now on the caller's stream (hoop queues it there and returns).
  c10::intrusive_ptr<c10d::Work> start(const std::shared_ptr<Lane>& lane,
                                       c10d::OpType type,
                                       const Stream& stream,
                                       std::vector<at::Tensor> outputs,
                                       HoopWork::Body body,
                                       int source_rank = -1);
  // The lane for messages from rank `from` to rank `to`, one of them this.
  std::shared_ptr<Lane> p2p_lane(int from, int to);

  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<Lane> main_;
  std::mutex p2p_mutex_;
  std::map<std::pair<int, int>, std::shared_ptr<Lane>> p2p_;
  std::atomic<uint64_t> collectives_{0};
  std::mutex coalescing_mutex_;
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<c10d::Work>> coalesced_;
};

}  // namespace hoop_torch
