#!/bin/sh
# The README's install command, pip install --no-build-isolation ./python,
# run into a fresh virtual environment that sees the system's torch, with
# HOOP_BUILD_DIR pointing at this build so that nothing is compiled twice;
# then the installed package, and not the build tree's, trains the example
# under torchrun.  Exit status 77 (skipped): no venv or pip here.
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
"$tmp/venv/bin/python" -m torch.distributed.run --standalone \
  --nproc_per_node 2 --redirects 2 --tee 2 \
  "$src/docs/examples/ddp_mnist.py" --backend hoop --epochs 1 --limit 2000
