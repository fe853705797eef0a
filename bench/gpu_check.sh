#!/usr/bin/env bash
# The GPU check: what only a CUDA machine can show, in at most 5 minutes, offline, on whatever CUDA
# build of PyTorch is already installed (nothing is installed or downloaded). Every section prints its
# figures (`name: value` lines) as soon as it measures them, so a section cut off by its time box keeps
# what it printed; a section that fails or runs out of time is reported and the next one runs. The
# boxes sum to 280 s, and no section may start past 5 minutes from the start (it would be cut short).
#
#   bench/gpu_check.sh [--dry-run] [LOG]      # everything also goes to LOG (default: gpu_check.log)
#
#   environment (25 s)  device, torch build, bf16, the experts' grouped-matmul kernel, NCCL: whether the
#                       rest can run (without CUDA the check stops here, exit status 1);
#   cuda_tests (45 s)   pytest -m cuda (tests/test_model_cuda.py): the MoE on the GPU equals the CPU's,
#                       a compiled step, the pinned loader, the syncs of a trainer step;
#   model_bench (110 s) bf16 MFU of a 1.2B MoE and a dense model of its active size, what compiling a
#                       4-layer cut of the MoE costs and buys (bench/model_bench.py, COMPILED_LAYERS, says
#                       how that size was measured to fit), the trainer's host syncs and recompiles;
#   demo_quick (60 s)   glasslab demo --quick --device cuda with its steps run JOBS at a time: half the
#                       CPU cores, at most 8 (its models are tiny, so a step is bound by its process's CPU
#                       time and many share the GPU); prints how many of its steps finished in the box;
#   fsdp2 (40 s)        a 20-step FSDP2 job on two GPUs over NCCL (torchrun, 2 processes); with fewer
#                       GPUs it says so.
#
# --dry-run walks every section on the CPU with tiny sizes, so the script itself cannot rot (CI runs it
# through tests/test_bench_smoke.py): the environment section reports the CPU; the CUDA tests skip;
# the model bench runs its GPU section on the CPU (--device cpu --smoke, compiled with aot_eager); the
# demo's DAG is replaced by the smallest experiment (`glasslab run hello`, the same executor and --jobs;
# the demo itself is tested by tests/test_demo.py); the FSDP2 job runs 6 steps on two CPU processes over
# gloo. Its boxes are four times longer and not capped: a shared CPU is slow, and time is not what a
# dry run checks.
set -uo pipefail
dry_run=0
if [ "${1:-}" = --dry-run ]; then
  dry_run=1
  shift
fi
log=$(realpath -m "${1:-$(dirname "$0")/../gpu_check.log}")
cd "$(dirname "$0")/.."
exec > >(tee "$log") 2>&1
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled
PY=${PYTHON:-python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
started=$(date +%s)
summary=()
if [ "$dry_run" = 1 ]; then device=cpu; scale=4; else device=cuda; scale=1; fi
export PY work device dry_run

# section NAME SECONDS COMMAND...: run COMMAND in a time box (scaled in a dry run; cut to what is left
# of the 5 minutes otherwise), then record its exit status and wall time.
section() {
  local name=$1 limit=$(( $2 * scale )) start rc left
  shift 2
  start=$(date +%s)
  left=$(( started + 300 - start ))
  if [ "$dry_run" = 0 ] && [ "$left" -lt "$limit" ]; then
    limit=$left
  fi
  if [ "$limit" -lt 5 ]; then
    echo "!! $name: skipped, the 5 minutes are spent"
    summary+=("gpu_check_${name}_rc: skipped  (target 0)")
    return
  fi
  echo "== $name (time box ${limit} s): $*"
  timeout --kill-after=5 "$limit" "$@"
  rc=$?
  [ "$rc" = 124 ] && echo "!! $name ran out of its ${limit} s (the figures above it stand)"
  summary+=("gpu_check_${name}_rc: $rc  (target 0)" "gpu_check_${name}_seconds: $(( $(date +%s) - start ))  (time box $limit)")
}

environment() {
  "$PY" - "$work/env" <<'PYTHON'
import os
import sys

import torch
import torch.distributed as dist

device = os.environ["device"]
count = torch.cuda.device_count() if torch.cuda.is_available() else 0
print(f"torch {torch.__version__}, CUDA build {torch.version.cuda}, {os.cpu_count()} CPU cores", flush=True)
if device == "cuda" and count == 0:
    sys.exit("torch.cuda.is_available() is False: nothing to check here (CI never needs a GPU; --dry-run walks it)")
from glasslab.model.grouped_mm import kernel_runs

name = torch.cuda.get_device_name() if count else "cpu"
print(f"gpu_name: {name.replace(' ', '_')}  (context; {count} visible)", flush=True)
print(f"gpu_count: {count}", flush=True)
bf16 = torch.cuda.is_bf16_supported() if count else True
print(f"gpu_bf16: {int(bf16)}  (target 1)", flush=True)
# Without the kernel the experts run one matmul per expert with a host sync per call: slow but right.
print(f"gpu_grouped_mm_kernel_bf16: {int(kernel_runs(device, torch.bfloat16))}  (target 1)", flush=True)
nccl = dist.is_available() and dist.is_nccl_available()
version = "-"
if nccl and count:
    found = torch.cuda.nccl.version()  # a tuple in recent builds, an int in older ones
    version = ".".join(map(str, found)) if isinstance(found, tuple) else str(found)
print(f"gpu_nccl: {int(nccl)}  (context; version {version}; FSDP2 over several GPUs needs it)", flush=True)
with open(sys.argv[1], "w") as f:
    f.write(f"gpu_count={count}\n")
PYTHON
}

demo_quick() {
  local jobs=$(( $(nproc) / 2 ))
  [ "$jobs" -gt 8 ] && jobs=8
  [ "$jobs" -lt 1 ] && jobs=1
  echo "steps run $jobs at a time"
  if [ "$dry_run" = 1 ]; then
    "$PY" -m glasslab run hello --jobs "$jobs" --lab "$work/lab" || return
  else
    "$PY" -m glasslab demo --quick --device cuda --no-serve --jobs "$jobs" --lab "$work/lab" || return
  fi
}

# How many of the demo's steps finished (also after a time-out: the lab records each step as it ends).
demo_steps() {
  "$PY" - "$work/lab" <<'PYTHON'
import json
import sys
from pathlib import Path

records = [json.loads(p.read_text()) for p in Path(sys.argv[1]).glob("*/step.json")]
done = sum(r.get("status") == "succeeded" for r in records)
print(f"gpu_demo_quick_steps_succeeded: {done}  (context; of {len(records)} started)")
PYTHON
}

# FSDP2 on two ranks: the tests' tiny dataset and MoE run config, bf16 on GPUs.
fsdp2() {
  set -e
  local dir=$work/fsdp steps=20
  [ "$dry_run" = 1 ] && steps=6
  mkdir -p "$dir"
  PYTHONPATH="$PWD/tests:$PYTHONPATH" "$PY" - "$dir" "$steps" <<'PYTHON'
import sys
from pathlib import Path

import yaml
from train_data import build_tiny_dataset, tiny_run_config

root, steps = Path(sys.argv[1]), int(sys.argv[2])
config = tiny_run_config(build_tiny_dataset(root), moe=True, max_steps=steps, parallelism="fsdp", sample_prompts=[])
(root / "run.yaml").write_text(yaml.safe_dump(config))
PYTHON
  "$PY" -m torch.distributed.run --standalone --nproc_per_node=2 -m glasslab train "$dir/run.yaml" \
    --device "$device" --run-dir "$dir/run"
  "$PY" - "$dir/run/result.json" "$steps" <<'PYTHON'
import json
import sys

result, steps = json.load(open(sys.argv[1])), int(sys.argv[2])
print(f"gpu_fsdp2_steps: {result['step']}  (target {steps})")
print(f"gpu_fsdp2_final_train_loss: {result['train/loss']:.3f}  (target: below ln(512) = 6.24)")
print(f"gpu_fsdp2_replicas_agree: {int(len(set(result['replica_state_sha256'])) == 1)}  (target 1)")
PYTHON
}
export -f environment demo_quick demo_steps fsdp2

section environment 25 bash -c environment
if [ "${summary[0]}" != "gpu_check_environment_rc: 0  (target 0)" ]; then
  printf '%s\n' "${summary[@]}"
  exit 1
fi
# shellcheck disable=SC1091
. "$work/env"

section cuda_tests 45 "$PY" -m pytest -q -s -p no:cacheprovider -m cuda tests/test_model_cuda.py

if [ "$dry_run" = 1 ]; then
  section model_bench 110 "$PY" bench/model_bench.py --gpu-only --compile --device cpu --smoke \
    --compile-backend aot_eager
else
  section model_bench 110 "$PY" bench/model_bench.py --gpu-only --compile --steps 3
fi

section demo_quick 60 bash -c demo_quick
demo_steps

if [ "$dry_run" = 1 ] || [ "$gpu_count" -ge 2 ]; then
  section fsdp2 40 bash -c fsdp2
else
  echo "gpu_fsdp2: skipped  (context: $gpu_count GPU visible; FSDP2 over NCCL needs 2, one process per GPU)"
fi

echo "== summary ($(( $(date +%s) - started )) s in all)"
printf '%s\n' "${summary[@]}"
! printf '%s\n' "${summary[@]}" | grep -q '_rc: [^0]'  # exit status 1 when any section failed
