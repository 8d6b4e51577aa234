// Where a call's tensors live.  Host tensors need nothing; CUDA tensors
// (builds with HOOP_TORCH_CUDA) are handed to hoop with the caller's
// current stream, on which hoop queues the call as NCCL would, and their
// Work waits through an event on that stream.  Without CUDA the stubs
// below make every tensor a host tensor and refuse the others.
#pragma once

#include <memory>

#include <ATen/core/ivalue.h>
#include <ATen/core/ivalue_inl.h>

#include "torch_api.hpp"

#if HOOP_TORCH_CUDA
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace hoop_torch {

class Stream {
 public:
  // No stream: host tensors.
  Stream() = default;

  // The stream a call on `t` goes on: none for a host tensor, the current
  // stream of its device for a CUDA tensor.  Refuses other devices.
  static Stream for_tensor(const at::Tensor& t, const char* what);

  bool on_device() const;
  hoop_stream_t handle() const;
  // The devices a Work's future covers (none for host tensors).
  std::vector<c10::Device> devices() const;
  // After the call is queued on the stream: remembers where it ends.
  void record_end();
  // Whether the stream has passed the call's end (host: always).
  bool ended() const;
  // Makes the caller's current stream wait for the call's end.
  void block_current() const;
  // Completes `future`, with its events on this stream.
  void complete(c10::ivalue::Future& future, c10::IValue value) const;

 private:
#if HOOP_TORCH_CUDA
  c10::optional<c10::cuda::CUDAStream> stream_;
  std::shared_ptr<c10::Event> end_;
#endif
};

#if HOOP_TORCH_CUDA
inline Stream Stream::for_tensor(const at::Tensor& t, const char* what) {
  Stream s;
  if (t.is_cuda())
    s.stream_ = c10::cuda::getCurrentCUDAStream(t.device().index());
  else
    TORCH_CHECK(t.is_cpu(), "hoop ", what, ": tensors on ", t.device(),
                " are not supported (CPU and CUDA only)");
  return s;
}
inline bool Stream::on_device() const { return stream_.has_value(); }
inline hoop_stream_t Stream::handle() const {
  return stream_ ? static_cast<hoop_stream_t>(stream_->stream()) : nullptr;
}
inline std::vector<c10::Device> Stream::devices() const {
  if (!stream_)
    return {};
  return {stream_->device()};
}
inline void Stream::record_end() {
  if (!stream_)
    return;
  end_ = std::make_shared<c10::Event>(c10::DeviceType::CUDA);
  end_->record(*stream_);
}
inline bool Stream::ended() const { return !end_ || end_->query(); }
inline void Stream::block_current() const {
  if (end_)
    end_->block(c10::cuda::getCurrentCUDAStream(stream_->device_index()));
}
inline void Stream::complete(c10::ivalue::Future& future,
                             c10::IValue value) const {
  // The future records its events on the current stream, which for the
  // lane's thread is not the one the call went on.
  c10::OptionalStreamGuard guard(
      stream_ ? c10::optional<c10::Stream>(*stream_) : c10::nullopt);
  future.markCompleted(std::move(value));
}
#else
inline Stream Stream::for_tensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.is_cpu(), "hoop ", what, ": tensors on ", t.device(),
              " are not supported: this hoop_torch was built without CUDA");
  return Stream();
}
inline bool Stream::on_device() const { return false; }
inline hoop_stream_t Stream::handle() const { return nullptr; }
inline std::vector<c10::Device> Stream::devices() const { return {}; }
inline void Stream::record_end() {}
inline bool Stream::ended() const { return true; }
inline void Stream::block_current() const {}
inline void Stream::complete(c10::ivalue::Future& future,
                             c10::IValue value) const {
  future.markCompleted(std::move(value));
}
#endif

}  // namespace hoop_torch
