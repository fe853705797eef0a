#!/usr/bin/env bash
# The GPU check: what only a CUDA machine can show, in at most 5 minutes, offline, on whatever CUDA
# build of PyTorch is already installed (nothing is installed or downloaded). Each section has its own
# time box and prints as it goes; a section that fails or runs out of time is reported and the next one
# runs. Ends with `name: value` lines (one per figure; `gpu_check_<section>_rc: 0` means it passed).
#
#   bench/gpu_check.sh [LOG]      # also writes everything to LOG (default: gpu_check.log)
#
# Sections: the CUDA-only tests (pytest -m cuda); the model bench's GPU section (bf16 MFU of a ~1B MoE
# and of a dense model of similar active size, plus what compiling the MoE costs and buys);
# `glasslab demo --quick --device cuda`; one FSDP2 training job on one GPU (torchrun, 1 process).
set -uo pipefail
log=$(realpath -m "${1:-$(dirname "$0")/../gpu_check.log}")
cd "$(dirname "$0")/.."
exec > >(tee "$log") 2>&1
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled
PY=${PYTHON:-python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
summary=()

# section NAME SECONDS COMMAND...: run COMMAND under a time box, print its wall time and exit status.
section() {
  local name=$1 limit=$2 start rc
  shift 2
  echo "== $name (time box ${limit} s): $*"
  start=$(date +%s)
  timeout --kill-after=10 "$limit" "$@"
  rc=$?
  [ "$rc" = 124 ] && echo "!! $name ran out of its ${limit} s"
  summary+=("gpu_check_${name}_rc: $rc  (target 0)" "gpu_check_${name}_seconds: $(( $(date +%s) - start ))  (time box $limit)")
}

# One FSDP2 job on one GPU: the tests' tiny dataset and MoE run config, 20 steps. ($1: the device.)
fsdp_one_gpu() {
  set -e
  local dir=$work/fsdp
  mkdir -p "$dir"
  PYTHONPATH="$PWD/tests:$PYTHONPATH" "$PY" - "$dir" <<'PYTHON'
import sys
from pathlib import Path

import yaml
from train_data import build_tiny_dataset, tiny_run_config

root = Path(sys.argv[1])
config = tiny_run_config(build_tiny_dataset(root), moe=True, max_steps=20, parallelism="fsdp", sample_prompts=[])
(root / "run.yaml").write_text(yaml.safe_dump(config))
PYTHON
  "$PY" -m torch.distributed.run --standalone --nproc_per_node=1 -m glasslab train "$dir/run.yaml" \
    --device "${1:-cuda}" --run-dir "$dir/run"
  "$PY" - "$dir/run/result.json" <<'PYTHON'
import json
import sys

result = json.load(open(sys.argv[1]))
print(f"gpu_fsdp2_one_gpu_steps: {result['step']}  (target 20)")
print(f"gpu_fsdp2_one_gpu_final_train_loss: {result['train/loss']:.3f}  (target: below ln(512) = 6.24)")
PYTHON
}
export -f fsdp_one_gpu
export PY work
if [ "${GPU_CHECK_ONLY:-}" = fsdp_on_cpu ]; then  # how the CPU tests check this section's plumbing
  section fsdp2_one_gpu 120 bash -c 'fsdp_one_gpu cpu'
  printf '%s\n' "${summary[@]}"
  exit 0
fi
section environment 30 "$PY" -c '
import sys

import torch

if not torch.cuda.is_available():
    sys.exit("torch.cuda.is_available() is False: nothing to check here (CI never needs a GPU)")
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.device_count()} x {torch.cuda.get_device_name()}")
name = torch.cuda.get_device_name().replace(" ", "_")
print(f"gpu_name: {name}")
'
if [ "${summary[0]}" != "gpu_check_environment_rc: 0  (target 0)" ]; then
  printf '%s\n' "${summary[@]}"
  exit 1
fi

section cuda_tests 40 "$PY" -m pytest -q -s -p no:cacheprovider -m cuda tests/test_model_cuda.py

section model_bench 115 "$PY" bench/model_bench.py --gpu-only --compile --steps 3

section demo_quick 85 "$PY" -m glasslab demo --quick --device cuda --no-serve --lab "$work/lab" --jobs 1

section fsdp2_one_gpu 30 bash -c fsdp_one_gpu

echo "== summary"
printf '%s\n' "${summary[@]}"
! printf '%s\n' "${summary[@]}" | grep -q '_rc: [^0]'  # exit status 1 when any section failed
