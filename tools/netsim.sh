#!/usr/bin/env bash
# netsim.sh: emulate N hosts on one machine, each behind a rate-capped link
# to a common switch, so that hoop's algorithms can be measured against
# their per-link cost models (bench/ps_vs_ring.py).  Run as root.
#
#   tools/netsim.sh up N RATE          # e.g. up 4 1gbit
#   tools/netsim.sh down               # removes every hoopsim-* namespace
#   tools/netsim.sh run N RATE -- cmd [args...]
#
# Layout: namespaces hoopsim-h0..h{N-1} are the hosts, hoopsim-sw holds the
# bridge br0.  Host i has eth0 = 10.99.0.(i+1)/24; the other end of its veth
# pair is port h<i> of the bridge.  A tbf qdisc caps both directions of every
# host link: eth0's egress (what the host sends) and the bridge port's egress
# (what the host receives), so each link is full duplex at RATE each way.
# Nothing outside the hoopsim-* namespaces is touched.
set -u -o pipefail

PREFIX=hoopsim
SW="$PREFIX-sw"
SUBNET=10.99.0

die() {
  echo "netsim: $*" >&2
  exit 1
}

usage() {
  cat >&2 <<'EOF'
usage: netsim.sh up N RATE | down | run N RATE -- cmd [args...]
  N     hosts, 1 to 253 (addresses 10.99.0.1 .. 10.99.0.N)
  RATE  tc rate of each host link, each direction: 1gbit, 100mbit, ...
EOF
  exit 2
}

# Runs a step; on failure names it and what it printed.
step() {
  local out
  if ! out=$("$@" 2>&1); then
    die "'$*' failed: ${out:-no message}"
  fi
}

check_prereqs() {
  [ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, veth, tc)"
  command -v ip >/dev/null || die "'ip' (iproute2) is not installed"
  command -v tc >/dev/null || die "'tc' (iproute2) is not installed"
}

# Prints the hoopsim-* namespaces, one a line.
list_namespaces() {
  ip netns list 2>/dev/null | awk -v p="$PREFIX-" 'index($1, p) == 1 { print $1 }'
}

# Converts a tc rate (1gbit, 100mbit, 500kbit, 10mbps, 1000000bit) to bits
# per second, to size the bucket.
rate_bps() {
  local r="$1" n unit
  n="${r%%[!0-9]*}"
  unit="${r#"$n"}"
  [ -n "$n" ] || return 1
  case "$unit" in
    bit | "") echo "$n" ;;
    kbit) echo $((n * 1000)) ;;
    mbit) echo $((n * 1000000)) ;;
    gbit) echo $((n * 1000000000)) ;;
    bps) echo $((n * 8)) ;;
    kbps) echo $((n * 8000)) ;;
    mbps) echo $((n * 8000000)) ;;
    gbps) echo $((n * 8000000000)) ;;
    *) return 1 ;;
  esac
}

# Caps egress of $2 in namespace $1 at RATE.
#
# burst: veth hands tbf GSO packets of up to 64 KiB, and tbf must split
# (slowly) any packet larger than its bucket, so the bucket holds at least
# 128 KiB; above that, 1 ms at RATE keeps the refill timer cheap.  A bucket
# only lets a link run ahead of RATE after it was idle, by at most burst
# bytes: 128 KiB is 1.6% of an 8 MiB transfer at 1gbit.
# latency: how long a packet may wait in the queue before tbf drops it.
# 100 ms (12.5 MB at 1gbit) absorbs N-1 senders converging on one port
# (the parameter server's inbound link) without drops that would make TCP
# back off and measure congestion control instead of the link.
cap_link() {
  local ns="$1" dev="$2" burst
  burst=$((BPS / 8 / 1000))
  [ "$burst" -ge 131072 ] || burst=131072
  step tc -n "$ns" qdisc replace dev "$dev" root tbf rate "$RATE" \
    burst "$burst" latency 100ms
}

cmd_down() {
  check_prereqs
  local ns failed=0
  for ns in $(list_namespaces); do
    # Deleting a namespace destroys its interfaces, and with them the veth
    # peers in the other namespaces.
    if ! ip netns del "$ns" 2>/dev/null; then
      echo "netsim: cannot delete namespace $ns" >&2
      failed=1
    fi
  done
  [ -z "$(list_namespaces)" ] || failed=1
  return "$failed"
}

cmd_up() {
  local n="$1"
  check_prereqs
  case "$n" in '' | *[!0-9]*) die "N must be a number, not '$n'" ;; esac
  if [ "$n" -lt 1 ] || [ "$n" -gt 253 ]; then
    die "N must be 1 to 253, not $n"
  fi
  if ! BPS=$(rate_bps "$RATE") || [ "$BPS" -le 0 ]; then
    die "RATE must look like 1gbit or 100mbit, not '$RATE'"
  fi
  if [ -n "$(list_namespaces)" ]; then
    die "hoopsim namespaces already exist ($(list_namespaces | tr '\n' ' '))" \
      "- another run may be using them; 'netsim.sh down' removes them"
  fi
  # From here on a failure leaves nothing half built behind.
  trap 'cmd_down >/dev/null 2>&1' EXIT
  if ! ip netns add "$SW" 2>/dev/null; then
    die "cannot create network namespace $SW (needs root and netns support)"
  fi
  step ip -n "$SW" link set lo up
  if ! ip -n "$SW" link add br0 type bridge 2>/dev/null; then
    die "bridge not available (kernel module 'bridge')"
  fi
  step ip -n "$SW" link set br0 up
  local i ns
  for ((i = 0; i < n; i++)); do
    ns="$PREFIX-h$i"
    step ip netns add "$ns"
    step ip -n "$ns" link set lo up
    if ! ip -n "$SW" link add "h$i" type veth peer name eth0 netns "$ns" \
      2>/dev/null; then
      die "veth not available (kernel module 'veth')"
    fi
    step ip -n "$SW" link set "h$i" master br0
    step ip -n "$SW" link set "h$i" up
    step ip -n "$ns" addr add "$SUBNET.$((i + 1))/24" dev eth0
    step ip -n "$ns" link set eth0 up
    cap_link "$ns" eth0
    cap_link "$SW" "h$i"
  done
  trap - EXIT
  echo "netsim: $n hosts $PREFIX-h0..h$((n - 1)) ($SUBNET.1-$SUBNET.$n)," \
    "links capped at $RATE each way"
}

cmd_run() {
  local n="$1"
  shift
  [ "${1:-}" = "--" ] || usage
  shift
  [ $# -ge 1 ] || usage
  # Built in a subshell, so that its own failure clean-up does not end us.
  (cmd_up "$n") || exit 1
  trap 'cmd_down' EXIT
  # The command runs in the background so that a signal reaches our traps
  # at once rather than when it ends; it is passed on as SIGTERM because a
  # background command of a script ignores SIGINT.  stdin is passed on
  # explicitly, since a background command would get /dev/null.
  "$@" <&0 &
  CHILD=$!
  trap 'kill -TERM "$CHILD" 2>/dev/null; wait "$CHILD"; exit 130' INT
  trap 'kill -TERM "$CHILD" 2>/dev/null; wait "$CHILD"; exit 143' TERM
  local rc=0
  wait "$CHILD" || rc=$?
  exit "$rc"
}

case "${1:-}" in
  up)
    [ $# -eq 3 ] || usage
    RATE="$3"
    cmd_up "$2"
    ;;
  down)
    [ $# -eq 1 ] || usage
    cmd_down || die "some hoopsim namespaces could not be removed"
    ;;
  run)
    [ $# -ge 5 ] || usage
    RATE="$3"
    cmd_run "$2" "${@:4}"
    ;;
  *) usage ;;
esac
