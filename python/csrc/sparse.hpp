// All-reduce of sparse COO tensors (DDP's gradients of an
// nn.Embedding(sparse=True)), as gloo offers it: every rank's entries
// gathered and added up by PyTorch, since hoop reduces dense arrays only.
#pragma once

#include "lane.hpp"

namespace hoop_torch {

// Checks, at the call, what the sum of sparse tensors needs: SUM, host
// memory.
void check_sparse_allreduce(const at::Tensor& t, const c10d::ReduceOp& op);

// Makes `t` the sum of every rank's `t` over the call's communicator
// (`nranks` ranks).  Throws when a rank's tensor differs from this one in
// shape, sparse layout or dtype: every rank sees every rank's and throws
// alike.
void sparse_allreduce(const CallContext& call, int nranks,
                      const at::Tensor& t);

}  // namespace hoop_torch
