"""Every command that makes a folder is a one-step experiment: :func:`run_one_step`.

``glasslab train``, ``glasslab data build`` and ``glasslab ladder fit`` (and later ``export``,
``eval``, SFT) do not write their folders themselves: each builds one :class:`Step` and hands it to
the executor here, so its output has the same name (``<lab>/<name>-<hash8>``, or a pinned
``Step.folder`` such as ``--run-dir``), the same ``step.json``, the same lock and the same lab events
as a step of ``glasslab run``, and a later experiment that plans the same step finds it cached.

    step = Step("data", "glasslab.data.build:build_step", cfg)
    done = run_one_step(step, lab)           # -> StepRun(folder, status "succeeded" | "cached", value)

The function runs in this process (the inline task pool): its output goes to the terminal,
its own signal handlers apply, and when it fails, the failure is recorded and the exception it raised
is raised again here (a ``UserError`` stays one line for the CLI). A folder made by this call that a
``UserError`` left holding nothing but the step's record and lock (bad input refused before any
output) is removed again: the ``step_failed`` lab event keeps the story, no half-made folder stays.
A succeeded step with the same hash is not run again (``status == "cached"``, ``value`` is what
``step.json`` recorded) unless ``force``; a failed one is run again in the same folder (a trainer
resumes from its checkpoints).

Under ``torchrun`` (``WORLD_SIZE > 1``) every rank calls this: rank 0 holds the step's record, lock
and events, the other ranks plan the same step (same folder) and only call the function.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glasslab.errors import UserError
from glasslab.lab.executor import Executor
from glasslab.lab.inputs import resolve_outputs
from glasslab.lab.lock import GUARD_FILE, LOCK_FILE
from glasslab.lab.plan import make_plan
from glasslab.lab.pool import InlinePool
from glasslab.lab.status import read_step_record
from glasslab.lab.step import Step, StepContext
from glasslab.layout import STEP_RECORD, remove


@dataclass(frozen=True)
class StepRun:
    """What became of a one-step experiment."""

    name: str
    folder: Path
    """The step's output folder (its run id is ``folder.name``)."""
    hash: str
    status: str
    """``succeeded`` (the function ran now and returned) or ``cached`` (it had succeeded before)."""
    value: Any
    """What the function returned; for a cached step, the result ``step.json`` recorded (or None)."""
    attempts: int


def run_one_step(step: Step, lab_root: str | Path, *, force: bool = False, re_register: bool = False,
                 force_registration: bool = False) -> StepRun:
    """Run ``step`` (and any dependency without a succeeded folder) in this process as an experiment.

    ``force`` reruns a succeeded step from an emptied folder (as ``glasslab run --force`` does);
    ``re_register`` lets it replace registered predictions, ``force_registration`` run a hero on a
    refused fit. Raises what the function raised when it
    failed, or a UserError when another process ran it and it failed there.
    """
    lab_root = Path(lab_root)
    if int(os.environ.get("RANK", "0")) != 0:
        return _run_on_other_rank(step, lab_root)
    pool = InlinePool()
    executor = Executor(lab_root, backend=pool, echo=False, re_register=re_register,
                        force_registration=force_registration)
    report = executor.run([step], force=[step.name] if force else [])
    node = next(n for n in report.plan.steps if n.step is step)
    outcome = report.outcomes[node.key]
    if outcome.status == "succeeded":
        return StepRun(step.name, node.folder, node.hash, "succeeded", pool.last.value, outcome.attempts)
    if outcome.status == "cached":
        record = read_step_record(node.folder) or {}
        return StepRun(step.name, node.folder, node.hash, "cached", record.get("result"),
                       record.get("attempts", outcome.attempts))
    if outcome.by == "here" and pool.last is not None and pool.last.error is not None:
        if isinstance(pool.last.error, UserError) and outcome.attempts <= 1:
            _remove_if_only_records(node.folder)
        raise pool.last.error
    raise UserError(f"{node.folder}: step {step.name} {outcome.status}"
                    + (f": {outcome.error}" if outcome.error else "") + f" (see {node.folder}/step.json)")


def _remove_if_only_records(folder: Path) -> None:
    """Remove ``folder`` when it holds only the step's record and lock files, and nothing else."""
    records = {STEP_RECORD, LOCK_FILE, GUARD_FILE}
    if folder.is_dir() and all(path.name in records for path in folder.iterdir()):
        remove(folder)


def _run_on_other_rank(step: Step, lab_root: Path) -> StepRun:
    """A torchrun rank other than 0: the same plan, the function only (rank 0 keeps the records)."""
    plan = make_plan([step], lab_root)
    node = plan.steps[-1]
    if node.action == "cached":
        return StepRun(step.name, node.folder, node.hash, "cached", None, 0)
    inputs = {name: dep.folder for name, dep in node.deps.items()}
    config = resolve_outputs(step.config, inputs, step.name, lab_root)
    ctx = StepContext(name=step.name, output_dir=node.folder, config=config, inputs=inputs, lab_root=lab_root,
                      step_hash=node.hash)
    value = node.ref.load()(ctx)
    return StepRun(step.name, node.folder, node.hash, "succeeded", value, 0)
