"""The one task pool: runs calls ``fn(*args)`` inline, on local processes or on Ray, for the lab's steps and
the data build's tasks alike.

    pool = open_pool("local", size=2)
    handle = pool.submit(fn, arg, folder, cpus=1)
    for done in pool.wait([handle], timeout_s=0.25):
        outcome = pool.poll(done)        # Outcome: value, or error (what fn raised), or lost (the worker died)

It is used at two sizes: a lab step (a call that starts the step process and waits for it, ``step_task.py``)
and a data task (a call that reads one input slice, say, ``data/runner.py``). The pool never retries: what a failure
means is the caller's (a step follows its :class:`~glasslab.lab.retry.RetryPolicy`; a data task lost
with its worker is rerun under the same policy, ``data/runner.py``).

Kinds:

- ``inline``: the call runs in this process, to its end, at ``submit`` (its exception is kept whole, so a
  one-step command can raise it again; its output reaches the terminal, its signal handlers stay in charge).
- ``local``: each call runs in a worker process forked from this one and reused from call to call, in a
  session of its own (a Ctrl-C in the terminal reaches only the caller, which decides); calls and results go
  through a pipe. ``terminate`` raises ``KeyboardInterrupt`` in the call (SIGTERM); ``kill`` SIGKILLs the
  worker's process group (the step process and torchrun's ranks with it); a worker that dies loses only
  its call. A worker never outlives its caller: a thread in each notices when its parent is gone (a driver
  killed with SIGKILL) and stops the call the same way; the worker ends when the call returns, or after
  :data:`ORPHAN_GRACE_S` whatever the call does.
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
"""How often a pool worker looks whether the process that started it is still alive."""
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
class _Worker:
    process: multiprocessing.process.BaseProcess
    conn: Connection


@dataclass(eq=False)
class _Call:
    worker: _Worker
    outcome: Outcome | None = None


class ProcessPool:
    """Runs calls on forked worker processes, one call at a time each, reused from call to call (so what a
    worker caches, a tokenizer or MinHash permutations, serves its next calls); the caller keeps at most
    ``size`` calls in flight, so there are at most ``size`` workers."""

    kind = "local"

    def __init__(self, size: int) -> None:
        self.size = size
        self._idle: list[_Worker] = []
        self._calls: set[_Call] = set()

    def submit(self, fn: Callable, *args: Any, cpus: float = 1, gpus: float = 0, name: str = "") -> _Call:
        worker = self._idle.pop() if self._idle else self._start_worker()
        worker.conn.send((fn, args))
        call = _Call(worker)
        self._calls.add(call)
        return call

    def _start_worker(self) -> _Worker:
        # fork, not spawn: no re-import of the caller's __main__, and a worker starts in milliseconds
        context = multiprocessing.get_context("fork")
        mine, theirs = context.Pipe()
        process = context.Process(target=_worker_loop, args=(theirs, os.getpid()), daemon=True)
        process.start()
        theirs.close()
        return _Worker(process, mine)

    def pid(self, handle: _Call) -> int | None:
        return handle.worker.process.pid

    def wait(self, handles: Sequence[_Call], timeout_s: float) -> list[_Call]:
        waiting = {h.worker.conn: h for h in handles if h.outcome is None} | {
            h.worker.process.sentinel: h for h in handles if h.outcome is None}
        ready = wait_ready(list(waiting), timeout_s) if waiting else []
        done = {waiting[r] for r in ready} | {h for h in handles if h.outcome is not None}
        return [h for h in handles if h in done]

    def poll(self, handle: _Call) -> Outcome | None:
        if handle.outcome is None:
            worker = handle.worker
            if worker.conn.poll():
                handle.outcome = self._receive(handle)
            elif wait_ready([worker.process.sentinel], 0):  # it ended (its exit status may still be on the way)
                worker.process.join()
                handle.outcome = self._receive(handle) if worker.conn.poll() else self._lost(handle)
        return handle.outcome

    def _receive(self, handle: _Call) -> Outcome:
        try:
            kind, payload = handle.worker.conn.recv()
        except (EOFError, OSError):
            return self._lost(handle)
        self._calls.discard(handle)
        self._idle.append(handle.worker)
        where = {"host": socket.gethostname(), "pid": handle.worker.process.pid}
        return Outcome(value=payload, **where) if kind == "value" else Outcome(error=payload, **where)

    def _lost(self, handle: _Call) -> Outcome:
        self._calls.discard(handle)
        _retire(handle.worker, signal.SIGKILL)
        return Outcome(lost="a worker process died", host=socket.gethostname(), pid=handle.worker.process.pid)

    def terminate(self, handle: _Call) -> None:
        """SIGTERM the call's worker: the call sees ``KeyboardInterrupt`` (a step passes SIGTERM on)."""
        if handle.outcome is None and handle.worker.process.exitcode is None:
            _signal(handle.worker.process.pid, signal.SIGTERM, group=False)

    def kill(self, handle: _Call) -> None:
        """SIGKILL the call's worker with its whole process group, and wait for it to end."""
        if handle.outcome is None:
            _signal(handle.worker.process.pid, signal.SIGKILL, group=True)
            handle.worker.process.join()

    def close(self, wait: bool = True) -> None:
        """End the workers; the calls still in flight finish first (``wait``) or are killed."""
        for call in list(self._calls):
            if wait:
                while self.poll(call) is None:
                    self.wait([call], PARENT_CHECK_S)
            else:
                self.kill(call)
                self.poll(call)
        for worker in self._idle:
            _retire(worker, None)
        self._idle = []


def _retire(worker: _Worker, signum: int | None) -> None:
    """End ``worker``: told to stop when idle (its pipe never reads as closed: the workers forked after it hold
    its other end too), or sent ``signum`` with its process group."""
    if signum is not None:
        if worker.process.exitcode is None:
            _signal(worker.process.pid, signum, group=True)
    else:
        try:
            worker.conn.send(None)
        except OSError:  # it is gone already
            pass
    worker.conn.close()
    worker.process.join()


def _signal(pid: int, signum: int, group: bool) -> None:
    try:
        os.killpg(pid, signum) if group else os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _worker_loop(conn: Connection, parent_pid: int) -> None:
    """A pool worker: in a session of its own, run each call it is sent and send back what it returned or
    raised, until its input is closed."""
    os.setsid()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    threading.Thread(target=_stop_when_orphaned, args=(parent_pid,), name="parent-watch", daemon=True).start()
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        if message is None:  # the pool is closing
            return
        fn, args = message
        try:
            message = ("value", fn(*args))
        except BaseException as exc:  # noqa: B036 — sent to the caller, which decides
            message = ("error", exc)
        try:
            conn.send(message)
        except (OSError, ValueError):  # the caller is gone
            return
        except Exception as exc:  # the value or the exception does not pickle: its line is what counts
            conn.send(("error", RuntimeError(f"{type(exc).__name__}: {exc}; the call's result: {message[1]!r:.300}")))
        if os.getppid() != parent_pid:  # orphaned during the call (which took the guard's signal): end now
            return


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
    try:
        from glasslab.lab.pool_ray import RayPool
    except ImportError as exc:
        raise UserError(f"--backend ray: Ray is not installed ({exc}); pip install 'glasslab[ray]'") from None
    return RayPool(size, address, local_cpus, local_gpus)
