// The "hoop" backend: joining, lanes, and each call as hoop calls; see
// backend.hpp.
#include "backend.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <numeric>
#include <thread>

#include "sparse.hpp"
#include "tensors.hpp"

namespace hoop_torch {

namespace {

using c10d::OpType;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

// Waits for `key` without holding the store's client while it waits, so
// that other threads of this process may use the store meanwhile.
std::vector<uint8_t> read_key(c10d::Store& store, const std::string& key,
                              std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (!store.check({key})) {
    if (std::chrono::steady_clock::now() > deadline)
      throw_backend_error("hoop: the peer that makes '" + key +
                          "' did not put it in the store within " +
                          std::to_string(timeout.count()) + " ms");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  return store.get(key);
}

// Makes a communicator of `nranks` through `store`: rank 0 makes the id
// and leaves it under `key`, the others read it there.  `what` is the
// communicator, for errors.
hoop_comm_t join(c10d::Store& store, const std::string& key, int rank,
                 int nranks, std::chrono::milliseconds timeout,
                 const std::string& what) {
  hoop_unique_id_t id;
  if (rank == 0) {
    hoop_result_t r = hoop_get_unique_id(&id);
    if (r != HOOP_SUCCESS)
      throw_hoop_error(nullptr, r, "hoop_get_unique_id");
    const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
    store.set(key, std::vector<uint8_t>(bytes, bytes + sizeof id));
  } else {
    std::vector<uint8_t> bytes = read_key(store, key, timeout);
    TORCH_CHECK(bytes.size() == sizeof id, "hoop: '", key, "' in the store ",
                "holds ", bytes.size(), " bytes, not a hoop unique id");
    std::memcpy(&id, bytes.data(), sizeof id);
  }
  hoop_config_t config = HOOP_CONFIG_INIT;
  config.timeout_ms = static_cast<int>(
      std::clamp<int64_t>(timeout.count(), 1, INT_MAX));
  hoop_comm_t comm = nullptr;
  hoop_result_t r = hoop_comm_init_rank(&comm, nranks, &id, rank, &config);
  if (r != HOOP_SUCCESS)
    throw_hoop_error(nullptr, r, what.c_str());
  return comm;
}

const at::Tensor& single(const std::vector<at::Tensor>& tensors,
                         const char* what) {
  TORCH_CHECK(tensors.size() == 1, "hoop ", what,
              ": one tensor per process, not ", tensors.size());
  TORCH_CHECK(tensors[0].layout() == at::kStrided, "hoop ", what,
              ": sparse tensors are not supported");
  return tensors[0];
}

// One message of a group of sends and receives.
struct Message {
  bool send;
  void* buf;
  size_t bytes;
  int peer;
};

// Runs `messages` as one hoop group, so that no order of them deadlocks.
void run_group(const CallContext& call, const std::vector<Message>& messages,
               const char* what) {
  check(hoop_group_start(), call, what);
  hoop_result_t r = HOOP_SUCCESS;
  for (const Message& m : messages) {
    if (r != HOOP_SUCCESS)
      break;
    r = m.send ? hoop_send(call.comm, m.buf, m.bytes, HOOP_U8, m.peer,
                           call.stream)
               : hoop_recv(call.comm, m.buf, m.bytes, HOOP_U8, m.peer,
                           call.stream);
  }
  hoop_result_t end = hoop_group_end();
  check(r != HOOP_SUCCESS ? r : end, call, what);
}

char* bytes_at(const at::Tensor& t, size_t offset) {
  return static_cast<char*>(t.data_ptr()) + offset;
}

// all_to_all_single's splits count rows (dimension 0); none means equal.
std::vector<int64_t> split_rows(const std::vector<int64_t>& splits,
                                const at::Tensor& t, int nranks,
                                const char* side) {
  int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  if (splits.empty()) {
    TORCH_CHECK(rows % nranks == 0, "hoop alltoall_base: ", side, " has ",
                rows, " rows, which ", nranks, " ranks cannot share equally");
    return std::vector<int64_t>(nranks, rows / nranks);
  }
  TORCH_CHECK(static_cast<int>(splits.size()) == nranks,
              "hoop alltoall_base: ", splits.size(), " ", side,
              " splits for ", nranks, " ranks");
  TORCH_CHECK(std::accumulate(splits.begin(), splits.end(), int64_t{0}) ==
                  rows,
              "hoop alltoall_base: the ", side, " splits do not add up to ",
              rows, " rows");
  return splits;
}

// Bytes of one row of `t`, split into `rows`.
size_t row_bytes(const at::Tensor& t, const std::vector<int64_t>& rows) {
  int64_t total = std::accumulate(rows.begin(), rows.end(), int64_t{0});
  return total == 0 ? 0 : byte_size(t) / static_cast<size_t>(total);
}

}  // namespace

HoopBackend::HoopBackend(const c10::intrusive_ptr<c10d::Store>& store,
                         int rank, int size,
                         std::chrono::milliseconds timeout)
    : BackendBase(rank, size), store_(store), timeout_(timeout) {
  // Joined here, not on first use, so that init_process_group fails
  // when the group cannot form.
  main_ = std::make_shared<Lane>(
      join(*store_, "hoop/unique_id", rank, size, timeout,
           "joining the group of " + std::to_string(size) + " ranks"));
  init();
}

HoopBackend::~HoopBackend() = default;

WorkPtr HoopBackend::start(const std::shared_ptr<Lane>& lane, OpType type,
                           const Stream& stream,
                           std::vector<at::Tensor> outputs,
                           HoopWork::Body body, int source_rank) {
  auto work = c10::make_intrusive<HoopWork>(
      getRank(), type, std::move(outputs), std::move(body), stream,
      std::weak_ptr<Lane>(lane), source_rank);
  // hoop queues a collective on device memory on the stream and returns;
  // its sends and receives return once the data has moved, so those run
  // on their lane's thread like host calls.
  if (lane == main_)
    collectives_++;
  {
    std::lock_guard<std::mutex> guard(coalescing_mutex_);
    if (coalescing_)
      coalesced_.push_back(work);
  }
  if (stream.on_device() && lane == main_)
    lane->run_here(work);
  else
    lane->submit(work);
  return work;
}

#if HOOP_TORCH_AT_LEAST(2, 1)
namespace {

// The Work of the calls made while coalescing: complete when all of them
// are; waiting waits for each, and throws what the first that failed
// threw.
class CoalescedWork : public c10d::Work {
 public:
  CoalescedWork(int rank, std::vector<WorkPtr> works)
      : c10d::Work(rank, OpType::UNKNOWN), works_(std::move(works)) {}

  bool isCompleted() override {
    return std::all_of(works_.begin(), works_.end(),
                       [](const WorkPtr& w) { return w->isCompleted(); });
  }
  bool wait(std::chrono::milliseconds timeout) override {
    for (const WorkPtr& w : works_)
      w->wait(timeout);
    return true;
  }
  void synchronize() override {
    for (const WorkPtr& w : works_)
      w->synchronize();
  }

 private:
  std::vector<WorkPtr> works_;
};

}  // namespace

void HoopBackend::startCoalescing() {
  std::lock_guard<std::mutex> guard(coalescing_mutex_);
  coalescing_ = true;
  coalesced_.clear();
}

WorkPtr HoopBackend::endCoalescing() {
  std::vector<WorkPtr> works;
  {
    std::lock_guard<std::mutex> guard(coalescing_mutex_);
    coalescing_ = false;
    works.swap(coalesced_);
  }
  return c10::make_intrusive<CoalescedWork>(getRank(), std::move(works));
}
#endif

std::shared_ptr<Lane> HoopBackend::p2p_lane(int from, int to) {
  std::lock_guard<std::mutex> lock(p2p_mutex_);
  std::shared_ptr<Lane>& lane = p2p_[{from, to}];
  if (!lane) {
    // In the pair's communicator the sender is rank 0.
    int rank = from == getRank() ? 0 : 1;
    std::string pair = std::to_string(from) + "-" + std::to_string(to);
    std::string what = "connecting rank " + std::to_string(from) +
                       " to rank " + std::to_string(to) +
                       " for point-to-point messages";
    lane = std::make_shared<Lane>(
        [store = store_, key = "hoop/p2p/" + pair, rank, what,
         timeout = timeout_] {
          return join(*store, key, rank, 2, timeout, what);
        });
  }
  return lane;
}

WorkPtr HoopBackend::broadcast(std::vector<at::Tensor>& tensors,
                               const c10d::BroadcastOptions& opts) {
  const at::Tensor& t = single(tensors, "broadcast");
  TORCH_CHECK(opts.rootTensor == 0, "hoop broadcast: rootTensor must be 0");
  int root = static_cast<int>(opts.rootRank);
  bool is_root = root == getRank();
  return start(main_, OpType::BROADCAST, Stream::for_tensor(t, "broadcast"),
               {t}, [t, root, is_root](const CallContext& c) {
                 at::Tensor buf = is_root ? t.contiguous() : output_buffer(t);
                 check(hoop_broadcast(c.comm, buf.data_ptr(), buf.data_ptr(),
                                      byte_size(buf), HOOP_U8, root,
                                      c.stream),
                       c, "broadcast");
                 finish_output(buf, t);
               });
}

WorkPtr HoopBackend::allreduce(std::vector<at::Tensor>& tensors,
                               const c10d::AllreduceOptions& opts) {
  if (tensors.size() == 1 && tensors[0].is_sparse()) {
    const at::Tensor& t = tensors[0];
    check_sparse_allreduce(t, opts.reduceOp);
    return start(main_, OpType::ALLREDUCE, Stream::for_tensor(t, "allreduce"),
                 {t}, [t, n = getSize()](const CallContext& c) {
                   sparse_allreduce(c, n, t);
                 });
  }
  const at::Tensor& t = single(tensors, "allreduce");
  Reduction red = reduction_for(opts.reduceOp, t.scalar_type(), "allreduce");
  return start(main_, OpType::ALLREDUCE, Stream::for_tensor(t, "allreduce"),
               {t}, [t, red](const CallContext& c) {
                 at::Tensor buf = red.input(t);
                 check(hoop_allreduce(c.comm, buf.data_ptr(), buf.data_ptr(),
                                      buf.numel(), red.dtype, red.op,
                                      c.stream),
                       c, "allreduce");
                 finish_output(buf, t);
               });
}

WorkPtr HoopBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "hoop allreduce_coalesced: no tensors");
  for (const at::Tensor& t : tensors)
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type() &&
                    t.device() == tensors[0].device() &&
                    t.layout() == at::kStrided,
                "hoop allreduce_coalesced: the tensors must be dense, of "
                "one dtype and on one device");
  Reduction red = reduction_for(opts.reduceOp, tensors[0].scalar_type(),
                                "allreduce_coalesced");
  return start(main_, OpType::ALLREDUCE_COALESCED,
               Stream::for_tensor(tensors[0], "allreduce_coalesced"), tensors,
               [tensors, red](const CallContext& c) {
                 at::Tensor joined = joined_view(tensors);
                 at::Tensor flat =
                     red.input(joined.defined() ? joined : packed(tensors));
                 check(hoop_allreduce(c.comm, flat.data_ptr(),
                                      flat.data_ptr(), flat.numel(),
                                      red.dtype, red.op, c.stream),
                       c, "allreduce_coalesced");
                 if (!flat.is_same(joined))
                   unpack(flat, tensors);
               });
}

WorkPtr HoopBackend::reduce(std::vector<at::Tensor>& tensors,
                            const c10d::ReduceOptions& opts) {
  const at::Tensor& t = single(tensors, "reduce");
  TORCH_CHECK(opts.rootTensor == 0, "hoop reduce: rootTensor must be 0");
  Reduction red = reduction_for(opts.reduceOp, t.scalar_type(), "reduce");
  int root = static_cast<int>(opts.rootRank);
  bool is_root = root == getRank();
  return start(main_, OpType::REDUCE, Stream::for_tensor(t, "reduce"), {t},
               [t, red, root, is_root](const CallContext& c) {
                 at::Tensor buf = red.input(t);
                 check(hoop_reduce(c.comm, buf.data_ptr(),
                                   is_root ? buf.data_ptr() : nullptr,
                                   buf.numel(), red.dtype, red.op, root,
                                   c.stream),
                       c, "reduce");
                 if (is_root)
                   finish_output(buf, t);
               });
}

WorkPtr HoopBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                               std::vector<at::Tensor>& inputs,
                               const c10d::AllgatherOptions& /*opts*/) {
  const at::Tensor& in = single(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1 &&
                  static_cast<int>(outputs[0].size()) == getSize(),
              "hoop allgather: one list of ", getSize(),
              " output tensors per process");
  std::vector<at::Tensor> outs = outputs[0];
  check_same(outs, in, "allgather");
  return start(main_, OpType::ALLGATHER, Stream::for_tensor(in, "allgather"),
               outs, [in, outs](const CallContext& c) {
                 at::Tensor src = in.contiguous();
                 at::Tensor joined = joined_view(outs);
                 at::Tensor flat =
                     joined.defined()
                         ? joined
                         : at::empty({src.numel() *
                                      static_cast<int64_t>(outs.size())},
                                     src.options());
                 check(hoop_allgather(c.comm, src.data_ptr(), flat.data_ptr(),
                                      byte_size(src), HOOP_U8, c.stream),
                       c, "allgather");
                 if (!joined.defined())
                   unpack(flat, outs);
               });
}

WorkPtr HoopBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                     const c10d::AllgatherOptions& /*opts*/) {
  TORCH_CHECK(output.scalar_type() == input.scalar_type() &&
                  output.numel() == input.numel() * getSize(),
              "hoop all_gather_into_tensor: the output must hold ",
              getSize(), " inputs of its dtype");
  return start(main_, OpType::_ALLGATHER_BASE,
               Stream::for_tensor(input, "all_gather_into_tensor"), {output},
               [output, input](const CallContext& c) {
                 at::Tensor src = input.contiguous();
                 at::Tensor buf = output_buffer(output);
                 check(hoop_allgather(c.comm, src.data_ptr(), buf.data_ptr(),
                                      byte_size(src), HOOP_U8, c.stream),
                       c, "all_gather_into_tensor");
                 finish_output(buf, output);
               });
}

WorkPtr HoopBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                            std::vector<at::Tensor>& inputs,
                            const c10d::GatherOptions& opts) {
  const at::Tensor& in = single(inputs, "gather");
  int root = static_cast<int>(opts.rootRank);
  bool is_root = root == getRank();
  std::vector<at::Tensor> outs;
  if (is_root) {
    TORCH_CHECK(outputs.size() == 1 &&
                    static_cast<int>(outputs[0].size()) == getSize(),
                "hoop gather: the root takes one list of ", getSize(),
                " output tensors");
    outs = outputs[0];
    check_same(outs, in, "gather");
  }
  return start(main_, OpType::GATHER, Stream::for_tensor(in, "gather"), outs,
               [in, outs, root](const CallContext& c) {
                 at::Tensor src = in.contiguous();
                 std::vector<at::Tensor> bufs;
                 std::vector<Message> messages;
                 for (size_t p = 0; p < outs.size(); p++) {
                   bufs.push_back(output_buffer(outs[p]));
                   messages.push_back({false, bufs[p].data_ptr(),
                                       byte_size(src), static_cast<int>(p)});
                 }
                 messages.push_back(
                     {true, src.data_ptr(), byte_size(src), root});
                 run_group(c, messages, "gather");
                 for (size_t p = 0; p < outs.size(); p++)
                   finish_output(bufs[p], outs[p]);
               });
}

WorkPtr HoopBackend::scatter(std::vector<at::Tensor>& outputs,
                             std::vector<std::vector<at::Tensor>>& inputs,
                             const c10d::ScatterOptions& opts) {
  const at::Tensor& out = single(outputs, "scatter");
  int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> ins;
  if (root == getRank()) {
    TORCH_CHECK(inputs.size() == 1 &&
                    static_cast<int>(inputs[0].size()) == getSize(),
                "hoop scatter: the root gives one list of ", getSize(),
                " input tensors");
    ins = inputs[0];
    check_same(ins, out, "scatter");
  }
  return start(main_, OpType::SCATTER, Stream::for_tensor(out, "scatter"),
               {out}, [out, ins, root](const CallContext& c) {
                 at::Tensor buf = output_buffer(out);
                 std::vector<at::Tensor> srcs;
                 std::vector<Message> messages;
                 for (size_t p = 0; p < ins.size(); p++) {
                   srcs.push_back(ins[p].contiguous());
                   messages.push_back({true, srcs[p].data_ptr(),
                                       byte_size(buf), static_cast<int>(p)});
                 }
                 messages.push_back(
                     {false, buf.data_ptr(), byte_size(buf), root});
                 run_group(c, messages, "scatter");
                 finish_output(buf, out);
               });
}

WorkPtr HoopBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& out = single(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 &&
                  static_cast<int>(inputs[0].size()) == getSize(),
              "hoop reduce_scatter: one list of ", getSize(),
              " input tensors per process");
  std::vector<at::Tensor> ins = inputs[0];
  check_same(ins, out, "reduce_scatter");
  Reduction red =
      reduction_for(opts.reduceOp, out.scalar_type(), "reduce_scatter");
  return start(main_, OpType::REDUCE_SCATTER,
               Stream::for_tensor(out, "reduce_scatter"), {out},
               [out, ins, red](const CallContext& c) {
                 at::Tensor joined = joined_view(ins);
                 at::Tensor flat =
                     red.input(joined.defined() ? joined : packed(ins));
                 at::Tensor buf = output_buffer(out);
                 check(hoop_reduce_scatter(c.comm, flat.data_ptr(),
                                           buf.data_ptr(), buf.numel(),
                                           red.dtype, red.op, c.stream),
                       c, "reduce_scatter");
                 finish_output(buf, out);
               });
}

WorkPtr HoopBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input,
    const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(output.scalar_type() == input.scalar_type() &&
                  input.numel() == output.numel() * getSize(),
              "hoop reduce_scatter_tensor: the input must hold ", getSize(),
              " outputs of its dtype");
  Reduction red = reduction_for(opts.reduceOp, output.scalar_type(),
                                "reduce_scatter_tensor");
  return start(main_, OpType::_REDUCE_SCATTER_BASE,
               Stream::for_tensor(input, "reduce_scatter_tensor"), {output},
               [output, input, red](const CallContext& c) {
                 at::Tensor flat = red.input(input);
                 at::Tensor buf = output_buffer(output);
                 check(hoop_reduce_scatter(c.comm, flat.data_ptr(),
                                           buf.data_ptr(), buf.numel(),
                                           red.dtype, red.op, c.stream),
                       c, "reduce_scatter_tensor");
                 finish_output(buf, output);
               });
}

WorkPtr HoopBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                   std::vector<int64_t>& output_splits,
                                   std::vector<int64_t>& input_splits,
                                   const c10d::AllToAllOptions& /*opts*/) {
  TORCH_CHECK(output.scalar_type() == input.scalar_type(),
              "hoop alltoall_base: input and output dtypes differ");
  int n = getSize();
  bool equal = output_splits.empty() && input_splits.empty();
  TORCH_CHECK(!equal || output.numel() == input.numel(),
              "hoop alltoall_base: without splits input and output must "
              "have as many elements");
  std::vector<int64_t> in_rows = split_rows(input_splits, input, n, "input");
  std::vector<int64_t> out_rows =
      split_rows(output_splits, output, n, "output");
  return start(
      main_, OpType::ALLTOALL_BASE, Stream::for_tensor(input, "alltoall"),
      {output},
      [output, input, in_rows, out_rows, equal](const CallContext& c) {
        at::Tensor src = input.contiguous();
        at::Tensor buf = output_buffer(output);
        // hoop's all-to-all reads its input while it writes its output, so
        // an output that shares the input's memory gets a copy to read.
        if (src.storage().is_alias_of(buf.storage()))
          src = src.clone();
        if (equal) {
          check(hoop_alltoall(c.comm, src.data_ptr(), buf.data_ptr(),
                              byte_size(src) / in_rows.size(), HOOP_U8,
                              c.stream),
                c, "alltoall_base");
        } else {
          size_t in_row = row_bytes(src, in_rows);
          size_t out_row = row_bytes(buf, out_rows);
          std::vector<Message> messages;
          size_t in_at = 0, out_at = 0;
          for (size_t p = 0; p < in_rows.size(); p++) {
            size_t send = in_rows[p] * in_row, receive = out_rows[p] * out_row;
            messages.push_back({true, bytes_at(src, in_at), send,
                                static_cast<int>(p)});
            messages.push_back({false, bytes_at(buf, out_at), receive,
                                static_cast<int>(p)});
            in_at += send;
            out_at += receive;
          }
          run_group(c, messages, "alltoall_base");
        }
        finish_output(buf, output);
      });
}

WorkPtr HoopBackend::alltoall(std::vector<at::Tensor>& outputs,
                              std::vector<at::Tensor>& inputs,
                              const c10d::AllToAllOptions& /*opts*/) {
  TORCH_CHECK(static_cast<int>(outputs.size()) == getSize() &&
                  static_cast<int>(inputs.size()) == getSize(),
              "hoop alltoall: ", getSize(), " inputs and outputs per process");
  for (size_t p = 0; p < inputs.size(); p++)
    TORCH_CHECK(outputs[p].scalar_type() == inputs[0].scalar_type() &&
                    inputs[p].scalar_type() == inputs[0].scalar_type(),
                "hoop alltoall: tensors of more than one dtype");
  return start(main_, OpType::ALLTOALL,
               Stream::for_tensor(inputs[0], "alltoall"), outputs,
               [outputs, inputs](const CallContext& c) {
                 std::vector<at::Tensor> srcs, bufs;
                 std::vector<Message> messages;
                 for (size_t p = 0; p < inputs.size(); p++) {
                   srcs.push_back(inputs[p].contiguous());
                   bufs.push_back(output_buffer(outputs[p]));
                   messages.push_back({true, srcs[p].data_ptr(),
                                       byte_size(srcs[p]),
                                       static_cast<int>(p)});
                   messages.push_back({false, bufs[p].data_ptr(),
                                       byte_size(bufs[p]),
                                       static_cast<int>(p)});
                 }
                 run_group(c, messages, "alltoall");
                 for (size_t p = 0; p < outputs.size(); p++)
                   finish_output(bufs[p], outputs[p]);
               });
}

// Sends and receives name the group's ranks in their errors: hoop's own
// message names the pair's communicator, whose rank 0 is the sender.
WorkPtr HoopBackend::send(std::vector<at::Tensor>& tensors, int dst,
                          int /*tag*/) {
  const at::Tensor& t = single(tensors, "send");
  TORCH_CHECK(dst != getRank() && dst >= 0 && dst < getSize(),
              "hoop send: no peer rank ", dst, " for rank ", getRank());
  std::string what = "send to rank " + std::to_string(dst) +
                     " (in hoop's words, rank 1 of the pair receives)";
  return start(p2p_lane(getRank(), dst), OpType::SEND,
               Stream::for_tensor(t, "send"), {t},
               [t, what](const CallContext& c) {
                 at::Tensor src = t.contiguous();
                 check(hoop_send(c.comm, src.data_ptr(), byte_size(src),
                                 HOOP_U8, 1, c.stream),
                       c, what.c_str());
               });
}

WorkPtr HoopBackend::recv(std::vector<at::Tensor>& tensors, int src,
                          int /*tag*/) {
  const at::Tensor& t = single(tensors, "recv");
  TORCH_CHECK(src != getRank() && src >= 0 && src < getSize(),
              "hoop recv: no peer rank ", src, " for rank ", getRank());
  std::string what = "recv from rank " + std::to_string(src) +
                     " (in hoop's words, rank 0 of the pair sends)";
  return start(p2p_lane(src, getRank()), OpType::RECV,
               Stream::for_tensor(t, "recv"), {t},
               [t, what](const CallContext& c) {
                 at::Tensor buf = output_buffer(t);
                 check(hoop_recv(c.comm, buf.data_ptr(), byte_size(buf),
                                 HOOP_U8, 0, c.stream),
                       c, what.c_str());
                 finish_output(buf, t);
               },
               src);
}

WorkPtr HoopBackend::barrier(const c10d::BarrierOptions& /*opts*/) {
  return start(main_, OpType::BARRIER, Stream(), {},
               [](const CallContext& c) {
                 check(hoop_barrier(c.comm), c, "barrier");
               });
}

}  // namespace hoop_torch
