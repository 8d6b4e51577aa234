#!/usr/bin/env bash
# softroce.sh: two emulated hosts joined by Soft-RoCE (the kernel's rdma_rxe
# driver over a veth pair), to try hoop's ib transport without an RDMA
# adapter.  Run as root, on a kernel that has rdma_rxe.
#
#   tools/softroce.sh check            # can this kernel do it? (exit 77: no)
#   tools/softroce.sh up               # make the hosts
#   tools/softroce.sh down             # remove what up made
#   tools/softroce.sh run -- cmd ...   # up, run cmd, down (also on failure)
#
# Layout: namespaces hooprxe-h0 and hooprxe-h1 (hoop-run --netns hooprxe
# runs rank r in hooprxe-h<r>), joined by the veth pair hooprxe-v0/hooprxe-v1
# with 10.99.0.1/24 and 10.99.0.2/24 (hoop-run --netns meets at 10.99.0.1);
# on each end an rxe device, hooprxe0 and hooprxe1.  RDMA devices are seen
# from every namespace, so each rank names its own with HOOP_IB_HCA:
#
#   tools/softroce.sh run -- build/tools/hoop-run --netns hooprxe -n 2 \
#     sh -c 'HOOP_IB_HCA==hooprxe$HOOP_RANK exec build/tools/hoop-info'
#
# Nothing but the hooprxe-* namespaces, the veth pair in them and the
# hooprxe0/1 devices is made or removed.
set -u -o pipefail

PREFIX=hooprxe
HOSTS=("$PREFIX-h0" "$PREFIX-h1")
VETHS=("$PREFIX-v0" "$PREFIX-v1")
ADDRS=(10.99.0.1/24 10.99.0.2/24)
RXES=("${PREFIX}0" "${PREFIX}1")

die() {
  echo "softroce: $*" >&2
  exit 1
}

# The kernel or tools cannot do it: said plainly, exit 77 (a skip to ctest).
lacking() {
  echo "softroce: cannot set up Soft-RoCE here: $*" >&2
  exit 77
}

usage() {
  echo "usage: softroce.sh check | up | down | run -- cmd [args...]" >&2
  exit 2
}

# Runs a step; on failure names it and what it printed.
step() {
  local out
  if ! out=$("$@" 2>&1); then
    die "'$*' failed: ${out:-no message}"
  fi
}

# Whether this kernel has rdma_rxe, loading it if it is a module.
check() {
  [ "$(id -u)" -eq 0 ] || lacking "needs root (namespaces, veth, rdma link)"
  command -v ip >/dev/null || lacking "'ip' (iproute2) is not installed"
  command -v rdma >/dev/null ||
    lacking "'rdma' (iproute2's RDMA tool) is not installed"
  if [ ! -d /sys/module/rdma_rxe ]; then
    local out kernel
    kernel=$(uname -r)
    find "/lib/modules/$kernel" -name 'rdma_rxe.ko*' 2>/dev/null | grep -q . ||
      lacking "this kernel ($kernel) lacks rdma_rxe (Soft-RoCE): it is not" \
        "loaded and /lib/modules/$kernel holds no rdma_rxe module"
    command -v modprobe >/dev/null ||
      lacking "rdma_rxe is a module of this kernel, but there is no modprobe" \
        "to load it"
    out=$(modprobe rdma_rxe 2>&1) ||
      lacking "modprobe rdma_rxe: ${out:-failed}"
  fi
  [ -d /sys/class/infiniband ] ||
    lacking "rdma_rxe is loaded but /sys/class/infiniband is missing"
}

# The hooprxe-* namespaces that exist, one a line.
our_namespaces() {
  ip netns list 2>/dev/null | awk -v p="$PREFIX-" 'index($1, p) == 1 { print $1 }'
}

down() {
  local i ns
  for i in 0 1; do
    if [ -e "/sys/class/infiniband/${RXES[$i]}" ]; then
      rdma link delete "${RXES[$i]}" 2>/dev/null ||
        echo "softroce: could not remove ${RXES[$i]}" >&2
    fi
  done
  # The veth pair goes with its namespaces.
  for ns in $(our_namespaces); do
    ip netns delete "$ns" 2>/dev/null || echo "softroce: could not remove $ns" >&2
  done
}

# Set once up starts making things, so that a failure undoes only those.
undo_on_failure() {
  local rc=$?
  [ "$rc" -eq 0 ] || down
  exit "$rc"
}

up() {
  check
  [ -z "$(our_namespaces)" ] ||
    die "hooprxe-* namespaces exist already (tools/softroce.sh down removes them)"
  local i
  for i in 0 1; do
    [ ! -e "/sys/class/infiniband/${RXES[$i]}" ] ||
      die "an RDMA device ${RXES[$i]} exists already"
  done
  trap undo_on_failure EXIT
  for i in 0 1; do
    step ip netns add "${HOSTS[$i]}"
  done
  step ip link add "${VETHS[0]}" netns "${HOSTS[0]}" type veth \
    peer name "${VETHS[1]}" netns "${HOSTS[1]}"
  for i in 0 1; do
    step ip -n "${HOSTS[$i]}" addr add "${ADDRS[$i]}" dev "${VETHS[$i]}"
    step ip -n "${HOSTS[$i]}" link set "${VETHS[$i]}" up
    step ip -n "${HOSTS[$i]}" link set lo up
    # rdma looks the netdev up in the namespace it runs in.
    step ip netns exec "${HOSTS[$i]}" rdma link add "${RXES[$i]}" type rxe \
      netdev "${VETHS[$i]}"
  done
  trap - EXIT
  echo "softroce: ${RXES[0]} on ${HOSTS[0]} ${ADDRS[0]}, ${RXES[1]} on ${HOSTS[1]} ${ADDRS[1]}"
}

[ $# -ge 1 ] || usage
case "$1" in
  check)
    check
    echo "softroce: this kernel has rdma_rxe"
    ;;
  up) up ;;
  down) down ;;
  run)
    shift
    [ "${1:-}" = "--" ] && shift
    [ $# -ge 1 ] || usage
    up
    trap down EXIT
    "$@"
    ;;
  *) usage ;;
esac
