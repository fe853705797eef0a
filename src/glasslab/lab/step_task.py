"""A step attempt as a call on the task pool (pool.py), and its outcome as an :class:`AttemptResult`.

:func:`submit_attempt` starts an attempt, :func:`poll_attempt` says how it ended. On the ``inline`` pool
the step function itself is the call (:func:`call_step_function`): it runs in the
caller's process, which is how a one-step command (``glasslab train``, ``data build``) runs. On ``local``
and ``ray`` the call is :func:`run_step_process`: it starts the step process (``python -m
glasslab.lab.worker``, see worker.py) and waits for it, so a step behaves the same in a local pool process
and in a Ray task. The step process sees the caller's import path (``PYTHONPATH``), gets the CPUs its step
asks for as ``OMP_NUM_THREADS`` (Ray sets that itself for a task), and, on Ray, the cluster's address
(:data:`RAY_ADDRESS_ENV`: a data build it runs runs its tasks there too, except on an object-store lab, where
they run on the step's node). On an object-store lab the call first moves the attempt into its node's working
copy and pushes the step's folder when the process ends (``node_copy.py``). Its output is appended to the
step folder's ``step.log``. A ``KeyboardInterrupt`` in the call (the pool's ``terminate``; the caller is
gone) is passed on to the step process as SIGTERM, which gets :data:`STEP_TERM_GRACE_S` to checkpoint.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from glasslab.errors import UserError
from glasslab.lab.attempt import PARENT_PID_ENV, RAY_ADDRESS_ENV, AttemptResult, WorkerSpec, one_line_error, small_json
from glasslab.lab.modules import user_pythonpath
from glasslab.lab.node_copy import on_this_node, push_folder
from glasslab.lab.step import Resources

STEP_LOG = "step.log"
STEP_TERM_GRACE_S = 60.0


def submit_attempt(pool: Any, spec: WorkerSpec, resources: Resources) -> Any:
    """Start one attempt of ``spec`` on ``pool``, asking for the step's CPUs and GPUs; returns its handle."""
    if pool.kind == "inline":
        if resources.workers > 1:
            raise UserError(f"step {spec.name!r}: {resources.workers} workers cannot run inline; run the command "
                            "under torchrun, or the step through `glasslab run`")
        return pool.submit(call_step_function, spec)
    env = {}
    if pool.kind == "local":  # a Ray worker has both already (its runtime env; Ray sets the threads per task)
        env["PYTHONPATH"] = user_pythonpath()
        if "OMP_NUM_THREADS" not in os.environ:  # steps side by side must not each start one thread per core
            env["OMP_NUM_THREADS"] = str(max(1, math.ceil(resources.cpus)))
    return pool.submit(run_step_process, pickle.dumps(spec), env, pool.kind == "ray",
                       cpus=resources.cpus * resources.workers, gpus=resources.gpus * resources.workers,
                       name=f"glasslab:{Path(spec.output_dir).name}")


def poll_attempt(pool: Any, handle: Any) -> AttemptResult | None:
    """How the attempt behind ``handle`` ended, or None while it runs."""
    outcome = pool.poll(handle)
    if outcome is None:
        return None
    if outcome.lost is not None:
        return AttemptResult(False, f"step stopped: {outcome.lost}", outcome.host, outcome.pid, lost=True)
    if outcome.error is not None:
        return AttemptResult(False, one_line_error(outcome.error), outcome.host, outcome.pid)
    if pool.kind == "inline":
        return AttemptResult(True, None, outcome.host, outcome.pid, small_json(outcome.value))
    return AttemptResult(**outcome.value)


def call_step_function(spec: WorkerSpec) -> Any:
    """The step function, called in this process (the experiment file is loaded before the config unpickles)."""
    return spec.ref.load()(spec.context())


def run_step_process(spec_bytes: bytes, env: dict[str, str], on_ray: bool) -> dict[str, Any]:
    """Run the step process to its end and report how it ended (an :class:`AttemptResult` as a dict)."""
    attempt = on_this_node(pickle.loads(spec_bytes))
    spec = attempt.spec
    env = {**os.environ, **env, **attempt.env}
    if on_ray and not spec.lab_url:  # an object-store lab's data build runs its tasks on the step's own node
        import ray

        env[RAY_ADDRESS_ENV] = ray.get_runtime_context().gcs_address
    scratch = Path(tempfile.mkdtemp(prefix="glasslab-step-"))
    proc, result_path = start_worker(spec, scratch, env)
    try:
        # Polled rather than waited on, so a KeyboardInterrupt (terminate, cancel) lands here promptly.
        while proc.poll() is None:
            time.sleep(0.1)
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STEP_TERM_GRACE_S)
        except subprocess.TimeoutExpired:
            _kill(proc)
            proc.wait()
    finally:
        push_folder(attempt)
    result = finish_result(proc, result_path)
    shutil.rmtree(scratch, ignore_errors=True)
    return asdict(result)


def start_worker(spec: WorkerSpec, scratch: Path, env: dict[str, str]) -> tuple[subprocess.Popen, Path]:
    """Start the step process for ``spec``; returns it and the path its result will be written to.

    It joins this process's group when this process leads a session of its own (a local pool process, whose
    ``kill`` then takes the step and its ranks too); elsewhere (a Ray worker) it starts a session of its own.
    """
    scratch.mkdir(parents=True, exist_ok=True)
    base = scratch / f"{Path(spec.output_dir).name}.attempt{spec.attempt}"
    spec_path, result_path = base.with_suffix(".spec"), base.with_suffix(".result")
    spec_path.write_bytes(pickle.dumps(spec))
    result_path.unlink(missing_ok=True)
    env = {**env, PARENT_PID_ENV: str(os.getpid()), "PYTHONUNBUFFERED": "1"}
    with open(Path(spec.output_dir) / STEP_LOG, "a", encoding="utf-8") as log:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        log.write(f"=== attempt {spec.attempt} of {spec.name} on {socket.gethostname()} at {stamp} ===\n")
        log.flush()
        proc = subprocess.Popen(
            [sys.executable, "-m", "glasslab.lab.worker", str(spec_path), str(result_path)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=os.getsid(0) != os.getpid(),
        )
    return proc, result_path


def finish_result(proc: subprocess.Popen, result_path: Path) -> AttemptResult:
    """The attempt's result once ``proc`` has exited (a crash without a result is a failure)."""
    try:
        data = json.loads(result_path.read_text(encoding="utf-8"))
        ok, error, value = bool(data["ok"]) and proc.returncode == 0, data.get("error"), data.get("value")
    except (OSError, ValueError, KeyError):
        ok, error, value = False, None, None
    if not ok and not error:
        code = proc.returncode
        error = (f"step process killed by {signal.Signals(-code).name}" if code is not None and code < 0
                 else f"step process exited with code {code} without a result")
    return AttemptResult(ok, error, socket.gethostname(), proc.pid, value if ok else None)


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL the step process, with its torchrun ranks when it leads a process group of its own."""
    try:
        os.killpg(proc.pid, signal.SIGKILL) if os.getpgid(proc.pid) == proc.pid else proc.kill()
    except ProcessLookupError:
        pass
