"""Runs a stage's tasks on local processes or on Ray, each at most once per build, resuming by task.

A task is a module-level function ``fn(arg, folder) -> dict`` and its argument; it writes only into its
own folder ``<work>/<stage>/<task id>/`` and its small result (counts) is written last, atomically, as
``done.json`` — the task's **completion marker**. A task whose marker exists is not run again: a build
killed at any moment (SIGKILL included) resumes with the tasks it had not finished, and a task folder
without a marker is wiped before its task runs. A stage never knows which executor runs it.

Executors (``--backend``, ``--workers N``):

- ``local``: a pool of ``N`` forked processes (``N == 1``: this process, no pool). A worker that dies
  mid-task (killed, out of memory) breaks the pool; the tasks that were running are rerun on a fresh
  pool, said once on the console and recorded (``build.json``: ``reruns``). A task that takes
  :data:`MAX_ATTEMPTS` workers down with it fails the build naming it. A worker never outlives the build
  that started it: a thread in each notices when its parent is gone (a build killed with SIGKILL) and ends
  it, as the lab's step processes do; its task's folder has no marker, so the next build runs it again.
- ``ray``: every task a Ray task asking for one CPU, at most ``N`` in flight (default: the cluster's
  CPUs); the Ray the lab's steps use, joined the one way (``lab/ray_join.py``): at ``--address``, or the cluster
  the enclosing step runs on (the lab's Ray backend names it in :data:`RAY_ADDRESS_ENV`), or a local Ray
  started here. A worker Ray loses is handled as above; Ray itself failing (its raylet lost, say) ends the
  build with one line, a :class:`~glasslab.errors.SystemFailure`, keeping the finished tasks for the next
  run. The work folder must be on storage every node sees, as the lab root is.

A :class:`~glasslab.errors.UserError` raised by a task (a damaged file) stops the build with its one
line.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glasslab.data.progress import Progress, StageStats
from glasslab.errors import SystemFailure, UserError
from glasslab.lab.attempt import RAY_ADDRESS_ENV
from glasslab.layout import read_json, write_json_atomic

DONE = "done.json"
MAX_ATTEMPTS = 3
"""Times a task may be running when its worker dies before the build gives up on it."""
KILL_TASK_ENV = "GLASSLAB_DATA_KILL_TASK"
"""Fault injection for tests: ``<stage>/<task id>`` makes the worker running that task SIGKILL itself,
once per work folder (a real kill of a real worker, at a known moment)."""
WAIT_S = 0.25
PARENT_CHECK_S = 0.5
"""How often a pool worker looks whether the build that started it is still alive."""


@dataclass(frozen=True)
class Task:
    """One unit of a stage: ``fn(arg, folder)`` and the input bytes it takes in (for progress)."""

    id: str
    fn: Callable[[Any, Path], dict]
    arg: Any
    input_bytes: int = 0


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask, which a container or ``taskset`` narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def execute(fn: Callable[[Any, Path], dict], arg: Any, folder: str, kill_mark: str) -> dict:
    """Run one task in ``folder`` (a worker's entry point) and write its completion marker; the marker of a
    run that already finished is returned as is."""
    folder_path = Path(folder)
    done = read_json(folder_path / DONE)
    if done is not None:
        return done
    shutil.rmtree(folder_path, ignore_errors=True)
    folder_path.mkdir(parents=True)
    if kill_mark and not os.path.exists(kill_mark):
        Path(kill_mark).write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        result = fn(arg, folder_path)
    except UserError as exc:  # its subclasses may not unpickle on the other side; the line is what counts
        raise UserError(str(exc)) from None
    write_json_atomic(folder_path / DONE, result)
    return result


def _exit_with_parent(parent_pid: int) -> None:
    """A pool worker's initializer: a daemon thread ends the worker (``os._exit``) once ``parent_pid`` is no
    longer its parent. A worker waiting for its next task would otherwise wait forever after a SIGKILL of
    the build, since nothing closes its queue."""
    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), name="parent-watch", daemon=True).start()


def _exit_when_orphaned(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(PARENT_CHECK_S)
    os._exit(128 + signal.SIGKILL)


class TaskRunner:
    """Runs stages of tasks under ``work`` with ``workers`` at once on ``backend`` (``local`` or ``ray``)."""

    def __init__(self, work: Path, workers: int, backend: str, progress: Progress, address: str = "") -> None:
        self.work, self.backend, self.progress = work, backend, progress
        self.reruns: list[dict] = []
        self._pool: ProcessPoolExecutor | None = None
        self._ray_started_here = False
        if backend == "ray":
            self._remote = _join_ray(address or os.environ.get(RAY_ADDRESS_ENV, ""), workers)
            self._ray_started_here = self._remote.started_here
            workers = workers or max(1, int(self._remote.cpus))
        self.workers = workers or available_cpus()
        progress.workers, progress.backend = self.workers, backend

    # --- the stage loop --------------------------------------------------------------------------

    def run(self, stage: str, tasks: list[Task], skip: Callable[[Task, dict[str, dict]], bool] | None = None,
            counts: str = "docs kept") -> dict[str, dict]:
        """Run ``tasks`` (those without a completion marker) and return every finished task's result by id.

        ``skip(task, results)``, asked just before a task would start, may leave it out (it then has no
        result); ``results`` holds the tasks finished so far. ``counts`` names what the tasks'
        ``documents_kept`` count, for the progress line.
        """
        stats = self.progress.start(stage, len(tasks), counts)
        folder = self.work / stage
        folder.mkdir(parents=True, exist_ok=True)
        results: dict[str, dict] = {}
        pending: deque[Task] = deque()
        for task in tasks:
            done = read_json(folder / task.id / DONE)
            if done is not None:
                results[task.id] = done
                self._count(stats, task, done, reused=True)
            else:
                pending.append(task)
        self.progress.update(force=True)
        if self.backend == "ray":
            self._run_ray(stage, pending, results, stats, skip)
        elif self.workers == 1:
            self._run_inline(stage, pending, results, stats, skip)
        else:
            self._run_pool(stage, pending, results, stats, skip)
        self.progress.end()
        return results

    def _count(self, stats: StageStats, task: Task, result: dict, reused: bool = False) -> None:
        stats.tasks_done += 1
        stats.tasks_reused += int(reused)
        stats.input_bytes += task.input_bytes
        stats.documents_in += int(result.get("documents_in", 0))
        stats.documents_kept += int(result.get("documents_kept", 0))

    def _args(self, stage: str, task: Task) -> tuple:
        kill = os.environ.get(KILL_TASK_ENV, "")
        mark = str(self.work / f"{stage}.{task.id}.killed") if kill == f"{stage}/{task.id}" else ""
        return task.fn, task.arg, str(self.work / stage / task.id), mark

    def _run_inline(self, stage, pending, results, stats, skip) -> None:
        for task in pending:
            if skip is not None and skip(task, results):
                stats.tasks_done += 1
                continue
            results[task.id] = execute(*self._args(stage, task))
            self._count(stats, task, results[task.id])
            self.progress.update()

    def _run_pool(self, stage, pending, results, stats, skip) -> None:
        attempts: dict[str, int] = {}
        running: dict[Future, Task] = {}
        while pending or running:
            while pending and len(running) < self.workers:
                task = pending.popleft()
                if skip is not None and skip(task, results):
                    stats.tasks_done += 1
                    continue
                running[self._local_pool().submit(execute, *self._args(stage, task))] = task
            if not running:
                continue
            finished, _ = wait(running, timeout=WAIT_S, return_when=FIRST_COMPLETED)
            lost: list[Task] = []
            for future in finished:
                task = running.pop(future)
                try:
                    results[task.id] = future.result()
                except BrokenProcessPool:
                    lost.append(task)
                    continue
                except BaseException as exc:
                    # bad input: let the running tasks end, so none writes into a work folder being removed
                    self._drop_pool(wait=isinstance(exc, UserError))
                    raise
                self._count(stats, task, results[task.id])
            if lost:  # the pool is broken: every task still running on it is lost with it
                lost += running.values()
                running.clear()
                self._drop_pool()
                self._rerun(stage, lost, attempts, stats, "a worker process died")
                pending.extendleft(reversed(lost))
            self.progress.update()

    def _run_ray(self, stage, pending, results, stats, skip) -> None:
        import ray

        try:
            self._ray_loop(stage, pending, results, stats, skip)
        except ray.exceptions.RayError as exc:  # not a task's error nor a lost worker: Ray itself went wrong
            cause = (str(exc).strip().splitlines() or [""])[0]
            raise SystemFailure(f"data build: Ray failed during {stage} ({type(exc).__name__}: {cause}); the "
                                f"finished tasks are kept in {self.work}: run the same build again to resume "
                                "from them") from None

    def _ray_loop(self, stage, pending, results, stats, skip) -> None:
        import ray

        attempts: dict[str, int] = {}
        running: dict[Any, Task] = {}
        while pending or running:
            while pending and len(running) < self.workers:
                task = pending.popleft()
                if skip is not None and skip(task, results):
                    stats.tasks_done += 1
                    continue
                running[self._remote.submit(*self._args(stage, task))] = task
            if not running:
                continue
            finished, _ = ray.wait(list(running), num_returns=1, timeout=WAIT_S)
            for ref in finished:
                task = running.pop(ref)
                try:
                    results[task.id] = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:
                    for other in running:  # none may go on writing into a work folder being removed
                        ray.cancel(other, force=True)
                    cause = exc.cause if isinstance(exc.cause, BaseException) else exc
                    raise (UserError(str(cause)) if isinstance(cause, UserError) else cause) from None
                except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                        ray.exceptions.ObjectLostError, ray.exceptions.TaskUnschedulableError) as exc:
                    self._rerun(stage, [task], attempts, stats, f"Ray lost its worker ({type(exc).__name__})")
                    pending.appendleft(task)
                    continue
                self._count(stats, task, results[task.id])
            self.progress.update()

    def _rerun(self, stage: str, lost: list[Task], attempts: dict[str, int], stats: StageStats, why: str) -> None:
        """Record and say (once per event) that ``lost`` tasks run again; give up on a task that keeps failing."""
        for task in lost:
            attempts[task.id] = attempts.get(task.id, 0) + 1
            if attempts[task.id] >= MAX_ATTEMPTS:
                raise UserError(f"data build: task {stage}/{task.id} was running each of the {MAX_ATTEMPTS} times "
                                f"a worker died ({why}); out of memory? (its input: {task.arg!r:.200})")
        ids = [task.id for task in lost]
        stats.reruns += len(ids)
        self.reruns.append({"stage": stage, "tasks": ids, "reason": why, "time": time.time()})
        self.progress.warn(f"{why} during {stage}: running task(s) {', '.join(ids)} again")

    # --- executors -------------------------------------------------------------------------------

    def _local_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            import multiprocessing

            # fork, not spawn: no re-import of the caller's __main__, and workers start in milliseconds
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("fork"),
                                             initializer=_exit_with_parent, initargs=(os.getpid(),))
        return self._pool

    def _drop_pool(self, wait: bool = False) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=True)
            self._pool = None

    def close(self, wait: bool = True) -> None:
        """Stop the workers (``wait``: let them exit first; an idle pool exits at once)."""
        self._drop_pool(wait)
        if self._ray_started_here:
            import ray

            ray.shutdown()


class _RayTasks:
    """The Ray side: the cluster joined or started, and :func:`execute` as a one-CPU remote function."""

    def __init__(self, started_here: bool) -> None:
        import ray

        self.started_here = started_here
        self.cpus = ray.cluster_resources().get("CPU", 1)
        self._remote = ray.remote(num_cpus=1, max_retries=0)(execute)

    def submit(self, *args: Any) -> Any:
        return self._remote.remote(*args)


def _join_ray(address: str, workers: int) -> _RayTasks:
    """Join Ray the lab's one way (``lab/ray_join.py``) and submit this build's tasks there."""
    from glasslab.lab.ray_join import join_ray

    return _RayTasks(started_here=join_ray(address, workers or available_cpus()))
