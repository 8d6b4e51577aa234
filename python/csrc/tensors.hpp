// From PyTorch's arguments to hoop's: element types, reductions, and the
// contiguous buffers a call reads and writes when the caller's tensors are
// not contiguous (hoop moves flat arrays).
#pragma once

#include <vector>

#include "torch_api.hpp"

namespace hoop_torch {

// What a reducing call runs: hoop's op and element type, and for
// PREMUL_SUM the factor each rank's input is multiplied by first.
struct Reduction {
  hoop_op_t op = HOOP_SUM;
  hoop_dtype_t dtype = HOOP_F32;
  bool premultiply = false;
  double factor = 1.0;
  at::Tensor tensor_factor;  // used instead of `factor` when defined

  // A contiguous tensor holding the call's input: `input` itself unless it
  // must be copied (not contiguous) or premultiplied.
  at::Tensor input(const at::Tensor& input) const;
};

// Checks that hoop can reduce `type` with `op` and says how.  Bool
// reduces as uint8 through MAX (SUM: any true) and MIN (PRODUCT: all
// true), as NCCL does, so that a result is always 0 or 1.
Reduction reduction_for(const c10d::ReduceOp& op, at::ScalarType type,
                        const char* what);

// Bytes of `t`'s elements; calls that only move data move them as bytes,
// so they take every dtype.
size_t byte_size(const at::Tensor& t);

// The contiguous tensor a call writes `t`'s result into: `t` itself when
// it is contiguous, else a new one that finish_output() copies back.
at::Tensor output_buffer(const at::Tensor& t);
void finish_output(const at::Tensor& buffer, const at::Tensor& t);

// One flat tensor over `list` when its tensors lie back to back in one
// storage (views of one flat tensor, as DDP and users of
// all_gather_into_tensor make them), else an undefined tensor.
at::Tensor joined_view(const std::vector<at::Tensor>& list);
// A new flat tensor holding `list`'s tensors back to back.
at::Tensor packed(const std::vector<at::Tensor>& list);
// Copies consecutive pieces of `flat` into `list`'s tensors.
void unpack(const at::Tensor& flat, const std::vector<at::Tensor>& list);

// Checks that every tensor has the dtype and element count of `like`.
void check_same(const std::vector<at::Tensor>& list, const at::Tensor& like,
                const char* what);

}  // namespace hoop_torch
