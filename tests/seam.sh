#!/bin/bash
# The one-way seam between the core and the transports (issue 39):
# nothing under src/core includes a transport's header or names one (shm,
# tcp, ib, rdma, verbs) in its code or its strings, and no transport
# includes the communicator or a collective.  Comments may say why a
# transport behaves as it does; code may not depend on it.  The socket
# API's own names (IPPROTO_TCP, TCP_NODELAY, <netinet/tcp.h>) are the
# socket layer's, which bootstrap uses, and are allowed.
#   seam.sh SRC_DIR C_COMPILER
set -u
src=$1 cc=$2
fail=0
for f in "$src"/core/*.[ch]; do
  if grep -n '#include "transport/' "$f"; then
    echo "seam: $f includes a transport header"
    fail=1
  fi
  # Comments out (the preprocessor's own reading), then strings apart.
  code=$("$cc" -fpreprocessed -dD -E -P -x c "$f" 2>/dev/null |
         grep -v '^#include <')
  strings=$(printf '%s\n' "$code" | grep -o '"[^"]*"')
  bare=$(printf '%s\n' "$code" | sed 's/"[^"]*"/""/g')
  hits=$(printf '%s\n' "$bare" |
         grep -Eo '[A-Za-z_][A-Za-z0-9_]*' |
         grep -Ei 'shm|rdma|ibv|verbs_|tcp|^ib$|^ib_|_ib$|_ib_' |
         grep -Ev '^(IPPROTO_TCP|TCP_NODELAY)$' | sort -u)
  named=$(printf '%s\n' "$strings" |
          grep -Ei 'HOOP_(SHM|IB)_|"(shm|tcp|ib)"' | sort -u)
  if [ -n "$hits$named" ]; then
    echo "seam: $f names a transport:" $hits $named
    fail=1
  fi
done
for f in "$src"/transport/*.[ch]; do
  if grep -nE '#include "(core/comm\.h|collectives/)' "$f"; then
    echo "seam: $f includes the communicator or a collective"
    fail=1
  fi
done
[ $fail = 0 ] && echo "seam: src/core names no transport; transports see no communicator"
exit $fail
