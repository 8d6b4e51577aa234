# The peers hoop is measured against (Open MPI, and gloo through PyTorch)
# are optional: a peer that is missing or broken is skipped with a reason
# for the configure summary, never an error.  Sets HOOP_HAVE_MPI,
# HOOP_MPI_SUMMARY, HOOP_HAVE_TORCH and HOOP_TORCH_SUMMARY.

set(HOOP_HAVE_MPI 0)
if(NOT HOOP_BUILD_BENCH)
  set(HOOP_MPI_SUMMARY "not built (HOOP_BUILD_BENCH=OFF)")
else()
  # openmpi-bin alone installs an mpicc whose headers are missing, and
  # FindMPI's own probe then fails the whole configure even when QUIET; so
  # mpicc must first compile <mpi.h> here before FindMPI is asked.
  find_program(HOOP_MPICC NAMES mpicc)
  if(NOT HOOP_MPICC)
    set(HOOP_MPI_SUMMARY "not built: no mpicc (apt-get install libopenmpi-dev)")
  else()
    set(probe_dir ${CMAKE_BINARY_DIR}/CMakeFiles/hoop-mpi-probe)
    file(WRITE ${probe_dir}/probe.c
         "#include <mpi.h>\nint main(void) { return MPI_Init(0, 0); }\n")
    execute_process(COMMAND ${HOOP_MPICC} probe.c -o probe TIMEOUT 60
                    WORKING_DIRECTORY ${probe_dir}
                    RESULT_VARIABLE probe_status
                    OUTPUT_QUIET ERROR_VARIABLE probe_error)
    if(NOT probe_status EQUAL 0)
      string(REGEX MATCH "[^\n]*" probe_error "${probe_error}")
      set(HOOP_MPI_SUMMARY "not built: ${HOOP_MPICC} cannot build an MPI program (${probe_error}; apt-get install libopenmpi-dev)")
    else()
      find_package(MPI COMPONENTS C QUIET)
      if(MPI_C_FOUND)
        set(HOOP_HAVE_MPI 1)
        set(HOOP_MPI_SUMMARY "MPI ${MPI_C_VERSION} (peer-mpi-bench)")
      else()
        set(HOOP_MPI_SUMMARY "not built: FindMPI did not accept ${HOOP_MPICC}")
      endif()
    endif()
  endif()
endif()

# PyTorch runs the gloo peer (bench/peers/gloo_bench.py) and the torchrun
# tests; they use Debian's /usr/bin/python3, so that is the one asked.
set(HOOP_HAVE_TORCH 0)
find_program(HOOP_PYTHON3 NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(NOT HOOP_PYTHON3)
  set(HOOP_TORCH_SUMMARY "not found: no /usr/bin/python3 (apt-get install python3-torch)")
else()
  execute_process(COMMAND ${HOOP_PYTHON3} -c "import torch; print(torch.__version__)"
                  RESULT_VARIABLE torch_status OUTPUT_VARIABLE torch_version
                  ERROR_VARIABLE torch_error OUTPUT_STRIP_TRAILING_WHITESPACE
                  TIMEOUT 60)
  if(torch_status EQUAL 0)
    set(HOOP_HAVE_TORCH 1)
    set(HOOP_TORCH_SUMMARY "${torch_version} in ${HOOP_PYTHON3} (gloo peer, torchrun tests)")
  else()
    string(REGEX MATCH "[^\n]*Error[^\n]*" torch_error "${torch_error}")
    set(HOOP_TORCH_SUMMARY "not found: ${HOOP_PYTHON3} cannot import torch (${torch_error}; apt-get install python3-torch)")
  endif()
endif()

# The torch.distributed backend (python/) builds like a PyTorch extension:
# PyTorch's C++ headers (Debian: libtorch-dev), pybind11 (pybind11-dev) and
# Python's headers, all for the python3 above (setup.py passes its own as
# HOOP_PYTHON3).  Sets HOOP_HAVE_TORCH_BACKEND, HOOP_TORCH_BACKEND_SUMMARY
# and, when built, HOOP_TORCH_* for python/CMakeLists.txt.
set(HOOP_ENABLE_TORCH AUTO CACHE STRING
    "Build the torch.distributed backend (python/): AUTO, ON or OFF")
set(HOOP_HAVE_TORCH_BACKEND 0)
set(HOOP_TORCH_CUDA 0)
if(HOOP_ENABLE_TORCH STREQUAL "OFF")
  set(HOOP_TORCH_BACKEND_SUMMARY "not built (HOOP_ENABLE_TORCH=OFF)")
elseif(NOT HOOP_HAVE_TORCH)
  set(HOOP_TORCH_BACKEND_SUMMARY "not built: no PyTorch (see PyTorch)")
else()
  execute_process(
    COMMAND ${HOOP_PYTHON3} -c [=[
import os, sysconfig, torch
here = os.path.dirname(torch.__file__)
for line in (os.path.join(here, "include"), os.path.join(here, "lib"),
             sysconfig.get_paths()["include"],
             sysconfig.get_config_var("EXT_SUFFIX"),
             int(torch._C._GLIBCXX_USE_CXX11_ABI),
             getattr(torch._C, "_PYBIND11_COMPILER_TYPE", None) or "",
             getattr(torch._C, "_PYBIND11_STDLIB", None) or "",
             getattr(torch._C, "_PYBIND11_BUILD_ABI", None) or "",
             torch.version.cuda or ""):
    print(line)
]=]
    RESULT_VARIABLE probe_status OUTPUT_VARIABLE probe_out
    ERROR_QUIET TIMEOUT 60)
  string(REPLACE "\n" ";" probe_out "${probe_out}")
  list(LENGTH probe_out probe_lines)
  if(NOT probe_status EQUAL 0 OR probe_lines LESS 9)
    set(HOOP_TORCH_BACKEND_SUMMARY "not built: ${HOOP_PYTHON3} could not say how torch was built")
  else()
    list(GET probe_out 0 torch_include)
    list(GET probe_out 1 torch_libdir)
    list(GET probe_out 2 python_include)
    list(GET probe_out 3 HOOP_TORCH_EXT_SUFFIX)
    list(GET probe_out 4 HOOP_TORCH_CXX11_ABI)
    list(GET probe_out 5 HOOP_TORCH_PYBIND11_COMPILER)
    list(GET probe_out 6 HOOP_TORCH_PYBIND11_STDLIB)
    list(GET probe_out 7 HOOP_TORCH_PYBIND11_ABI)
    list(GET probe_out 8 torch_cuda)
    # pip's torch carries pybind11 in its include directory; Debian's
    # does not (pybind11-dev).
    find_path(HOOP_TORCH_C10D_INCLUDE torch/csrc/distributed/c10d/Store.hpp
              PATHS ${torch_include} NO_DEFAULT_PATH)
    find_path(HOOP_PYBIND11_INCLUDE pybind11/pybind11.h HINTS ${torch_include})
    find_path(HOOP_PYTHON_INCLUDE Python.h PATHS ${python_include} NO_DEFAULT_PATH)
    set(HOOP_TORCH_LIBRARIES)
    foreach(lib c10 torch torch_cpu torch_python)
      find_library(HOOP_TORCH_LIB_${lib} ${lib} PATHS ${torch_libdir} NO_DEFAULT_PATH)
      list(APPEND HOOP_TORCH_LIBRARIES ${HOOP_TORCH_LIB_${lib}})
    endforeach()
    if(NOT HOOP_TORCH_C10D_INCLUDE)
      set(HOOP_TORCH_BACKEND_SUMMARY "not built: no PyTorch C++ headers in ${torch_include} (apt-get install libtorch-dev)")
    elseif(NOT HOOP_PYBIND11_INCLUDE)
      set(HOOP_TORCH_BACKEND_SUMMARY "not built: no pybind11 headers (apt-get install pybind11-dev)")
    elseif(NOT HOOP_PYTHON_INCLUDE)
      set(HOOP_TORCH_BACKEND_SUMMARY "not built: no Python.h in ${python_include} (apt-get install python3-dev)")
    elseif(NOT HOOP_TORCH_LIB_torch_python)
      set(HOOP_TORCH_BACKEND_SUMMARY "not built: no libtorch_python in ${torch_libdir}")
    else()
      set(HOOP_HAVE_TORCH_BACKEND 1)
      set(HOOP_TORCH_INCLUDE_DIRS ${torch_include}
          ${torch_include}/torch/csrc/api/include ${HOOP_PYBIND11_INCLUDE}
          ${HOOP_PYTHON_INCLUDE})
      set(torch_devices "CPU tensors")
      # CUDA tensors need hoop's CUDA build and a PyTorch built with CUDA.
      if(HOOP_HAVE_CUDA AND NOT torch_cuda STREQUAL "")
        find_library(HOOP_TORCH_LIB_c10_cuda c10_cuda PATHS ${torch_libdir} NO_DEFAULT_PATH)
        find_library(HOOP_TORCH_LIB_torch_cuda torch_cuda PATHS ${torch_libdir} NO_DEFAULT_PATH)
        if(HOOP_TORCH_LIB_c10_cuda AND HOOP_TORCH_LIB_torch_cuda)
          set(HOOP_TORCH_CUDA 1)
          list(APPEND HOOP_TORCH_LIBRARIES ${HOOP_TORCH_LIB_c10_cuda}
               ${HOOP_TORCH_LIB_torch_cuda})
          set(torch_devices "CPU and CUDA tensors")
        endif()
      endif()
      set(HOOP_TORCH_BACKEND_SUMMARY "hoop_torch in python/ for torch ${torch_version}, ${torch_devices}")
    endif()
  endif()
endif()
if(HOOP_ENABLE_TORCH STREQUAL "ON" AND NOT HOOP_HAVE_TORCH_BACKEND)
  message(FATAL_ERROR "HOOP_ENABLE_TORCH=ON but the backend cannot be built: ${HOOP_TORCH_BACKEND_SUMMARY}")
endif()
