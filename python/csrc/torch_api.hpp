// Which PyTorch the backend is built against: HOOP_TORCH_AT_LEAST, which
// the other files test where versions differ, and the base class.
// PyTorch 1.13 (Debian 12) has a third-party backend subclass
// c10d::ProcessGroup; from 2.0 a ProcessGroup holds one c10d::Backend per
// device type and a third-party backend subclasses that.  The calls and
// their options are the same in both.
#pragma once

#include <string>

#include <torch/version.h>

#define HOOP_TORCH_AT_LEAST(major, minor)                                  \
  (TORCH_VERSION_MAJOR > (major) ||                                        \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#if HOOP_TORCH_AT_LEAST(2, 0)
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "hoop.h"

namespace hoop_torch {

#if HOOP_TORCH_AT_LEAST(2, 0)
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif

// Throws what torch.distributed raises for a failed backend call: from
// 2.1 torch.distributed.DistBackendError, before that RuntimeError (which
// DistBackendError subclasses, so `except RuntimeError` catches both).
[[noreturn]] void throw_backend_error(const std::string& message);

// Throws the failure of a hoop call, with hoop's own account of it (which
// names the peer rank and its address when a peer was involved).
[[noreturn]] void throw_hoop_error(hoop_comm_t comm, hoop_result_t result,
                                   const char* what);

}  // namespace hoop_torch
