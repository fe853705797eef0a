"""The Ray backend: each step attempt is a Ray task asking for the step's CPUs and GPUs.

The task starts the same step process as the local backend (``python -m glasslab.lab.worker``),
told the cluster's address (``RAY_ADDRESS_ENV``: a data build runs its own tasks there, as Ray tasks
beside it), so a multi-worker step is torchrun inside the task on one node: the task asks Ray for
``cpus * workers`` CPUs and ``gpus * workers`` GPUs, and Ray's ``CUDA_VISIBLE_DEVICES`` reaches the
ranks. The lab root must be a folder every Ray node sees at the same path (a shared filesystem).

Ray is joined at ``--address`` or, without one, started locally on demand (no dashboard) and shut
down when the executor is done; a Ray session that is already up in this process is reused and
left running. Workers get the executor's import path (``PYTHONPATH`` in the runtime env), so they
import the same glasslab and the same experiment files. Cancelling the task (the executor got
SIGTERM) passes SIGTERM on to the step process and gives it a grace period to checkpoint.
"""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import ray

from glasslab.lab.attempt import RAY_ADDRESS_ENV, AttemptResult, WorkerSpec, one_line_error
from glasslab.lab.local_backend import finish_result, start_worker
from glasslab.lab.ray_join import join_ray
from glasslab.lab.step import Resources

STEP_TERM_GRACE_S = 60.0


def run_step_in_task(spec_bytes: bytes) -> dict[str, Any]:
    """The body of a step's Ray task: run the step process to the end and report how it ended."""
    spec: WorkerSpec = pickle.loads(spec_bytes)
    scratch = Path(tempfile.mkdtemp(prefix="glasslab-ray-step-"))
    env = {**os.environ, RAY_ADDRESS_ENV: ray.get_runtime_context().gcs_address}
    proc, result_path = start_worker(spec, scratch, env)
    try:
        # Polled rather than waited on, so a cancellation's KeyboardInterrupt lands here promptly.
        while proc.poll() is None:
            time.sleep(0.1)
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STEP_TERM_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    result = finish_result(proc, result_path)
    shutil.rmtree(scratch, ignore_errors=True)
    return asdict(result)


_remote_step = ray.remote(max_retries=0)(run_step_in_task)


@dataclass
class RayHandle:
    ref: Any


class RayBackend:
    """Submits step attempts as Ray tasks; ``poll`` never blocks."""

    name = "ray"

    def __init__(self, address: str | None = None, min_cpus: float = 1, min_gpus: float = 0) -> None:
        # A local Ray sized so that the largest step fits (logical CPUs may exceed cores).
        self.started_here = join_ray(address, num_cpus=max(os.cpu_count() or 1, int(min_cpus + 0.999)),
                                     num_gpus=int(min_gpus + 0.999))

    def launch(self, spec: WorkerSpec, resources: Resources) -> RayHandle:
        task = _remote_step.options(
            num_cpus=resources.cpus * resources.workers, num_gpus=resources.gpus * resources.workers,
            name=f"glasslab:{Path(spec.output_dir).name}",
        )
        return RayHandle(task.remote(pickle.dumps(spec)))

    def worker_pid(self, handle: RayHandle) -> int | None:
        return None  # the task may run on another host; Ray stops it if this executor dies

    def poll(self, handle: RayHandle) -> AttemptResult | None:
        ready, _ = ray.wait([handle.ref], timeout=0)
        if not ready:
            return None
        try:
            return AttemptResult(**ray.get(handle.ref))
        except (ray.exceptions.RayError, KeyboardInterrupt) as exc:
            return AttemptResult(False, f"Ray task failed: {one_line_error(exc)}", "", None)

    def terminate(self, handle: RayHandle) -> None:
        ray.cancel(handle.ref, force=False)

    def kill(self, handle: RayHandle) -> None:
        ray.cancel(handle.ref, force=True)

    def close(self) -> None:
        if self.started_here:
            ray.shutdown()
