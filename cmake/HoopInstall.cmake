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
