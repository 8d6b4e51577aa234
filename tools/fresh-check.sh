#!/usr/bin/env bash
# Runs a command in a fresh Debian root, by default Debian 12 (bookworm), the
# way a new user's bare machine would run it, so that a package installed by
# hand on this machine cannot hide a missing install step.
#
#   tools/fresh-check.sh [-k] [--suite SUITE] 'tools/quickstart.sh test'
#
# The root is made with `debootstrap --variant=minbase SUITE` (bookworm
# unless --suite says otherwise; trixie makes a Debian 13 root) from the
# Debian mirror this machine's apt is configured with, gets a copy of this
# checkout at /src/hoop (tracked and untracked files, no build trees), and
# sees /proc, /sys, /dev (with a /dev/shm of its own) and, read-only,
# /usr/local/cuda when this machine has a CUDA toolkit. All of it, debootstrap included,
# runs in private mount and PID namespaces: if the script is stopped,
# nothing it started keeps running and nothing stays mounted. -k keeps the
# root afterwards (its path is printed); FRESH_DIR chooses where it is made.
# Needs root (or sudo), debootstrap (installed if missing) and the network
# path to the mirror.
set -euo pipefail

# Debian's bookworm entries (URI and suite) among this machine's apt
# sources, one-line or deb822: those whose components include main, so
# that a third-party repository (its own keys, other components) is left
# out.  Another suite is served by the same mirrors (bookworm-security's
# has trixie-security), so its entries are these with its name in place
# of bookworm.
debian_entries() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" |
      awk '$1 == "deb" && $3 ~ /^bookworm/ {
             for (i = 4; i <= NF; i++) if ($i == "main") { print $2, $3; next } }'
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk 'BEGIN { RS = ""; FS = "\n" }
         { delete v
           for (i = 1; i <= NF; i++)
             if (match($i, /^[A-Za-z-]+:/)) {
               k = tolower(substr($i, 1, RLENGTH - 1))
               v[k] = substr($i, RLENGTH + 1); sub(/^[ \t]+/, "", v[k])
             }
           if (v["enabled"] ~ /^no/ || v["types"] !~ /(^|[ \t])deb([ \t]|$)/ ||
               v["components"] !~ /(^|[ \t])main([ \t]|$)/) next
           nu = split(v["uris"], u, /[ \t]+/); ns = split(v["suites"], s, /[ \t]+/)
           for (a = 1; a <= nu; a++) for (b = 1; b <= ns; b++)
             if (s[b] ~ /^bookworm/) print u[a], s[b] }' "$f"
  done
}

# Inside the namespaces: make the root, fill it, mount, run the command.
in_namespaces() {
  local root=$1 repo=$2 mirror=$3 command=$4 entries=$5 cuda=$6 suite=$7
  local start
  start=$(date +%s)
  echo "fresh-check: debootstrap --variant=minbase $suite $root $mirror"
  if ! timeout 1800 debootstrap --variant=minbase "$suite" "$root" "$mirror" \
      >"$root.log" 2>&1; then
    tail -20 "$root.log" >&2
    echo "fresh-check: debootstrap failed (-k keeps its whole log)" >&2
    return 1
  fi
  rm -f "$root.log"
  awk '{ print "deb", $1, $2, "main" }' <<<"$entries" >"$root/etc/apt/sources.list"
  cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
  # debootstrap writes no /etc/hosts; Debian's installer writes this one,
  # and without it even "localhost" does not resolve.
  printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
    "$(hostname)" >"$root/etc/hosts"

  mkdir -p "$root/src/hoop"
  if git -C "$repo" rev-parse --git-dir >/dev/null 2>&1; then
    # A tracked file deleted in the working tree is left out, as a commit
    # of this tree would leave it out.
    git -C "$repo" ls-files -z --cached --others --exclude-standard |
      (cd "$repo" && tar --null --ignore-failed-read -T - -cf -) |
      tar -xf - -C "$root/src/hoop"
  else
    tar -C "$repo" --exclude='./build*' -cf - . | tar -xf - -C "$root/src/hoop"
  fi
  echo "fresh-check: root ready in $(($(date +%s) - start)) s; running: $command"

  # A mount point at the root, as on a real machine: `ip netns exec` marks
  # "/" a slave mount and fails where it is a plain directory.
  mount --bind "$root" "$root"
  mount -t proc proc "$root/proc"
  mount --rbind /sys "$root/sys"
  mount --rbind /dev "$root/dev"
  # A /dev/shm of the root's own, as a fresh machine has: the suite checks
  # that nothing of its own is left there, which another job's segments on
  # this machine's /dev/shm would otherwise fail.
  mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
  # ip netns keeps its namespaces under /run/netns, in a /run of the root's
  # own (the host's namespaces stay invisible).
  mount -t tmpfs tmpfs "$root/run"
  if [ -n "$cuda" ]; then
    mkdir -p "$root/usr/local/cuda"
    mount --bind "$cuda" "$root/usr/local/cuda"
    mount -o remount,bind,ro "$root/usr/local/cuda"
  fi
  chroot "$root" /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -c "cd /src/hoop && $command"
}

if [ "${1:-}" = --in-namespaces ]; then
  shift
  in_namespaces "$@"
  exit
fi

args=("$@")
usage() {
  echo "usage: $0 [-k] [--suite SUITE] 'command to run inside the fresh root'" >&2
  exit 2
}
keep=0
suite=bookworm
while [ $# -gt 0 ]; do
  case $1 in
  -k) keep=1; shift ;;
  --suite) [ $# -ge 2 ] || usage; suite=$2; shift 2 ;;
  *) break ;;
  esac
done
[ $# -eq 1 ] || usage
# The name goes into awk patterns and paths.
[[ $suite =~ ^[a-z]+$ ]] || usage
command=$1
repo=$(cd "$(dirname "$0")/.." && pwd)
self="$repo/tools/$(basename "$0")"

if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || {
    echo "fresh-check: needs root (chroot, mounts) and there is no sudo" >&2
    exit 1
  }
  exec sudo --preserve-env=FRESH_DIR "$self" "${args[@]}"
fi

entries=$(debian_entries | awk -v s="$suite" '{ sub(/^bookworm/, s, $2) }
                                             !seen[$0]++')
mirror=$(awk -v s="$suite" '$2 == s { print $1; exit }' <<<"$entries")
if [ -z "$mirror" ]; then
  echo "fresh-check: no Debian 'bookworm main' entry in this machine's apt sources" >&2
  exit 1
fi
if ! command -v debootstrap >/dev/null; then
  echo "fresh-check: installing debootstrap"
  timeout 600 apt-get update -qq
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq debootstrap >/dev/null
fi
cuda=
[ -d /usr/local/cuda ] && cuda=$(readlink -f /usr/local/cuda)

parent=${FRESH_DIR:-/var/tmp}
root=$(mktemp -d "$parent/hoop-fresh.XXXXXX")
# mktemp's 0700 would keep every user but root (apt's _apt too) out of "/".
chmod 755 "$root"
child=
cleanup() {
  if [ "$keep" = 1 ]; then
    echo "fresh-check: root kept at $root"
    return
  fi
  rm -f "$root.log"
  if awk -v r="$root" '$5 == r || index($5, r "/") == 1 { found = 1 }
                       END { exit !found }' /proc/self/mountinfo; then
    echo "fresh-check: something is still mounted under $root; not removing it" >&2
  else
    rm -rf --one-file-system "$root"
  fi
}
# unshare ignores SIGTERM while it waits; killed, it takes the namespaces'
# first process with it (--kill-child), and the kernel then kills every
# process left in them before the root is removed.
stop() {
  if [ -n "$child" ]; then
    kill -KILL "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
  fi
  exit 130
}
trap cleanup EXIT
trap stop INT TERM HUP

start=$(date +%s)
status=0
unshare --mount --propagation private --pid --fork --kill-child \
  "$self" --in-namespaces "$root" "$repo" "$mirror" "$command" "$entries" "$cuda" \
  "$suite" &
child=$!
wait "$child" || status=$?
child=
echo "fresh-check: '$command' exited $status after $(($(date +%s) - start)) s"
exit "$status"
