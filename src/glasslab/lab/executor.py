"""The executor: runs a DAG of steps in dependency order on the task pool, reusing what succeeded.

    report = Executor("lab", backend="local", jobs=2).run(steps, force=("train",))

For each step the plan says *run* or *cached*. A step to run is locked (see lock.py), marked
``running`` in its ``step.json``, and started on the backend as soon as its dependencies have
succeeded and fewer than ``jobs`` steps are in flight (each attempt one call on the lab's
task pool, pool.py and step_task.py). A step is marked ``succeeded`` only when its
function returned; otherwise ``failed`` with the error, its folder kept so a rerun can resume. Retries
follow the step's RetryPolicy; an attempt the pool lost (its worker or Ray node died) is a ``node_lost``
incident and is tried again under the policy's ``lost``. Every start, success, failure and retry is a lab
event. On an object-store lab a step may run in another node's working copy (``node_copy.py``): the
executor pulls its folder when each attempt ends.

Several executors may run the same DAG at once: a step locked by another executor is waited for and
its result adopted, so each step runs once. A lock left by a dead executor is taken over.

SIGTERM or SIGINT to the executor is passed on to the running steps as SIGTERM (a trainer
checkpoints); after ``term_grace_s`` they are killed. They are marked failed ("interrupted by
SIGTERM"), even when the function returned after the signal (a preempted trainer does), so the next
run resumes them; nothing new starts. A step function that stops early for any other reason must
raise, or it counts as succeeded.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import shutil
import signal
import socket
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from glasslab.config import redact, to_dict
from glasslab.errors import UserError
from glasslab.lab.attempt import AttemptResult, WorkerSpec
from glasslab.lab.card import ExperimentCard, record_run
from glasslab.lab.display import ProgressPrinter, plan_table, report_table
from glasslab.lab.inputs import resolve_outputs
from glasslab.lab.lock import GUARD_FILE, LOCK_FILE, StepLock, new_owner_id
from glasslab.lab.narrate import INTERVAL_S as NARRATE_INTERVAL_S
from glasslab.lab.narrate import Narrator
from glasslab.lab.outcome import RunReport, StepOutcome
from glasslab.lab.plan import Plan, PlannedStep, make_plan
from glasslab.lab.pool import open_pool
from glasslab.lab.retry import RetryPolicy
from glasslab.lab.status import create_step_record, read_step_record, write_step_record
from glasslab.lab.step import Step
from glasslab.lab.step_task import poll_attempt, submit_attempt
from glasslab.layout import code_version
from glasslab.store.mirror import mirror_of
from glasslab.track import log_lab_event

BACKENDS = ("local", "ray")
LOOP_INTERVAL_S = 0.05
LOCK_POLL_INTERVAL_S = 0.5


@dataclass
class _Active:
    """A step this executor holds the lock of: running, or waiting to be retried."""

    node: PlannedStep
    lock: StepLock
    record: dict[str, Any]
    handle: Any = None
    failures: int = 0
    losses: int = 0
    """Attempts the pool lost (their worker or node died), counted apart from failures (``RetryPolicy.lost``)."""
    retry_at: float | None = None
    attempt_started: float = 0.0
    lock_lost: bool = False
    stopped: bool = False
    """The executor passed its stop signal on to this attempt: it cannot count as succeeded."""


class Executor:
    """Runs steps under ``lab_root`` on the ``local`` or ``ray`` backend, ``jobs`` steps at a time.

    ``backend`` may also be a pool (``one_step.py`` passes an :class:`~glasslab.lab.pool.InlinePool`, which
    runs the function in this process; the executor then leaves the process's signals alone).
    ``retries``: when given, every step is retried up to this many times after a failure, whatever
    its own ``RetryPolicy.count`` says (``--retries``); ``re_register``: steps may replace registered
    predictions (``--re-register``, see ``StepContext.re_register``); ``force_registration``: a hero may run on a fit
    the registration gate refused, marked forced (``--force-registration``).
    ``heartbeat_s``: how often held locks and ``step.json`` heartbeats are refreshed;
    ``stale_after_s``: a lock older than this is taken over (same host: at once if its holder died);
    ``term_grace_s``: after a SIGTERM, how long running steps get before they are killed;
    ``narrate``: at each heartbeat, tell each running training step's progress and incidents (narrate.py).
    """

    def __init__(
        self, lab_root: str | Path, backend: str | Any = "local", jobs: int = 1, address: str | None = None, *,
        retries: int | None = None, re_register: bool = False, force_registration: bool = False,
        heartbeat_s: float = 5.0,
        stale_after_s: float = 60.0, term_grace_s: float = 60.0, echo: bool = True, narrate: bool = False,
    ) -> None:
        name = backend if isinstance(backend, str) else backend.kind
        if isinstance(backend, str) and backend not in BACKENDS:
            raise UserError(f"--backend {backend!r}: expected one of {', '.join(BACKENDS)}")
        if not (isinstance(jobs, int) and jobs >= 1):
            raise UserError(f"--jobs {jobs!r}: expected an integer >= 1")
        if address and name != "ray":
            raise UserError(f"--address {address!r}: only the ray backend joins a cluster")
        if retries is not None and not (isinstance(retries, int) and retries >= 0):
            raise UserError(f"--retries {retries!r}: expected an integer >= 0")
        self.lab_root = Path(lab_root)
        self.backend_name = name
        self._backend = None if isinstance(backend, str) else backend
        self.retries = retries
        self.re_register = re_register
        self.force_registration = force_registration
        self.jobs = jobs
        self.address = address
        self.heartbeat_s = heartbeat_s
        self.stale_after_s = stale_after_s
        self.term_grace_s = term_grace_s
        self.progress = ProgressPrinter(enabled=echo)
        self.narrate = narrate and echo
        self.narrate_interval_s = NARRATE_INTERVAL_S
        self.tables = Console(highlight=False)  # plans and results go to stdout, progress to stderr
        self.echo = echo
        self._owner = new_owner_id()
        self._mirror = mirror_of(self.lab_root)
        """The object-store root this lab is a working copy of, or None (a local folder)."""
        self._mutex = threading.Lock()
        self._active: dict[str, _Active] = {}
        self._stop: str | None = None
        self._wake = threading.Event()
        self._hurry = False

    # --- public ---------------------------------------------------------------------------------

    def plan(self, steps: Sequence[Step], force: Iterable[str] = ()) -> Plan:
        """Check the DAG and decide what runs (raises UserError before anything runs)."""
        return make_plan(steps, self.lab_root, force, self.stale_after_s)

    def run(self, steps: Sequence[Step], force: Iterable[str] = (), dry_run: bool = False,
            experiment: str | None = None, card: ExperimentCard | None = None) -> RunReport:
        """Run what the plan says (nothing when ``dry_run``); returns every step's outcome.

        ``experiment``: the name this run of steps is recorded under (its ``card``, when given, is
        stored in the lab first, see ``card.py``), so ``glasslab card NAME`` can find its folders."""
        plan = self.plan(steps, force)
        if dry_run:
            if self.echo:
                self.tables.print(plan_table(plan))
            return RunReport(plan)
        if experiment is not None:
            record_run(self.lab_root, experiment, card, {node.name: node.key for node in plan.steps})
        config_pickles = {node.key: _pickle_config(node, self.lab_root) for node in plan.to_run()}
        report = RunReport(plan, {node.key: StepOutcome("cached", by="before") for node in plan.cached()})
        if not plan.to_run():
            self.progress.line("✓", str(self.lab_root), f"nothing to run: {len(plan.steps)} steps cached",
                               "green")
            return report
        backend = self._make_backend(plan)  # first: a wrong --address is the only line said
        self.progress.line("▶", str(self.lab_root), f"{len(plan.to_run())} steps to run, "
                           f"{len(plan.cached())} cached, backend {self.backend_name}, jobs {self.jobs}")
        code = code_version()
        self._stop, self._hurry, self._active = None, False, {}
        self._wake.clear()
        for node in plan.to_run():
            node.folder.mkdir(parents=True, exist_ok=True)
            create_step_record(node.folder, self._base_record(node, code) | {"status": "pending"})
        restore = self._install_signal_handlers() if self._backend is None else (lambda: None)
        heartbeat = threading.Thread(target=self._heartbeat_loop, name="step-heartbeat", daemon=True)
        heartbeat.start()
        try:
            self._loop(plan, report, backend, code, config_pickles)
        finally:
            self._stop_everything(report, backend)
            self._stop = "done"  # ends the heartbeat thread
            self._wake.set()
            heartbeat.join()
            restore()
            backend.close()
        if self.echo:
            self.tables.print(report_table(report))
        return report

    # --- the loop --------------------------------------------------------------------------------

    def _loop(self, plan: Plan, report: RunReport, backend: Any, code: dict, config_pickles: dict) -> None:
        todo = list(plan.to_run())
        seen_locked: set[str] = set()
        next_lock_try: dict[str, float] = {}
        while (todo or self._active) and not self._stop:
            now = time.time()
            for node in list(todo):
                if len(self._active) >= self.jobs:
                    break
                deps = [report.outcomes.get(d.key) for d in node.deps.values()]
                if any(o is not None and not o.ok for o in deps):
                    todo.remove(node)
                    bad = [d.key for d in node.deps.values() if not report.outcomes[d.key].ok]
                    report.outcomes[node.key] = StepOutcome("skipped",
                                                            error=f"dependency {bad[0]} did not succeed")
                    self.progress.line("-", node.key, f"skipped: {bad[0]} did not succeed", "yellow")
                    continue
                if not all(o is not None for o in deps) or now < next_lock_try.get(node.key, 0.0):
                    continue
                if self._claim(node, report, seen_locked, code, backend, config_pickles):
                    todo.remove(node)
                else:
                    next_lock_try[node.key] = now + LOCK_POLL_INTERVAL_S
            for key, active in list(self._active.items()):
                if active.lock_lost:
                    self._finish_lost(key, active, report, backend)
                elif active.handle is not None:
                    result = poll_attempt(backend, active.handle)
                    if result is not None:
                        self._finish_attempt(active, result, report)
                elif active.retry_at is not None and now >= active.retry_at:
                    self._launch(active, backend, config_pickles)
            time.sleep(LOOP_INTERVAL_S)

    def _claim(self, node: PlannedStep, report: RunReport, seen_locked: set[str], code: dict, backend: Any,
               config_pickles: dict) -> bool:
        """Lock ``node`` and start it, or adopt another executor's result; False while it is locked."""
        lock = StepLock(node.folder, self._owner, self.stale_after_s)
        if not lock.try_acquire():
            if node.key not in seen_locked:
                seen_locked.add(node.key)
                holder = lock.holder() or {}
                self.progress.line("…", node.key, f"waiting: running in another executor "
                                   f"({holder.get('host')}:{holder.get('pid')})", "dim")
            return False
        record = read_step_record(node.folder) or {}
        status = record.get("status")
        ours = record.get("hash") in (None, node.hash)  # a pinned folder may hold another step's record
        if ours and ((node.key in seen_locked and status in ("succeeded", "failed")) or (
            status == "succeeded" and not node.forced
        )):
            lock.release()
            outcome = "cached" if status == "succeeded" else "failed"
            report.outcomes[node.key] = StepOutcome(outcome, record.get("attempts", 0),
                                                    error=record.get("error"), by="elsewhere")
            self.progress.line("✓" if outcome == "cached" else "✗", node.key,
                               f"{status} in another executor", "green" if outcome == "cached" else "red")
            return True
        if node.forced:
            _clear_folder(node.folder)
        taken = lock.taken_over
        history = record.get("history", [])
        if taken and history and history[-1].get("status") == "running":
            history[-1].update(status="failed", error="its executor died (lock taken over)")
        if taken:
            self._event("node_lost", node, *_lost_node_words(node.name, taken), severity="incident")
        record = self._base_record(node, code) | {
            "status": "pending", "attempts": record.get("attempts", 0), "history": history,
            "timings": {"created": record.get("timings", {}).get("created", time.time())},
        }
        active = _Active(node, lock, record)
        with self._mutex:
            self._active[node.key] = active
        note = f" (took over from {taken.get('host')}:{taken.get('pid')})" if taken else ""
        self._launch(active, backend, config_pickles, note)
        return True

    def _launch(self, active: _Active, backend: Any, config_pickles: dict, note: str = "") -> None:
        node, record = active.node, active.record
        attempt = record["attempts"] + 1
        now = time.time()
        active.retry_at, active.attempt_started = None, now
        with self._mutex:
            record.update(status="running", attempts=attempt, host=socket.gethostname(), pid=os.getpid(),
                          heartbeat=now, error=None, result=None)
            record["timings"].update(started=now, finished=None, duration_s=None)
            record["history"].append({"attempt": attempt, "started": now, "finished": None,
                                      "status": "running", "error": None, "worker_host": None,
                                      "worker_pid": None})
            write_step_record(node.folder, record)
        self._event("step_started", node, f"{node.name} started (attempt {attempt}){note}",
                    f"folder {node.folder}; backend {self.backend_name}")
        self.progress.line("▶", node.key, f"started (attempt {attempt}){note}", "bold")
        spec = WorkerSpec(
            name=node.name, step_hash=node.hash, ref=node.ref, config_pickle=config_pickles[node.key],
            output_dir=str(node.folder.resolve()),
            inputs={name: str(dep.folder.resolve()) for name, dep in node.deps.items()},
            lab_root=str(self.lab_root.resolve()), attempt=attempt, workers=node.step.resources.workers,
            re_register=self.re_register, force_registration=self.force_registration,
            lab_url=self._mirror.root.url if self._mirror is not None else "",
        )
        active.handle = submit_attempt(backend, spec, node.step.resources)
        worker_pid = backend.pid(active.handle)
        if worker_pid is not None:
            active.lock_lost = not active.lock.refresh(worker_pid)

    def _finish_attempt(self, active: _Active, result: AttemptResult, report: RunReport) -> None:
        node, record = active.node, active.record
        now = time.time()
        duration = now - active.attempt_started
        active.handle = None
        if self._mirror is not None and self.backend_name == "ray":  # it may have run in another node's copy
            self._mirror.pull(node.folder)
        if active.stopped:
            # A trainer stopped by SIGTERM checkpoints and returns normally: that is not "done".
            reason = result.error or "returned after the signal"
            result = dataclasses.replace(result, ok=False, error=f"interrupted by {self._stop}: {reason}",
                                         value=None)
        if result.ok:
            status = "succeeded"
        else:
            if result.lost:
                active.losses += 1
            else:
                active.failures += 1
            status = "failed"
        with self._mutex:
            record.update(status=status, error=result.error, heartbeat=now, result=result.value)
            record["timings"].update(finished=now, duration_s=round(duration, 3))
            record["history"][-1].update(finished=now, status=status, error=result.error,
                                         worker_host=result.host, worker_pid=result.pid)
            write_step_record(node.folder, record)
        policy = self.retry_policy(node.step)
        if result.ok:
            self._event("step_succeeded", node, f"{node.name} succeeded in {duration:.1f} s")
            self.progress.line("✓", node.key, f"succeeded in {duration:.1f} s", "green")
        elif not self._stop and result.lost and active.losses <= policy.lost:
            delay = policy.delay_s(active.losses)
            active.retry_at = now + delay
            self._event("node_lost", node, f"{node.name}: its worker was lost; trying again",
                        f"{result.error}; attempt {record['attempts']}, after {duration:.0f} s; lost "
                        f"{active.losses} of at most {policy.lost} times", "incident")
            self.progress.line("↻", node.key, f"lost ({result.error}); trying again in {delay:.1f} s", "yellow")
            return
        elif not self._stop and not result.lost and policy.should_retry(active.failures):
            delay = policy.delay_s(active.failures)
            active.retry_at = now + delay
            self._event("step_retried", node, f"{node.name} failed; retry {active.failures} of "
                        f"{policy.count} in {delay:.1f} s", result.error or "", "warning")
            self.progress.line("↻", node.key, f"failed ({result.error}); retrying in {delay:.1f} s", "yellow")
            return
        else:
            interrupted = bool(self._stop)
            self._event("step_failed", node, f"{node.name} {'interrupted' if interrupted else 'failed'}",
                        result.error or "", "warning" if interrupted else "incident")
            word = "interrupted" if interrupted else "failed"
            self.progress.line("✗", node.key, f"{word}: {result.error}", "red")
        with self._mutex:
            del self._active[node.key]
        active.lock.release()
        final = "interrupted" if (not result.ok and self._stop) else status
        report.outcomes[node.key] = StepOutcome(final, record["attempts"], round(duration, 3), result.error)

    def _finish_lost(self, key: str, active: _Active, report: RunReport, backend: Any) -> None:
        """Another executor took this step's lock over (ours looked dead): stop without writing."""
        if active.handle is not None:
            backend.kill(active.handle)
        with self._mutex:
            del self._active[key]
        report.outcomes[key] = StepOutcome("lost", active.record["attempts"],
                                           error="lock taken over by another executor")
        self.progress.line("✗", key, "lost its lock to another executor; stopped", "red")

    def _stop_everything(self, report: RunReport, backend: Any) -> None:
        """On a signal (or an error in the loop): SIGTERM running steps, wait, then kill; record them."""
        if not self._active:
            return
        self._stop = self._stop or "error"
        report.interrupted = self._stop
        for active in self._active.values():
            if active.handle is not None:
                active.stopped = True
                backend.terminate(active.handle)
        deadline = time.time() + self.term_grace_s
        killed = False
        while self._active:
            if not killed and (time.time() > deadline or self._hurry):
                for active in self._active.values():
                    if active.handle is not None:
                        backend.kill(active.handle)
                killed = True
            for key, active in list(self._active.items()):
                if active.handle is None:  # waiting for a retry: its last failure stays in step.json
                    with self._mutex:
                        del self._active[key]
                    active.lock.release()
                    report.outcomes[key] = StepOutcome("interrupted", active.record["attempts"],
                                                       error=active.record.get("error"))
                    continue
                result = poll_attempt(backend, active.handle)
                if result is not None:
                    self._finish_attempt(active, result, report)
            time.sleep(LOOP_INTERVAL_S)

    # --- helpers ---------------------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        # The narrator's store readers live and die in this thread (SQLite connections stay in theirs).
        narrator = Narrator(self.progress, self.narrate_interval_s) if self.narrate else None
        try:
            while not self._stop or self._active:
                running: dict[str, tuple[Path, float]] = {}
                with self._mutex:
                    for active in self._active.values():
                        if active.lock_lost:
                            continue
                        if not active.lock.refresh():
                            active.lock_lost = True
                            continue
                        if active.record.get("status") == "running":
                            active.record["heartbeat"] = time.time()
                            write_step_record(active.node.folder, active.record)
                            if active.handle is not None:
                                running[active.node.key] = (active.node.folder, active.attempt_started)
                if narrator is not None:
                    narrator.update(running)
                if self._stop == "done":
                    return
                self._wake.wait(self.heartbeat_s)
        finally:
            if narrator is not None:
                narrator.close()

    def _install_signal_handlers(self):
        if threading.current_thread() is not threading.main_thread():
            return lambda: None

        def on_signal(signum: int, frame: Any) -> None:
            name = signal.Signals(signum).name
            if self._stop and self._stop != "done":
                self._hurry = True  # a second signal: stop waiting for the steps
                return
            self._stop = name
            self.progress.line("■", str(self.lab_root), f"{name}: passing SIGTERM to running steps", "red")

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}

        def restore() -> None:
            for s, handler in previous.items():
                signal.signal(s, handler)

        return restore

    def retry_policy(self, step: Step) -> RetryPolicy:
        """The step's own retry policy, with ``count`` replaced by ``--retries`` when that was given."""
        if self.retries is None:
            return step.retry
        return dataclasses.replace(step.retry, count=self.retries)

    def _make_backend(self, plan: Plan) -> Any:
        if self._backend is not None:
            return self._backend
        # A local Ray is sized so that the largest step fits (logical CPUs may exceed cores).
        need_cpus = max(n.step.resources.cpus * n.step.resources.workers for n in plan.to_run())
        need_gpus = max(n.step.resources.gpus * n.step.resources.workers for n in plan.to_run())
        return open_pool(self.backend_name, self.jobs, self.address, local_cpus=max(os.cpu_count() or 1,
                         int(need_cpus + 0.999)), local_gpus=int(need_gpus + 0.999))

    def _base_record(self, node: PlannedStep, code: dict) -> dict[str, Any]:
        step = node.step
        return {
            "name": node.name, "hash": node.hash, "folder": node.key, "function": str(node.ref),
            "config": redact(to_dict(step.config)),
            "dependencies": {name: dep.key for name, dep in node.deps.items()},
            "resources": to_dict(step.resources), "retry": to_dict(self.retry_policy(step)), "code_version": code,
            "status": "pending", "attempts": 0, "timings": {"created": time.time()},
            "host": None, "pid": None, "heartbeat": None, "error": None, "result": None, "history": [],
        }

    def _event(self, kind: str, node: PlannedStep, title: str, body: str = "",
               severity: str = "info") -> None:
        log_lab_event(self.lab_root, kind, subject=node.key, title=title, body=body, severity=severity)


def _lost_node_words(name: str, taken: dict[str, Any]) -> tuple[str, str]:
    """The title and body of a ``node_lost`` event: whose lock ``taken`` (the stale record) was, and when it
    last beat."""
    heartbeat = float(taken.get("heartbeat") or 0)
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(heartbeat))
    return (f"{name}: its node was lost ({taken.get('host')}, pid {taken.get('pid')}); taken over here",
            f"last heartbeat {when}, {time.time() - heartbeat:.0f} s before the takeover; the step starts again "
            "here and a run resumes from its last checkpoint")


def _pickle_config(node: PlannedStep, lab_root: Path) -> bytes:
    try:
        folders = {name: dep.folder.resolve() for name, dep in node.deps.items()}
        return pickle.dumps(resolve_outputs(node.step.config, folders, node.name, lab_root))
    except Exception as exc:
        raise UserError(f"step {node.name!r}: config cannot be sent to the step process ({exc})") from None


def _clear_folder(folder: Path) -> None:
    """Empty a forced step's folder (keeping the lock files), so it starts from scratch."""
    for path in folder.iterdir():
        if path.name in (LOCK_FILE, GUARD_FILE):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
