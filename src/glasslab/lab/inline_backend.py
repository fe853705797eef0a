"""The inline backend: the step function runs in the executor's own process, to its end, at launch.

This is how a command that *is* a one-step experiment (``glasslab train``, ``data build``, ``ladder
fit``; see ``one_step.py``) runs its step: the executor keeps the step's record, lock, heartbeat and
lab events exactly as for any other step, while the function's output reaches the terminal, a
progress bar can draw, the process's own signal handlers stay in charge (a trainer checkpoints on
SIGTERM; Ctrl-C raises ``KeyboardInterrupt`` in the function), and under ``torchrun`` the function
runs in the rank's process that torchrun started. The exception a failed attempt raised is kept, so
the command can raise it again after the executor has recorded the failure (a user mistake stays one
line, a Ctrl-C stays an interrupt).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any

from glasslab.errors import UserError
from glasslab.lab.attempt import AttemptResult, WorkerSpec, one_line_error, small_json
from glasslab.lab.step import Resources


@dataclass
class InlineHandle:
    result: AttemptResult
    value: Any = None
    """What the function returned (the object itself, not only its JSON summary)."""
    exception: BaseException | None = None


class InlineBackend:
    """Runs each attempt in this process, synchronously; ``last`` is the latest attempt's handle."""

    name = "inline"

    def __init__(self) -> None:
        self.last: InlineHandle | None = None

    def launch(self, spec: WorkerSpec, resources: Resources) -> InlineHandle:
        if resources.workers > 1:
            raise UserError(f"step {spec.name!r}: {resources.workers} workers cannot run inline; run the command "
                            "under torchrun, or the step through `glasslab run`")
        host, pid = socket.gethostname(), os.getpid()
        try:
            value = spec.ref.load()(spec.context())
        except BaseException as exc:  # noqa: B036 — recorded by the executor, raised again by the caller
            self.last = InlineHandle(AttemptResult(False, one_line_error(exc), host, pid), exception=exc)
        else:
            self.last = InlineHandle(AttemptResult(True, None, host, pid, small_json(value)), value=value)
        return self.last

    def worker_pid(self, handle: InlineHandle) -> int | None:
        return os.getpid()

    def poll(self, handle: InlineHandle) -> AttemptResult:
        return handle.result

    def terminate(self, handle: InlineHandle) -> None:
        """Nothing to stop: an attempt has ended by the time the executor could ask."""

    def kill(self, handle: InlineHandle) -> None:
        """Nothing to stop (see :meth:`terminate`)."""

    def close(self) -> None:
        """Nothing to release."""
