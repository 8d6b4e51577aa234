// Sparse all-reduce; see sparse.hpp.
#include "sparse.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "tensors.hpp"

namespace hoop_torch {

namespace {

// What every rank's tensor must share, and its entry count.
enum Meta { kNnz, kSparseDim, kDenseDim, kDtype, kShapeHash, kMetaLen };

int64_t shape_hash(at::IntArrayRef sizes) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a over the dimensions
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; i++) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(sizes.size());
  for (int64_t s : sizes)
    mix(static_cast<uint64_t>(s));
  return static_cast<int64_t>(h);
}

}  // namespace

void check_sparse_allreduce(const at::Tensor& t, const c10d::ReduceOp& op) {
  TORCH_CHECK(op.op_ == c10d::ReduceOp::SUM,
              "hoop allreduce: sparse tensors reduce with SUM only, as "
              "with gloo");
  TORCH_CHECK(t.is_cpu(), "hoop allreduce: sparse tensors on the CPU only, "
              "not on ", t.device());
}

void sparse_allreduce(const CallContext& call, int nranks,
                      const at::Tensor& t) {
  const char* what = "allreduce (sparse)";
  at::Tensor in = t.coalesce();
  int64_t nnz = in._nnz();
  int64_t mine[kMetaLen] = {nnz, in.sparse_dim(), in.dense_dim(),
                            static_cast<int64_t>(in.scalar_type()),
                            shape_hash(in.sizes())};
  std::vector<int64_t> meta(static_cast<size_t>(kMetaLen) * nranks);
  check(hoop_allgather(call.comm, mine, meta.data(), kMetaLen, HOOP_I64,
                       nullptr),
        call, what);
  int64_t most = 0;
  for (int r = 0; r < nranks; r++) {
    const int64_t* theirs = &meta[static_cast<size_t>(r) * kMetaLen];
    TORCH_CHECK(std::equal(mine + kSparseDim, mine + kMetaLen,
                           theirs + kSparseDim),
                "hoop allreduce: rank ", r, "'s sparse tensor differs from "
                "this rank's (", in.sizes(), ", ", in.sparse_dim(),
                " sparse dimensions, ", in.scalar_type(), ") in shape, "
                "sparse dimensions or dtype");
    most = std::max(most, theirs[kNnz]);
  }
  // hoop gathers blocks of one size: each rank's entries padded to the
  // most any rank has.
  int64_t dims = in.sparse_dim();
  at::Tensor indices = at::zeros({dims, most}, in._indices().options());
  indices.narrow(1, 0, nnz).copy_(in._indices());
  std::vector<int64_t> value_shape = in._values().sizes().vec();
  value_shape[0] = most;
  at::Tensor values = at::zeros(value_shape, in._values().options());
  values.narrow(0, 0, nnz).copy_(in._values());

  at::Tensor all_indices = at::empty({nranks, dims, most}, indices.options());
  value_shape[0] = most * nranks;
  at::Tensor all_values = at::empty(value_shape, values.options());
  check(hoop_allgather(call.comm, indices.data_ptr(), all_indices.data_ptr(),
                       indices.numel(), HOOP_I64, nullptr),
        call, what);
  check(hoop_allgather(call.comm, values.data_ptr(), all_values.data_ptr(),
                       byte_size(values), HOOP_U8, nullptr),
        call, what);

  std::vector<at::Tensor> index_parts, value_parts;
  for (int r = 0; r < nranks; r++) {
    int64_t n = meta[static_cast<size_t>(r) * kMetaLen + kNnz];
    index_parts.push_back(all_indices[r].narrow(1, 0, n));
    value_parts.push_back(all_values.narrow(0, r * most, n));
  }
  // Every rank adds the same entries in the same order: the same bits.
  at::Tensor sum = at::sparse_coo_tensor(at::cat(index_parts, 1),
                                         at::cat(value_parts, 0), in.sizes())
                       .coalesce();
  t.copy_(sum);
}

}  // namespace hoop_torch
