#!/usr/bin/env bash
# The GPU check (bench/gpu_check.py) as one device call; see bench/README.md, "GPU check".
#
# On the device (the `run` tool, carry [".whl"], timeout_s 480):  bash bench/gpu_check.sh
#   installs what the image lacks from .whl/ (rdkit as an xz tarball of its installed files,
#   outlines-core, jsonschema and its three needs as wheels) into /tmp/site, installs cdd and
#   the example plugin without dependencies, then runs the check for at most 420 s, writing
#   gpu_check.json, gpu_check.md and gpu_check.log into $OUT.
#
# Here, before and after that call (plain moves, no git command): the tracked tree is about
# 112 MiB and a call carries at most 64 MiB, so
#   bash bench/gpu_check.sh aside   moves the tracked files the check does not read to
#                                 /tmp/cdd-gpu-check-aside (git status shows them deleted)
#   bash bench/gpu_check.sh back    puts them back
set -u
ASIDE=/tmp/cdd-gpu-check-aside
UNREAD="cdd_cli/assets/qm9-udlm/train_state.safetensors cdd_cli/assets/smollm2-a2d cdd_cli/assets/toxicity-surrogate-smollm2 bench/models bench/results"
case "${1:-device}" in
aside)
  for p in $UNREAD; do mkdir -p "$ASIDE/$(dirname "$p")" && mv "$p" "$ASIDE/$p"; done
  git ls-files -co --exclude-standard -z | xargs -0 du -cb 2>/dev/null | tail -1
  du -cb .whl | tail -1
  exit 0 ;;
back)
  for p in $UNREAD; do mkdir -p "$(dirname "$p")" && mv "$ASIDE/$p" "$p"; done
  exit 0 ;;
esac
# The device command: one line, under the tool's 2000 characters.
python3 -c 'import glob, tarfile; tarfile.open(glob.glob(".whl/rdkit-*.site.tar.xz")[0]).extractall("/tmp/site", filter="fully_trusted")' && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1; python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . -e examples/cdd-plugin-example; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; set -o pipefail; OMP_NUM_THREADS=4 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 timeout 420 python3 bench/gpu_check.py --device cuda --out "$OUT" --budget 390 2>&1 | tee "$OUT/gpu_check.log"
