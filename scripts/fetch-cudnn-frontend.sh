#!/usr/bin/env bash
# Fetches the cuDNN frontend headers (header-only C++ over cuDNN's graph API) that
# -DHYBRID_CUDNN=ON builds against: the pinned PyPI wheel nvidia-cudnn-frontend, whose include/ is
# unpacked into third_party/cudnn-frontend/include (ignored by git; never committed).
#   scripts/fetch-cudnn-frontend.sh [WHEEL_DIR]
# WHEEL_DIR: a folder that already holds the wheel (no download then).
set -euo pipefail
cd "$(dirname "$0")/.."
version=1.15.0
dest=third_party/cudnn-frontend
wheels=${1:-$dest/wheel}
mkdir -p "$wheels"
shopt -s nullglob
whl=("$wheels"/nvidia_cudnn_frontend-"$version"-*.whl)
if ((${#whl[@]} == 0)); then
  python3 -m pip download --no-deps "nvidia-cudnn-frontend==$version" -d "$wheels"
  whl=("$wheels"/nvidia_cudnn_frontend-"$version"-*.whl)
fi
((${#whl[@]})) || { echo "no nvidia_cudnn_frontend-$version wheel in $wheels" >&2; exit 1; }
rm -rf "$dest/include"
mkdir -p "$dest"
# The headers are the same in every platform's wheel; take include/ only.
python3 - "${whl[0]}" "$dest" <<'PY'
import sys, zipfile
whl, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if n.startswith("include/")]
    if not any(n.endswith("cudnn_frontend.h") for n in names):
        sys.exit(f"{whl}: no include/cudnn_frontend.h")
    z.extractall(dest, names)
print(f"{len(names)} headers from {whl} -> {dest}/include")
PY
