"""The local backend: each step attempt is a subprocess of the executor on this machine.

The subprocess is ``python -m glasslab.lab.worker`` (see worker.py) in its own session, so a Ctrl-C
in the terminal reaches only the executor, which decides what the steps get (SIGTERM, then SIGKILL
after a grace period). It sees the executor's ``sys.path`` (as ``PYTHONPATH``), so whatever the
executor could import — the checkout's ``src``, an experiment file's folder, test modules — the step
imports too. The Ray backend starts the very same process inside its task (:func:`start_worker`).
"""

from __future__ import annotations

import json
import math
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from glasslab.lab.attempt import PARENT_PID_ENV, AttemptResult, WorkerSpec
from glasslab.lab.step import Resources

STEP_LOG = "step.log"


def user_pythonpath(paths: list[str] | None = None) -> str:
    """``PYTHONPATH`` for step processes: this process's ``sys.path`` minus the interpreter's own
    folders (stdlib, site-packages), which the step's interpreter brings itself."""
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    keep = []
    for entry in sys.path if paths is None else paths:
        real = os.path.realpath(entry or os.getcwd())
        if os.path.isdir(real) and not any(real == p or real.startswith(p + os.sep) for p in prefixes):
            if real not in keep:
                keep.append(real)
    return os.pathsep.join(keep)


def start_worker(
    spec: WorkerSpec, scratch: Path, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen, Path]:
    """Start the step process for ``spec``; its output is appended to ``<output_dir>/step.log``.

    Returns the process and the path its result will be written to.
    """
    scratch.mkdir(parents=True, exist_ok=True)
    base = scratch / f"{Path(spec.output_dir).name}.attempt{spec.attempt}"
    spec_path, result_path = base.with_suffix(".spec"), base.with_suffix(".result")
    spec_path.write_bytes(pickle.dumps(spec))
    result_path.unlink(missing_ok=True)
    env = dict(os.environ if env is None else env)
    env[PARENT_PID_ENV] = str(os.getpid())
    env["PYTHONUNBUFFERED"] = "1"
    with open(Path(spec.output_dir) / STEP_LOG, "a", encoding="utf-8") as log:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        log.write(f"=== attempt {spec.attempt} of {spec.name} on {socket.gethostname()} at {stamp} ===\n")
        log.flush()
        proc = subprocess.Popen(
            [sys.executable, "-m", "glasslab.lab.worker", str(spec_path), str(result_path)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True,
        )
    return proc, result_path


def with_threads(env: dict[str, str], resources: Resources) -> dict[str, str]:
    """``env`` with ``OMP_NUM_THREADS`` = the CPUs the step asks for (as Ray sets it for a task), so steps
    side by side do not each start one thread per core and oversubscribe the machine (the demo's hero
    export beside its SFT: two 2-thread pools on two cores). A value already in ``env`` is kept."""
    if "OMP_NUM_THREADS" in env:
        return env
    return {**env, "OMP_NUM_THREADS": str(max(1, math.ceil(resources.cpus)))}


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


@dataclass
class LocalHandle:
    proc: subprocess.Popen
    result_path: Path


class LocalBackend:
    """Runs step processes on this machine; the executor decides how many at once (``--jobs``)."""

    name = "local"

    def __init__(self) -> None:
        self.scratch = Path(tempfile.mkdtemp(prefix="glasslab-steps-"))
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = user_pythonpath()

    def launch(self, spec: WorkerSpec, resources: Resources) -> LocalHandle:
        proc, result_path = start_worker(spec, self.scratch, with_threads(self.env, resources))
        return LocalHandle(proc, result_path)

    def worker_pid(self, handle: LocalHandle) -> int | None:
        return handle.proc.pid

    def poll(self, handle: LocalHandle) -> AttemptResult | None:
        if handle.proc.poll() is None:
            return None
        return finish_result(handle.proc, handle.result_path)

    def terminate(self, handle: LocalHandle) -> None:
        """Pass SIGTERM on to the step process (a trainer checkpoints, then stops)."""
        if handle.proc.poll() is None:
            handle.proc.send_signal(signal.SIGTERM)

    def kill(self, handle: LocalHandle) -> None:
        """SIGKILL the step's whole process group (torchrun ranks included)."""
        if handle.proc.poll() is None:
            try:
                os.killpg(handle.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        for path in self.scratch.iterdir():
            path.unlink(missing_ok=True)
        self.scratch.rmdir()
