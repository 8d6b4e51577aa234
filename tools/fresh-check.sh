#!/usr/bin/env bash
# Runs a command in a fresh Debian 12 root, the way a new user's bare machine
# would run it, so that a package installed by hand on this machine cannot
# hide a missing install step.
#
#   tools/fresh-check.sh [-k] 'tools/quickstart.sh test'
#
# The root is made with `debootstrap --variant=minbase bookworm` from the
# Debian mirror this machine's apt is configured with, gets a copy of this
# checkout at /src/hoop (tracked and untracked files, no build trees), and
# sees /proc, /sys, /dev, /dev/shm and, read-only, /usr/local/cuda when this
# machine has a CUDA toolkit. Everything happens in a private mount
# namespace, so nothing stays mounted if the script is killed. -k keeps the
# root afterwards (its path is printed); FRESH_DIR chooses where it is made.
# Needs root (or sudo), debootstrap (installed if missing) and the network
# path to the mirror.
set -euo pipefail

keep=0
if [ "${1:-}" = -k ]; then keep=1; shift; fi
if [ $# -ne 1 ]; then
  echo "usage: $0 [-k] 'command to run inside the fresh root'" >&2
  exit 2
fi
command=$1
repo=$(cd "$(dirname "$0")/.." && pwd)

if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || {
    echo "fresh-check: needs root (chroot, mounts) and there is no sudo" >&2
    exit 1
  }
  exec sudo --preserve-env=FRESH_DIR "$0" "$@"
fi

# The first Debian bookworm entry of this machine's apt sources, in either
# the one-line or the deb822 format; every suite of that mirror (updates,
# security) goes into the root too, so its packages match this machine's.
debian_entries() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk '$1 == "deb" { u = ($2 ~ /^\[/) ? $3 : $2; s = ($2 ~ /^\[/) ? $4 : $3;
                       if (s ~ /^bookworm/) print u, s }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk 'BEGIN { RS = ""; FS = "\n" }
         { uris = ""; suites = ""; enabled = 1
           for (i = 1; i <= NF; i++) {
             if ($i ~ /^URIs:/) { uris = $i; sub(/^URIs:[ \t]*/, "", uris) }
             if ($i ~ /^Suites:/) { suites = $i; sub(/^Suites:[ \t]*/, "", suites) }
             if ($i ~ /^Enabled:[ \t]*no/) enabled = 0
           }
           if (!enabled) next
           nu = split(uris, u, /[ \t]+/); ns = split(suites, s, /[ \t]+/)
           for (a = 1; a <= nu; a++) for (b = 1; b <= ns; b++)
             if (s[b] ~ /^bookworm/) print u[a], s[b] }' "$f"
  done
}
entries=$(debian_entries | awk '!seen[$0]++')
mirror=$(awk '$2 == "bookworm" { print $1; exit }' <<<"$entries")
if [ -z "$mirror" ]; then
  echo "fresh-check: no 'bookworm' entry in this machine's apt sources" >&2
  exit 1
fi

if ! command -v debootstrap >/dev/null; then
  echo "fresh-check: installing debootstrap"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi

parent=${FRESH_DIR:-/var/tmp}
root=$(mktemp -d "$parent/hoop-fresh.XXXXXX")
cleanup() {
  if [ "$keep" = 1 ]; then
    echo "fresh-check: root kept at $root"
  else
    rm -rf --one-file-system "$root"
  fi
}
trap cleanup EXIT

start=$(date +%s)
echo "fresh-check: debootstrap --variant=minbase bookworm $root $mirror"
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 || {
  tail -20 "$root.log" >&2
  echo "fresh-check: debootstrap failed (whole log: $root.log)" >&2
  exit 1
}
rm -f "$root.log"
awk '{ print "deb", $1, $2, "main" }' <<<"$entries" >"$root/etc/apt/sources.list"
cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
# debootstrap writes no /etc/hosts; Debian's installer writes this one, and
# without it even "localhost" does not resolve.
printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
  "$(hostname)" >"$root/etc/hosts"

mkdir -p "$root/src/hoop"
if git -C "$repo" rev-parse --git-dir >/dev/null 2>&1; then
  git -C "$repo" ls-files -z --cached --others --exclude-standard |
    (cd "$repo" && tar --null -T - -cf - 2>/dev/null) | tar -xf - -C "$root/src/hoop"
else
  tar -C "$repo" --exclude='./build*' -cf - . | tar -xf - -C "$root/src/hoop"
fi
echo "fresh-check: root ready in $(($(date +%s) - start)) s; running: $command"

# The mounts live in a private mount namespace that dies with the command.
cuda=
[ -d /usr/local/cuda ] && cuda=$(readlink -f /usr/local/cuda)
status=0
unshare --mount --propagation private env ROOT="$root" CUDA="$cuda" \
  CMD="$command" bash -euc '
  # A mount point at the root, as on a real machine: `ip netns exec` marks
  # "/" a slave mount and fails where it is a plain directory.
  mount --bind "$ROOT" "$ROOT"
  mount -t proc proc "$ROOT/proc"
  mount --rbind /sys "$ROOT/sys"
  mount --rbind /dev "$ROOT/dev"       # with /dev/shm and /dev/pts
  # ip netns keeps its namespaces under /run/netns, which must be a tmpfs
  # of the root'"'"'s own (the host'"'"'s namespaces stay invisible).
  mount -t tmpfs tmpfs "$ROOT/run"
  if [ -n "$CUDA" ]; then
    mkdir -p "$ROOT/usr/local/cuda"
    mount --bind "$CUDA" "$ROOT/usr/local/cuda"
    mount -o remount,bind,ro "$ROOT/usr/local/cuda"
  fi
  exec chroot "$ROOT" /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" \
    LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -c "cd /src/hoop && $CMD"
' || status=$?
echo "fresh-check: '$command' exited $status after $(($(date +%s) - start)) s"
exit "$status"
