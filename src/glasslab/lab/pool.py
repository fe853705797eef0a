"""The one task pool: runs calls ``fn(*args)`` inline, on local processes or on Ray, for the lab's steps and
the data build's tasks alike.

    pool = open_pool("local", size=2)
    handle = pool.submit(fn, arg, folder, cpus=1)
    for done in pool.wait([handle], timeout_s=0.25):
        outcome = pool.poll(done)        # Outcome: value, or error (what fn raised), or lost (the worker died)

It is used at two sizes: a lab step (a call that starts the step process and waits for it, ``step_task.py``)
and a data task (a call that reads one shard, ``data/runner.py``). The pool never retries: what a failure
means is the caller's (a step follows its :class:`~glasslab.lab.retry.RetryPolicy`; a data task lost
with its worker is rerun under the same policy, ``data/runner.py``).

Kinds:

- ``inline``: the call runs in this process, to its end, at ``submit`` (its exception is kept whole, so a
  one-step command can raise it again; its output reaches the terminal, its signal handlers stay in charge).
- ``local``: each call is a process forked from this one, in a session of its own (a Ctrl-C in the
  terminal reaches only the caller, which decides), that sends its result back through a pipe and ends.
  ``terminate`` raises ``KeyboardInterrupt`` in the call (SIGTERM); ``kill`` SIGKILLs its process group
  (the step process and torchrun's ranks with it). A call never outlives its caller: a thread in each
  notices when its parent is gone (a driver killed with SIGKILL) and stops the call the same way, then ends
  the process after :data:`ORPHAN_GRACE_S` whatever the call does.
- ``ray``: each call is a Ray task asking for its CPUs and GPUs (``pool_ray.py``), Ray joined the one way
  (``ray_join.py``).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_ready
from typing import Any

from glasslab.errors import UserError

KINDS = ("inline", "local", "ray")
PARENT_CHECK_S = 0.5
"""How often a pool process looks whether the process that started it is still alive."""
ORPHAN_GRACE_S = 90.0
"""How long an orphaned call has to stop (a step passes SIGTERM on and waits 60 s) before its process ends."""


@dataclass(frozen=True, eq=False)  # by identity: the inline pool's outcome is also its call's handle
class Outcome:
    """How one call ended: it returned ``value``, raised ``error``, or was ``lost`` with its worker."""

    value: Any = None
    error: BaseException | None = None
    lost: str | None = None
    """Why the call ended without a word from it (its process killed, Ray lost its node)."""
    host: str = ""
    pid: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.lost is None


class PoolFailure(Exception):
    """The pool itself failed (Ray's raylet died, say): neither the call's error nor a lost worker."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {(str(cause).strip().splitlines() or [''])[0]}")
        self.cause = cause


class InlinePool:
    """Runs each call in this process at ``submit``; ``last`` is the latest call's outcome."""

    kind = "inline"

    def __init__(self) -> None:
        self.size = 1
        self.last: Outcome | None = None

    def submit(self, fn: Callable, *args: Any, cpus: float = 1, gpus: float = 0, name: str = "") -> Outcome:
        host, pid = socket.gethostname(), os.getpid()
        try:
            self.last = Outcome(value=fn(*args), host=host, pid=pid)
        except BaseException as exc:  # noqa: B036 — the caller decides (a step records it, then raises it again)
            self.last = Outcome(error=exc, host=host, pid=pid)
        return self.last

    def pid(self, handle: Outcome) -> int | None:
        return os.getpid()

    def wait(self, handles: Sequence[Outcome], timeout_s: float) -> list[Outcome]:
        return list(handles)

    def poll(self, handle: Outcome) -> Outcome:
        return handle

    def terminate(self, handle: Outcome) -> None:
        """Nothing to stop: a call has ended by the time anyone could ask."""

    def kill(self, handle: Outcome) -> None:
        """Nothing to stop (see :meth:`terminate`)."""

    def close(self, wait: bool = True) -> None:
        """Nothing to release."""


@dataclass(eq=False)
class _Running:
    process: multiprocessing.process.BaseProcess
    conn: Connection
    outcome: Outcome | None = None


class ProcessPool:
    """Runs each call in a forked process of its own; the caller keeps at most ``size`` in flight."""

    kind = "local"

    def __init__(self, size: int) -> None:
        self.size = size
        self._running: set[_Running] = set()

    def submit(self, fn: Callable, *args: Any, cpus: float = 1, gpus: float = 0, name: str = "") -> _Running:
        # fork, not spawn: no re-import of the caller's __main__, and a call starts in milliseconds
        context = multiprocessing.get_context("fork")
        receive, send = context.Pipe(duplex=False)
        process = context.Process(target=_call_in_child, args=(send, os.getpid(), fn, args), daemon=True,
                                  name=name or None)
        process.start()
        send.close()
        handle = _Running(process, receive)
        self._running.add(handle)
        return handle

    def pid(self, handle: _Running) -> int | None:
        return handle.process.pid

    def wait(self, handles: Sequence[_Running], timeout_s: float) -> list[_Running]:
        waiting = {h.conn: h for h in handles if h.outcome is None} | {
            h.process.sentinel: h for h in handles if h.outcome is None}
        ready = wait_ready(list(waiting), timeout_s) if waiting else []
        done = {waiting[r] for r in ready} | {h for h in handles if h.outcome is not None}
        return [h for h in handles if h in done]

    def poll(self, handle: _Running) -> Outcome | None:
        if handle.outcome is None:
            if handle.conn.poll():
                handle.outcome = self._receive(handle)
            elif handle.process.exitcode is not None:  # ended without a word (re-checked: it may just have sent)
                handle.outcome = self._receive(handle) if handle.conn.poll() else self._lost(handle)
        return handle.outcome

    def _receive(self, handle: _Running) -> Outcome:
        try:
            kind, payload = handle.conn.recv()
        except (EOFError, OSError):
            return self._lost(handle)
        handle.process.join()
        self._forget(handle)
        pid = handle.process.pid
        if kind == "value":
            return Outcome(value=payload, host=socket.gethostname(), pid=pid)
        return Outcome(error=payload, host=socket.gethostname(), pid=pid)

    def _lost(self, handle: _Running) -> Outcome:
        handle.process.join()
        self._forget(handle)
        return Outcome(lost="a worker process died", host=socket.gethostname(), pid=handle.process.pid)

    def _forget(self, handle: _Running) -> None:
        handle.conn.close()
        self._running.discard(handle)

    def terminate(self, handle: _Running) -> None:
        """SIGTERM the call's process: the call sees ``KeyboardInterrupt`` (a step passes SIGTERM on)."""
        if handle.outcome is None and handle.process.exitcode is None:
            _signal(handle.process.pid, signal.SIGTERM, group=False)

    def kill(self, handle: _Running) -> None:
        """SIGKILL the call's whole process group and wait for its process to end."""
        if handle.outcome is None:
            _signal(handle.process.pid, signal.SIGKILL, group=True)
            handle.process.join()

    def close(self, wait: bool = True) -> None:
        """End the calls still in flight: let them finish (``wait``) or kill them."""
        for handle in list(self._running):
            if wait:
                handle.process.join()
            else:
                self.kill(handle)
            self._forget(handle)


def _signal(pid: int, signum: int, group: bool) -> None:
    try:
        os.killpg(pid, signum) if group else os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _call_in_child(conn: Connection, parent_pid: int, fn: Callable, args: tuple) -> None:
    """A pool process: run ``fn(*args)`` in a session of its own and send back what it returned or raised."""
    os.setsid()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    threading.Thread(target=_stop_when_orphaned, args=(parent_pid,), name="parent-watch", daemon=True).start()
    try:
        message = ("value", fn(*args))
    except BaseException as exc:  # noqa: B036 — sent to the caller, which decides
        message = ("error", exc)
    try:
        conn.send(message)
    except (OSError, ValueError):  # the caller is gone
        pass
    except Exception as exc:  # the value or the exception does not pickle: its line is what counts
        conn.send(("error", RuntimeError(f"{type(exc).__name__}: {exc}; the call's own result: {message[1]!r:.300}")))


def _stop_when_orphaned(parent_pid: int) -> None:
    """A pool process waiting on its call would never learn that a SIGKILLed caller is gone: stop the call
    (SIGTERM, as :meth:`ProcessPool.terminate`), then end the process if the call does not."""
    while os.getppid() == parent_pid:
        time.sleep(PARENT_CHECK_S)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(ORPHAN_GRACE_S)
    os._exit(128 + signal.SIGKILL)


def open_pool(kind: str, size: int, address: str | None = None, local_cpus: int = 1, local_gpus: int = 0) -> Any:
    """A pool of ``kind`` running ``size`` calls at once (``ray`` with ``size`` 0: the cluster's CPUs).

    ``address``: the Ray cluster to join (``ray`` only); without one, a local Ray with ``local_cpus`` CPUs and
    ``local_gpus`` GPUs is started.
    """
    if kind not in KINDS:
        raise UserError(f"--backend {kind!r}: expected one of local, ray")
    if address and kind != "ray":
        raise UserError(f"--address {address!r}: only the ray backend joins a cluster")
    if kind == "inline":
        return InlinePool()
    if kind == "local":
        return ProcessPool(size)
    from glasslab.lab.pool_ray import RayPool

    return RayPool(size, address, local_cpus, local_gpus)
