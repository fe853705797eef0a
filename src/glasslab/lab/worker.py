"""The step process: ``python -m glasslab.lab.worker SPEC RESULT`` runs one attempt of one step.

Both backends start this same process (the local backend directly, the Ray backend inside a Ray
task), so a step behaves the same everywhere: it imports the step function by reference, calls
``fn(ctx)``, and writes ``RESULT`` (``{"ok": true}`` only when the function returned). Its output
goes to the step folder's ``step.log``.

Multi-worker steps (``resources.workers = N > 1``) use torchrun: this process becomes the torchrun
agent (``torch.distributed.run`` in-process, ``--standalone``, one node) and starts N copies of itself
with ``--rank``, each with ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``
set; the step function initialises ``torch.distributed`` from them (gloo on CPU, nccl on GPU). The
agent passes SIGTERM on to the ranks and stops all of them when one fails.

A step process never outlives its parent: a watchdog thread notices when the parent (the executor,
the Ray worker, or the torchrun agent) has died and sends itself SIGTERM, so a trainer can checkpoint,
then exits after a grace period. That is what lets a rerun after ``kill -9`` of the executor take the
step over without two processes writing one folder.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

from glasslab.lab.attempt import PARENT_PID_ENV, WorkerSpec, one_line_error, small_json
from glasslab.layout import write_json_atomic
from glasslab.torchrun_exit import exit_process

ORPHAN_GRACE_S = 30.0
WATCHDOG_INTERVAL_S = 0.5


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(WATCHDOG_INTERVAL_S)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(ORPHAN_GRACE_S)
    os._exit(128 + signal.SIGTERM)


def start_parent_watchdog() -> None:
    parent_pid = int(os.environ.get(PARENT_PID_ENV) or os.getppid())
    threading.Thread(target=_watch_parent, args=(parent_pid,), name="parent-watchdog", daemon=True).start()


def run_function(spec: WorkerSpec, result_path: Path) -> int:
    """Import and call the step function; record how it ended. Returns the process exit code."""
    try:
        fn = spec.ref.load()  # loads the experiment file first, so the config's class unpickles
        value = fn(spec.context())
    except BaseException as exc:  # noqa: B036 — any way out but a return is a failure, recorded as such
        traceback.print_exc()
        write_json_atomic(result_path, {"ok": False, "error": one_line_error(exc)})
        return 1
    write_json_atomic(result_path, {"ok": True, "error": None, "value": small_json(value)})
    return 0


def run_torchrun(spec_path: Path, result_path: Path, workers: int) -> int:
    """Run this module's ``--rank`` mode on ``workers`` processes through torchrun (one node)."""
    from torch.distributed.run import main as torchrun_main

    os.environ[PARENT_PID_ENV] = str(os.getpid())  # the ranks' parent is this torchrun agent
    args = [
        "--standalone", "--nnodes=1", f"--nproc-per-node={workers}", "--max-restarts=0",
        "-m", "glasslab.lab.worker", str(spec_path), str(result_path), "--rank",
    ]
    try:
        torchrun_main(args)
    except Exception as exc:  # ChildFailedError, or SignalException when SIGTERM stopped the ranks
        errors = [_read_rank_error(result_path, rank) for rank in range(workers)]
        found = [f"rank {r}: {e}" for r, e in enumerate(errors) if e]
        error = "; ".join(found) if found else f"torchrun failed: {one_line_error(exc)}"
        write_json_atomic(result_path, {"ok": False, "error": error})
        return 1
    write_json_atomic(result_path, {"ok": True, "error": None, "value": _read_rank_value(result_path)})
    return 0


def rank_result_path(result_path: Path, rank: int) -> Path:
    return result_path.with_name(f"{result_path.name}.rank{rank}")


def _read_rank_value(result_path: Path) -> object:
    """Rank 0's return value: what a multi-worker step returns."""
    try:
        return json.loads(rank_result_path(result_path, 0).read_text()).get("value")
    except (OSError, ValueError):
        return None


def _read_rank_error(result_path: Path, rank: int) -> str | None:
    try:
        return json.loads(rank_result_path(result_path, rank).read_text()).get("error")
    except (OSError, ValueError):
        return None


def main(argv: list[str]) -> int:
    spec_path, result_path = Path(argv[0]), Path(argv[1])
    rank_mode = "--rank" in argv[2:]
    start_parent_watchdog()
    spec: WorkerSpec = pickle.loads(spec_path.read_bytes())
    if rank_mode:
        return run_function(spec, rank_result_path(result_path, int(os.environ["RANK"])))
    if spec.workers > 1:
        return run_torchrun(spec_path, result_path, spec.workers)
    return run_function(spec, result_path)


if __name__ == "__main__":
    exit_process(main(sys.argv[1:]))
