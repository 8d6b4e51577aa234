# Helpers for an installed tree that works wherever it is put: with
# `cmake --install --prefix`, under DESTDIR, or moved afterwards.  Nothing
# installed names the prefix; paths between installed files are relative.

# The path from install directory `from` to `to` (each relative to the
# prefix, as GNUInstallDirs gives them), "." when they are the same, or ""
# when either is absolute: then no relative path holds for every prefix.
function(hoop_install_relpath out from to)
  if(IS_ABSOLUTE "${from}" OR IS_ABSOLUTE "${to}")
    set(${out} "" PARENT_SCOPE)
    return()
  endif()
  file(RELATIVE_PATH rel "/${from}" "/${to}")
  string(REGEX REPLACE "/$" "" rel "${rel}")
  if(rel STREQUAL "")
    set(rel ".")
  endif()
  set(${out} "${rel}" PARENT_SCOPE)
endfunction()

# Installs program `target` into the bin directory.  It finds libhoop
# relative to itself, and the libraries it was linked with from outside the
# system's directories (CUDA's) where they were at build time, as it did
# in the build tree.
function(hoop_install_program target)
  hoop_install_relpath(bin_to_lib "${CMAKE_INSTALL_BINDIR}"
                       "${CMAKE_INSTALL_LIBDIR}")
  if(bin_to_lib STREQUAL "")
    set(rpath "${CMAKE_INSTALL_FULL_LIBDIR}")
  else()
    set(rpath "$ORIGIN/${bin_to_lib}")
  endif()
  if(HOOP_HAVE_CUDA)
    # Not in the link path CMake keeps: see CMAKE_BUILD_RPATH's comment.
    list(APPEND rpath "${CUDAToolkit_LIBRARY_DIR}")
  endif()
  set_target_properties(${target} PROPERTIES INSTALL_RPATH "${rpath}"
                        INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS ${target} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endfunction()
