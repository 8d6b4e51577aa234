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
