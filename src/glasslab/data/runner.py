"""Runs a stage's tasks on the lab's task pool (``lab/pool.py``), each at most once per build, resuming by task.

A task is a module-level function ``fn(arg, folder) -> dict`` and its argument; it writes only into its
own folder ``<work>/<stage>/<task id>/`` and its small result (counts) is written last, atomically, as
``done.json`` — the task's **completion marker**. A task whose marker exists is not run again: a build
killed at any moment (SIGKILL included) resumes with the tasks it had not finished, and a task folder
without a marker is wiped before its task runs. A stage never knows which pool runs it.

Pools (``--backend``, ``--workers N``), the same pool the lab's steps run on:

- ``local``: ``N`` forked worker processes, reused from task to task (``N == 1``: the ``inline`` pool, this
  process).
  A worker that dies mid-task (killed, out of memory) loses only its task, which is rerun, said once on the
  console and recorded (``build.json``: ``reruns``); a task lost :data:`MAX_ATTEMPTS` times fails the build
  naming it (:data:`LOST_TASK_RETRY`, the lab's one retry policy). A worker never outlives the build that
  started it (the pool's orphan guard); its task's folder has no marker, so the next build runs it again.
- ``ray``: every task a Ray task asking for one CPU, at most ``N`` in flight (default: the cluster's
  CPUs); Ray joined the lab's one way: at ``--address``, or the cluster the enclosing step runs on (a
  step on Ray names it in :data:`RAY_ADDRESS_ENV`), or a local Ray started here. A worker Ray loses is
  handled as above; Ray itself failing (its raylet lost, say) ends the build with one line, a
  :class:`~glasslab.errors.SystemFailure`, keeping the finished tasks for the next run. The work folder
  must be on storage every node sees, as the lab root is.

A :class:`~glasslab.errors.UserError` raised by a task (a damaged file) stops the build with its one
line.

Every task is accounted (``build.json``'s ``stages``, :class:`~glasslab.data.progress.StageStats`): its CPU
seconds inside the worker (``time.process_time``, the tokenizer's own threads included), its wall seconds,
and the time the pool added around it (starting the worker, pickling the call and its result, the pipe).
CPU seconds move far less than wall times with the machine's load, so they say how much of a stage several
workers can share even on a busy machine (``bench/data_bench.py``).
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glasslab.data.progress import Progress, StageStats
from glasslab.errors import SystemFailure, UserError
from glasslab.lab.attempt import RAY_ADDRESS_ENV
from glasslab.lab.pool import PoolFailure, open_pool
from glasslab.lab.retry import RetryPolicy
from glasslab.layout import read_json, write_json_atomic

DONE = "done.json"
MAX_ATTEMPTS = 3
"""Times a task may be running when its worker dies before the build gives up on it."""
LOST_TASK_RETRY = RetryPolicy(count=MAX_ATTEMPTS - 1, backoff_s=0.0)
"""A task lost with its worker runs again at once, up to :data:`MAX_ATTEMPTS` times in all."""
KILL_TASK_ENV = "GLASSLAB_DATA_KILL_TASK"
"""Fault injection for tests: ``<stage>/<task id>`` makes the worker running that task SIGKILL itself,
once per work folder (a real kill of a real worker, at a known moment)."""
WAIT_S = 0.25


@dataclass(frozen=True)
class TaskRun:
    """What :func:`execute` sends back: the task's result and what it cost inside its worker."""

    result: dict
    cpu_s: float
    wall_s: float


@dataclass(frozen=True)
class Task:
    """One unit of a stage: ``fn(arg, folder)`` and the input bytes it takes in (for progress)."""

    id: str
    fn: Callable[[Any, Path], dict]
    arg: Any
    input_bytes: int = 0


@dataclass(frozen=True)
class Stage:
    """A stage for :meth:`TaskRunner.run_stages`: its tasks, what their ``documents_kept`` count, the stages it
    must wait for, and a ``skip`` rule (:meth:`TaskRunner.run`)."""

    name: str
    tasks: list[Task]
    counts: str = "docs kept"
    after: tuple[str, ...] = ()
    skip: Callable[[Task, dict[str, dict]], bool] | None = None


@dataclass(eq=False)
class _StageRun:
    """A stage while it runs: its progress numbers (once started), tasks to hand out, results, tasks running."""

    stage: Stage
    stats: StageStats | None = None
    pending: deque[Task] = field(default_factory=deque)
    results: dict[str, dict] = field(default_factory=dict)
    losses: dict[str, int] = field(default_factory=dict)
    running: int = 0
    done: bool = False


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask, which a container or ``taskset`` narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def execute(fn: Callable[[Any, Path], dict], arg: Any, folder: str, kill_mark: str) -> TaskRun:
    """Run one task in ``folder`` (a worker's entry point), write its completion marker and return its result
    with its CPU and wall seconds; the marker of a run that already finished is returned as is."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = _execute(fn, arg, Path(folder), kill_mark)
    return TaskRun(result, time.process_time() - cpu, time.perf_counter() - wall)


def _execute(fn: Callable[[Any, Path], dict], arg: Any, folder_path: Path, kill_mark: str) -> dict:
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


class TaskRunner:
    """Runs stages of tasks under ``work`` with ``workers`` at once on ``backend`` (``local`` or ``ray``)."""

    def __init__(self, work: Path, workers: int, backend: str, progress: Progress, address: str = "") -> None:
        self.work, self.backend, self.progress = work, backend, progress
        self.reruns: list[dict] = []
        if backend == "ray":
            self.pool = open_pool("ray", workers, address or os.environ.get(RAY_ADDRESS_ENV, ""),
                                  local_cpus=workers or available_cpus())
        else:
            workers = workers or available_cpus()
            self.pool = open_pool("inline" if workers == 1 else backend, workers)
        self.workers = self.pool.size
        progress.workers, progress.backend = self.workers, backend

    def run(self, stage: str, tasks: list[Task], skip: Callable[[Task, dict[str, dict]], bool] | None = None,
            counts: str = "docs kept") -> dict[str, dict]:
        """Run ``tasks`` (those without a completion marker) and return every finished task's result by id.

        Tasks are handed out largest input first, or in their order when ``skip`` is given:
        ``skip(task, results)``, asked just before a task would start, may leave it out (it then has no
        result); ``results`` holds the tasks finished so far. ``counts`` names what the tasks'
        ``documents_kept`` count, for the progress line.
        """
        return self.run_stages([Stage(stage, tasks, counts, skip=skip)])[stage]

    def run_stages(self, stages: list[Stage]) -> dict[str, dict[str, dict]]:
        """Run stages whose data allow it at the same time; returns each stage's results by task id (as
        :meth:`run`). A stage starts once every stage it comes ``after`` has finished; free workers take the
        tasks of the stages earlier in the list first, so a stage's last tasks and a one-task stage leave no
        worker idle while another stage has tasks."""
        states = [_StageRun(stage) for stage in stages]
        running: dict[Any, tuple[_StageRun, Task, float]] = {}
        while True:
            for state in states:
                if state.stats is None and all(self._finished(states, name) for name in state.stage.after):
                    self._start(state)
            for state in states:
                while state.pending and state.stats is not None and len(running) < self.workers:
                    task = state.pending.popleft()
                    if state.stage.skip is not None and state.stage.skip(task, state.results):
                        state.stats.tasks_done += 1
                        continue
                    start = time.perf_counter()  # before submit: the inline pool runs the task inside it
                    handle = self.pool.submit(execute, *self._args(state.stage.name, task),
                                              name=f"{state.stage.name}/{task.id}")
                    running[handle] = (state, task, start)
                    state.running += 1
                self._end_if_done(state)
            if not running and all(state.done for state in states):
                return {state.stage.name: state.results for state in states}
            for handle in self.pool.wait(list(running), WAIT_S):
                self._collect(handle, running)
            self.progress.update()

    def _finished(self, states: list[_StageRun], name: str) -> bool:
        return next(state for state in states if state.stage.name == name).done

    def _start(self, state: _StageRun) -> None:
        """Start a stage's progress line; take the results of its tasks a run before finished (their markers)."""
        stage = state.stage
        state.stats = self.progress.start(stage.name, len(stage.tasks), stage.counts)
        state.stats.after = list(stage.after)
        folder = self.work / stage.name
        folder.mkdir(parents=True, exist_ok=True)
        # Largest first, so that a stage does not end on one large task while the other workers wait; a stage
        # that may skip tasks keeps the canonical order (its skip looks at the tasks before).
        for task in stage.tasks if stage.skip is not None else sorted(stage.tasks, key=lambda t: -t.input_bytes):
            done = read_json(folder / task.id / DONE)
            if done is not None:
                state.results[task.id] = done
                self._count(state.stats, task, done, reused=True)
            else:
                state.pending.append(task)
        self.progress.update(force=True)

    def _end_if_done(self, state: _StageRun) -> None:
        if state.stats is not None and not state.done and not state.pending and not state.running:
            self.progress.end(state.stats)
            state.done = True

    def _collect(self, handle: Any, running: dict[Any, tuple[_StageRun, Task, float]]) -> None:
        """Take a finished call's outcome into its stage: its result, or a rerun of a task whose worker died,
        or the build's failure."""
        state, task, submitted = running.pop(handle)
        round_trip, name = time.perf_counter() - submitted, state.stage.name
        outcome = self.pool.poll(handle)
        state.running -= 1
        if outcome.lost is not None:
            self._rerun(name, task, state.losses, state.stats, outcome.lost)
            state.pending.appendleft(task)
        elif outcome.error is not None:
            for other in running:  # none may go on writing into a work folder being removed
                self.pool.kill(other)
            raise self._failure(name, outcome.error)
        else:
            run: TaskRun = outcome.value
            state.results[task.id] = run.result
            self._count(state.stats, task, run.result)
            state.stats.add_task(run.cpu_s, run.wall_s, round_trip)
        self._end_if_done(state)

    def _count(self, stats: StageStats, task: Task, result: dict, reused: bool = False) -> None:
        """Add a finished task's counts to its stage's (its costs: :meth:`StageStats.add_task`)."""
        stats.tasks_done += 1
        stats.tasks_reused += int(reused)
        stats.input_bytes += task.input_bytes
        stats.documents_in += int(result.get("documents_in", 0))
        stats.documents_kept += int(result.get("documents_kept", 0))

    def _args(self, stage: str, task: Task) -> tuple:
        kill = os.environ.get(KILL_TASK_ENV, "")
        mark = str(self.work / f"{stage}.{task.id}.killed") if kill == f"{stage}/{task.id}" else ""
        return task.fn, task.arg, str(self.work / stage / task.id), mark

    def _failure(self, stage: str, error: BaseException) -> BaseException:
        if isinstance(error, PoolFailure):
            return SystemFailure(f"data build: Ray failed during {stage} ({error}); the finished tasks are kept in "
                                 f"{self.work}: run the same build again to resume from them")
        return error

    def _rerun(self, stage: str, task: Task, losses: dict[str, int], stats: StageStats, why: str) -> None:
        """Record and say that ``task`` runs again; give up on a task that keeps losing its worker."""
        losses[task.id] = losses.get(task.id, 0) + 1
        if not LOST_TASK_RETRY.should_retry(losses[task.id]):
            raise UserError(f"data build: task {stage}/{task.id} was running each of the {MAX_ATTEMPTS} times "
                            f"a worker died ({why}); out of memory? (its input: {task.arg!r:.200})")
        stats.reruns += 1
        self.reruns.append({"stage": stage, "tasks": [task.id], "reason": why, "time": time.time()})
        self.progress.warn(f"{why} during {stage}: running task {task.id} again")

    def close(self, wait: bool = True) -> None:
        """Stop the pool (``wait``: let the tasks still running end first; else kill them)."""
        self.pool.close(wait)
