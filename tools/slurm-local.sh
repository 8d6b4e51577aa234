#!/usr/bin/env bash
# A throwaway single-node Slurm cluster on this machine, to try hoop under
# srun (plain and elastic) where no real cluster is at hand.
#
#   tools/slurm-local.sh start   # prints the export the caller needs
#   tools/slurm-local.sh stop    # kills its daemons, removes its directory
#
# Needs Debian's slurm-wlm and munge (apt-get install slurm-wlm munge) and
# root: slurmd starts tasks as the submitting user, which only root may do.
# Everything lives in one temporary directory: its own munge key and socket,
# its own slurm.conf, state, spool and logs, so nothing in /etc, /run or
# /var is used or changed and a system Slurm or munged, if any, is left
# alone.  All traffic is over loopback: the controller and the node are
# 127.0.0.1, and slurmd and srun bind only that (NoInAddrAny); slurmctld
# still binds every interface (22.05 has no setting for it), but answers
# only what is signed with this cluster's own munge key.  Its ports are
# HOOP_SLURM_PORT and the next one (16817 by default).
set -euo pipefail

# Where stop finds what start made: start picks a fresh mktemp directory.
pointer="${TMPDIR:-/tmp}/hoop-slurm-local.$(id -u).dir"
port="${HOOP_SLURM_PORT:-16817}"
wait_s="${HOOP_SLURM_WAIT_S:-60}"

die() {
  echo "slurm-local: $*" >&2
  exit 1
}

# Stops the daemon whose pid file is $1, waiting so that its port is free
# for the next start.
stop_pid_file() {
  local file=$1 pid
  [[ -s $file ]] || return 0
  pid=$(cat "$file")
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 50); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
}

stop() {
  [[ -s $pointer ]] || { echo "slurm-local: not running"; return 0; }
  local dir
  dir=$(cat "$pointer")
  # Jobs' slurmstepd processes outlive slurmd: cancel the jobs while the
  # controller can still reach them.
  if [[ -s $dir/slurmctld.pid ]] && kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null; then
    SLURM_CONF=$dir/slurm.conf scancel --user "$(id -un)" 2>/dev/null || true
    for _ in $(seq 50); do
      [[ -z $(SLURM_CONF=$dir/slurm.conf squeue -h 2>/dev/null) ]] && break
      sleep 0.2
    done
  fi
  stop_pid_file "$dir/slurmd.pid"
  stop_pid_file "$dir/slurmctld.pid"
  stop_pid_file "$dir/munged.pid"
  rm -rf "$dir"
  rm -f "$pointer"
  echo "slurm-local: stopped, $dir removed"
}

start() {
  if [[ -s $pointer ]]; then
    die "already started ($(cat "$pointer")); run '$0 stop' first"
  fi
  [[ $(id -u) -eq 0 ]] || die "needs root (slurmd runs tasks as their user)"
  local tool
  for tool in munged slurmctld slurmd sinfo scancel; do
    command -v "$tool" >/dev/null ||
      die "$tool not found: apt-get install slurm-wlm munge"
  done

  # Another Slurm (or an earlier start whose pointer file was lost) on these
  # ports would answer in our place or make ours die; say so at once.
  local p
  for p in "$port" $((port + 1)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      die "port $p is in use; set HOOP_SLURM_PORT to another"
    fi
  done

  local dir host ncpus
  dir=$(mktemp -d "${TMPDIR:-/tmp}/hoop-slurm.XXXXXX")
  echo "$dir" >"$pointer"
  # From here a failure leaves a half-started cluster: take it down.
  trap 'echo "slurm-local: start failed; $dir removed" >&2; stop >/dev/null' EXIT
  mkdir -p "$dir/munge" "$dir/state" "$dir/spool"
  # munged wants its key private and its directories writable by it alone,
  # but its socket's directories searchable by every user (the tasks'
  # users talk to it too).
  chmod 711 "$dir" "$dir/munge"
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge/munge.key"
  munged --socket="$dir/munge/munge.socket.2" \
    --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munged.pid" \
    --seed-file="$dir/munge/munged.seed" \
    --log-file="$dir/munged.log" ||
    die "munged did not start; see $dir/munged.log"

  # slurmd looks for the node named after the short host name.
  host=$(hostname -s)
  ncpus=$(nproc)
  # A few ranks per core: hoop's tests need more tasks than this VM has
  # cores, and config_overrides lets slurmd accept a node that claims more
  # CPUs than it has.
  local cpus=$((ncpus * 4 > 8 ? ncpus * 4 : 8))
  cat >"$dir/slurm.conf" <<EOF
ClusterName=hooplocal
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket.2
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No systemd or delegated cgroups here: track tasks by process group.
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
# Bind to the host name's address rather than every interface.
CommunicationParameters=NoInAddrAny
ReturnToService=2
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF

  # -D keeps them in the foreground so that $! is the daemon itself;
  # setsid keeps the caller's terminal signals away from them.
  setsid slurmctld -D -i -f "$dir/slurm.conf" >>"$dir/slurmctld.out" 2>&1 &
  echo $! >"$dir/slurmctld.pid"
  setsid slurmd -D -f "$dir/slurm.conf" >>"$dir/slurmd.out" 2>&1 &
  echo $! >"$dir/slurmd.pid"

  local state="" i
  for ((i = 0; i < wait_s * 2; i++)); do
    state=$(SLURM_CONF=$dir/slurm.conf sinfo -h -n "$host" -o %T 2>/dev/null || true)
    [[ $state == idle ]] && break
    if ! kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null ||
      ! kill -0 "$(cat "$dir/slurmd.pid")" 2>/dev/null; then
      tail -n 5 "$dir"/slurm*.log >&2 || true
      exit 1 # the EXIT trap reports and cleans up
    fi
    sleep 0.5
  done
  if [[ $state != idle ]]; then
    tail -n 5 "$dir"/slurm*.log >&2 || true
    echo "slurm-local: node $host is '${state:-not listed}' after ${wait_s} s, not idle" >&2
    exit 1
  fi
  trap - EXIT
  echo "slurm-local: node $host idle with $cpus CPUs (logs in $dir); now run:"
  echo "export SLURM_CONF=$dir/slurm.conf"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
