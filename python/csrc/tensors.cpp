// From PyTorch's arguments to hoop's; see tensors.hpp.  Also the errors
// the backend raises.
#include "tensors.hpp"

#include <type_traits>
#include <utility>

namespace hoop_torch {

void throw_backend_error(const std::string& message) {
#if HOOP_TORCH_AT_LEAST(2, 1)
  TORCH_CHECK_WITH(DistBackendError, false, message);
#else
  TORCH_CHECK(false, message);
#endif
}

void throw_hoop_error(hoop_comm_t comm, hoop_result_t result,
                      const char* what) {
  const char* detail =
      comm != nullptr ? hoop_comm_last_error(comm) : hoop_last_error();
  throw_backend_error(std::string("hoop ") + what + " failed (" +
                      hoop_result_name(result) + "): " + detail);
}

namespace {

hoop_dtype_t hoop_dtype(at::ScalarType type, const char* what) {
  switch (type) {
    case at::ScalarType::Char:
      return HOOP_I8;
    case at::ScalarType::Byte:
    case at::ScalarType::Bool:
      return HOOP_U8;
    case at::ScalarType::Int:
      return HOOP_I32;
    case at::ScalarType::Long:
      return HOOP_I64;
#if HOOP_TORCH_AT_LEAST(2, 3)
    case at::ScalarType::UInt32:
      return HOOP_U32;
    case at::ScalarType::UInt64:
      return HOOP_U64;
#endif
#if HOOP_TORCH_AT_LEAST(2, 1)
    case at::ScalarType::Float8_e4m3fn:
      return HOOP_F8E4M3;
    case at::ScalarType::Float8_e5m2:
      return HOOP_F8E5M2;
#endif
    case at::ScalarType::Half:
      return HOOP_F16;
    case at::ScalarType::BFloat16:
      return HOOP_BF16;
    case at::ScalarType::Float:
      return HOOP_F32;
    case at::ScalarType::Double:
      return HOOP_F64;
    default:
      TORCH_CHECK(false, "hoop ", what, ": hoop cannot reduce ", type,
                  " tensors (it reduces int8, uint8, int32, int64, float16, "
                  "bfloat16, float32, float64, bool, and from PyTorch 2.1 "
                  "float8_e4m3fn and float8_e5m2, from 2.3 uint32 and "
                  "uint64)");
  }
}

// The supplement of a PREMUL_SUM changed shape: PyTorch 1.13 keeps a list
// of tensor factors, one per input tensor; later versions one tensor.
template <typename S, typename = void>
struct HasFactorList : std::false_type {};
template <typename S>
struct HasFactorList<
    S, std::void_t<decltype(std::declval<S&>().tensor_factors)>>
    : std::true_type {};

template <typename S>
at::Tensor tensor_factor_of(const S& supplement) {
  if constexpr (HasFactorList<S>::value)
    return supplement.tensor_factors.empty() ? at::Tensor()
                                             : supplement.tensor_factors[0];
  else
    return supplement.tensor_factor;
}

}  // namespace

Reduction reduction_for(const c10d::ReduceOp& op, at::ScalarType type,
                        const char* what) {
  Reduction r;
  r.dtype = hoop_dtype(type, what);
  bool boolean = type == at::ScalarType::Bool;
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      r.op = boolean ? HOOP_MAX : HOOP_SUM;
      break;
    case c10d::ReduceOp::PRODUCT:
      r.op = boolean ? HOOP_MIN : HOOP_PROD;
      break;
    case c10d::ReduceOp::MIN:
      r.op = HOOP_MIN;
      break;
    case c10d::ReduceOp::MAX:
      r.op = HOOP_MAX;
      break;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(!boolean, "hoop ", what, ": ReduceOp.AVG of bool tensors");
      r.op = HOOP_AVG;
      break;
    case c10d::ReduceOp::PREMUL_SUM: {
      TORCH_CHECK(!boolean, "hoop ", what,
                  ": ReduceOp.PREMUL_SUM of bool tensors");
      auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(
          op.supplement_.get());
      TORCH_CHECK(s != nullptr, "hoop ", what,
                  ": PREMUL_SUM without its factor");
      r.premultiply = true;
      r.factor = s->double_factor;
      r.tensor_factor = tensor_factor_of(*s);
      break;
    }
    default:
      TORCH_CHECK(false, "hoop ", what,
                  ": hoop has no bitwise reductions (BAND, BOR, BXOR); "
                  "use the gloo backend for them");
  }
  return r;
}

at::Tensor Reduction::input(const at::Tensor& t) const {
  if (!premultiply)
    return t.contiguous();
  at::Tensor scaled = t.clone(at::MemoryFormat::Contiguous);
  if (tensor_factor.defined())
    scaled.mul_(tensor_factor.to(scaled.device()));
  else
    scaled.mul_(factor);
  return scaled;
}

size_t byte_size(const at::Tensor& t) {
  return static_cast<size_t>(t.numel()) * t.element_size();
}

at::Tensor output_buffer(const at::Tensor& t) {
  return t.is_contiguous() ? t : at::empty(t.sizes(), t.options());
}

void finish_output(const at::Tensor& buffer, const at::Tensor& t) {
  if (!buffer.is_same(t))
    t.copy_(buffer);
}

at::Tensor joined_view(const std::vector<at::Tensor>& list) {
  if (list.empty())
    return at::Tensor();
  const at::Tensor& first = list[0];
  auto* next = static_cast<char*>(first.data_ptr());
  int64_t total = 0;
  for (const at::Tensor& t : list) {
    if (!t.is_contiguous() || t.scalar_type() != first.scalar_type() ||
        !t.storage().is_alias_of(first.storage()) ||
        static_cast<char*>(t.data_ptr()) != next)
      return at::Tensor();
    next += byte_size(t);
    total += t.numel();
  }
  return first.as_strided({total}, {1});
}

at::Tensor packed(const std::vector<at::Tensor>& list) {
  int64_t total = 0;
  for (const at::Tensor& t : list)
    total += t.numel();
  at::Tensor flat = at::empty({total}, list.at(0).options());
  int64_t offset = 0;
  for (const at::Tensor& t : list) {
    flat.narrow(0, offset, t.numel()).view(t.sizes()).copy_(t);
    offset += t.numel();
  }
  return flat;
}

void unpack(const at::Tensor& flat, const std::vector<at::Tensor>& list) {
  int64_t offset = 0;
  for (const at::Tensor& t : list) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

void check_same(const std::vector<at::Tensor>& list, const at::Tensor& like,
                const char* what) {
  for (const at::Tensor& t : list) {
    TORCH_CHECK(t.scalar_type() == like.scalar_type(), "hoop ", what,
                ": tensors of ", t.scalar_type(), " and ", like.scalar_type(),
                " in one call");
    TORCH_CHECK(t.numel() == like.numel(), "hoop ", what, ": a tensor of ",
                t.numel(), " elements where ", like.numel(),
                " were expected");
    TORCH_CHECK(t.device() == like.device(), "hoop ", what,
                ": tensors on ", t.device(), " and ", like.device(),
                " in one call");
  }
}

}  // namespace hoop_torch
