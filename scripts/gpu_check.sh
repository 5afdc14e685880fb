#!/usr/bin/env bash
# GPU readiness of drafthub on a machine with torch (a CUDA build) already installed and no network.
#
#   scripts/gpu_check.sh --make-wheels DIR         # on a machine with network: drafthub's wheel and its
#                                                  # pure-Python dependencies (torch excluded) into DIR
#   scripts/gpu_check.sh --wheels DIR [ARGS...]    # on the GPU machine: install from DIR, offline, then check
#   scripts/gpu_check.sh --no-install [ARGS...]    # drafthub already installed: just check
#
# ARGS go to scripts/gpu_check.py (--device cuda|cpu, --quick, --recipes, --tolerance, --work-dir); it prints
# one JSON line: τ per family on the device and on the CPU (fp32), speed-up, engine path, peak GPU memory.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python}"
usage() { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; }

mode="" wheels=""
case "${1:-}" in
  --make-wheels) mode=make; wheels="${2:?--make-wheels needs a directory}"; shift 2 ;;
  --wheels) mode=install; wheels="${2:?--wheels needs a directory}"; shift 2 ;;
  --no-install) mode=run; shift ;;
  -h|--help) usage; exit 0 ;;
  *) echo "error: start with --wheels DIR, --no-install or --make-wheels DIR (see --help)" >&2; exit 2 ;;
esac

if ! "$python" -c "import torch" 2>/dev/null; then
  echo "error: torch is not installed for $python; install your CUDA build of torch first (it is not in the wheels)" >&2
  exit 2
fi

if [ "$mode" = make ]; then
  mkdir -p "$wheels"
  "$python" -m pip wheel --no-deps --wheel-dir "$wheels" "$repo"
  # every runtime dependency, resolved, but torch and what only torch needs (the GPU machine has its own build)
  report=$(mktemp)
  "$python" -m pip install --dry-run --ignore-installed --quiet --report "$report" "$wheels"/drafthub-*.whl
  "$python" - "$report" <<'EOF' | xargs -r "$python" -m pip download --no-deps --dest "$wheels"
import json, re, sys
torch_only = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*)$")
for item in json.load(open(sys.argv[1]))["install"]:
    meta = item["metadata"]
    if meta["name"].lower() != "drafthub" and not torch_only.match(meta["name"].lower()):
        print(f"{meta['name']}=={meta['version']}")
EOF
  "$python" -m pip download --no-deps --dest "$wheels" setuptools wheel
  echo "wheels for an offline install are in $wheels; copy it to the GPU machine and run: $0 --wheels DIR"
  exit 0
fi

if [ "$mode" = install ]; then
  [ -d "$wheels" ] || { echo "error: --wheels $wheels is not a directory; make one with --make-wheels" >&2; exit 2; }
  # offline: only what DIR holds; torch and anything already installed are kept as they are
  "$python" -m pip install --no-index --find-links "$wheels" drafthub
fi

exec "$python" "$repo/scripts/gpu_check.py" "$@"
