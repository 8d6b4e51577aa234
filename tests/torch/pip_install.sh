#!/bin/sh
# The README's install command, pip install --no-build-isolation ./python,
# run into a fresh virtual environment that sees the system's torch, with
# HOOP_BUILD_DIR pointing at this build so that nothing is compiled twice;
# then the installed package, and not the build tree's, registers "hoop"
# in a script that never imports it and trains the example under torchrun.
# Exit status 77 (skipped): no venv or pip here.
#   pip_install.sh SOURCE_DIR BUILD_DIR PYTHON
set -eu
src=$1 build=$2 python=$3
# The installed package must be the one imported, not the build tree's.
unset PYTHONPATH
if ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
  echo "no venv/ensurepip for $python (apt-get install python3-venv)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$python" -m venv --system-site-packages "$tmp/venv"
HOOP_BUILD_DIR=$build "$tmp/venv/bin/pip" install --quiet --no-deps \
  --no-index --no-build-isolation "$src/python"
# pip builds in the source tree; leave it as it was.
rm -rf "$src/python/build" "$src/python"/*.egg-info
cd "$tmp"
where=$("$tmp/venv/bin/python" -c "import hoop_torch; print(hoop_torch.__file__)")
case $where in
"$tmp/venv/"*) ;;
*)
  echo "hoop_torch was imported from $where, not from the virtual environment"
  exit 1
  ;;
esac
# Installed, hoop_torch registers "hoop" when torch is imported: a script
# that never imports it runs on hoop, unless HOOP_TORCH_AUTOLOAD=0.
cat >"$tmp/one_word.py" <<'EOF'
import sys
import torch
import torch.distributed as dist
dist.init_process_group("hoop", init_method="file://" + sys.argv[1],
                        rank=0, world_size=1)
t = torch.arange(5.0)
dist.all_reduce(t)
assert t.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0], t
print(dist.get_backend(), "hoop_torch" in sys.modules)
EOF
got=$("$tmp/venv/bin/python" "$tmp/one_word.py" "$tmp/store-on")
if [ "$got" != "hoop True" ]; then
  echo "a script that does not import hoop_torch: '$got', not 'hoop True'"
  exit 1
fi
if HOOP_TORCH_AUTOLOAD=0 "$tmp/venv/bin/python" "$tmp/one_word.py" \
  "$tmp/store-off" 2>"$tmp/off.err"; then
  echo "HOOP_TORCH_AUTOLOAD=0 did not keep hoop_torch from registering"
  exit 1
fi
# PyTorch 1.13 says "Invalid backend: 'hoop'", 2.6 "Unknown backend type hoop".
if ! grep -Eq "Invalid backend: 'hoop'|Unknown backend type hoop" "$tmp/off.err"; then
  echo "HOOP_TORCH_AUTOLOAD=0: not the unknown backend's error:"
  cat "$tmp/off.err"
  exit 1
fi
# torchrun's rendezvous makes its TCPStores with libuv whatever USE_LIBUV
# says (pytorch#148283), which a PyTorch built without libuv (Debian 13's
# 2.6) refuses. Where USE_LIBUV=0 says so, it meets through a file instead,
# and the workers make their own store (env://, which heeds USE_LIBUV).
if [ "${USE_LIBUV:-1}" = 0 ]; then
  set -- --rdzv-backend c10d --rdzv-endpoint "$tmp/rendezvous" \
    --rdzv-conf store_type=file
  export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
else
  set -- --standalone
fi
"$tmp/venv/bin/python" -m torch.distributed.run "$@" \
  --nproc_per_node 2 --redirects 2 --tee 2 \
  "$src/docs/examples/ddp_mnist.py" --backend hoop --epochs 1 --limit 2000
