"""From a list of steps to a checked DAG with hashes, folders, and what will run or is cached.

Everything a user can get wrong is caught here, before anything runs, as a one-line UserError: an
unknown or ambiguous dependency, a cycle (named step by step), a function other processes cannot
import, a config that is not plain data, two different steps that would write the same folder, and
``--force`` naming no step.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from glasslab.config import to_dict
from glasslab.errors import UserError
from glasslab.lab.lock import StepLock
from glasslab.lab.status import read_step_record
from glasslab.lab.step import FunctionRef, Step, folder_name, function_ref, step_hash


@dataclass
class PlannedStep:
    """One node of the plan: the step, its identity and folder, and the decision about it."""

    step: Step
    ref: FunctionRef
    hash: str
    folder: Path
    deps: dict[str, PlannedStep]
    action: str = "run"
    """``run`` or ``cached`` (a succeeded folder with this hash exists)."""
    reason: str = ""
    forced: bool = False
    dependents: list[PlannedStep] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.step.name

    @property
    def key(self) -> str:
        """The folder name: unique in a plan, and the step's id in events."""
        return self.folder.name


@dataclass
class Plan:
    lab_root: Path
    steps: list[PlannedStep]
    """In dependency order: every step after all of its dependencies."""

    def to_run(self) -> list[PlannedStep]:
        return [p for p in self.steps if p.action == "run"]

    def cached(self) -> list[PlannedStep]:
        return [p for p in self.steps if p.action == "cached"]


def collect_steps(steps: Sequence[Step]) -> list[Step]:
    """The given steps plus every Step object reachable through ``deps``, each once."""
    seen: dict[int, Step] = {}

    def visit(step: Step) -> None:
        if id(step) in seen:
            return
        seen[id(step)] = step
        for dep in step.deps:
            if isinstance(dep, Step):
                visit(dep)

    for step in steps:
        if not isinstance(step, Step):
            raise UserError(f"expected Step objects, got {type(step).__name__} {step!r}")
        visit(step)
    return list(seen.values())


def _resolve_deps(steps: list[Step]) -> dict[int, list[Step]]:
    by_name: dict[str, list[Step]] = {}
    for step in steps:
        by_name.setdefault(step.name, []).append(step)
    resolved: dict[int, list[Step]] = {}
    for step in steps:
        deps = []
        for dep in step.deps:
            if isinstance(dep, Step):
                deps.append(dep)
                continue
            candidates = by_name.get(dep, [])
            if not candidates:
                raise UserError(
                    f"step {step.name!r}: unknown dependency {dep!r} (steps: {', '.join(sorted(by_name))})"
                )
            if len({id(c) for c in candidates}) > 1:
                raise UserError(
                    f"step {step.name!r}: dependency {dep!r} is ambiguous ({len(candidates)} steps have that "
                    "name); pass the Step object instead of its name"
                )
            deps.append(candidates[0])
        resolved[id(step)] = deps
    return resolved


def _order(steps: list[Step], deps: dict[int, list[Step]]) -> list[Step]:
    """Topological order (dependencies first, else the given order); a cycle is a UserError naming it."""
    state: dict[int, str] = {}
    order: list[Step] = []
    path: list[Step] = []

    def visit(step: Step) -> None:
        mark = state.get(id(step))
        if mark == "done":
            return
        if mark == "active":
            cycle = path[[id(s) for s in path].index(id(step)):] + [step]
            raise UserError("dependency cycle: " + " -> ".join(s.name for s in cycle))
        state[id(step)] = "active"
        path.append(step)
        for dep in deps[id(step)]:
            visit(dep)
        path.pop()
        state[id(step)] = "done"
        order.append(step)

    for step in steps:
        visit(step)
    return order


def _same_definition(a: PlannedStep, b: PlannedStep) -> bool:
    return (
        a.ref == b.ref
        and to_dict(a.step.config) == to_dict(b.step.config)
        and a.step.resources == b.step.resources
        and a.step.retry == b.step.retry
    )


def make_plan(
    steps: Sequence[Step], lab_root: str | Path, force: Iterable[str] = (), stale_after_s: float = 60.0
) -> Plan:
    """Check ``steps``, hash them in dependency order and decide for each: run or cached.

    A step runs when it has no succeeded folder, or when it or one of its dependencies is forced
    (``force`` holds step names). Identical definitions of one step (same folder, same function and
    config) count once; different ones that would share a folder are an error.
    """
    lab_root = Path(lab_root)
    all_steps = collect_steps(steps)
    deps = _resolve_deps(all_steps)
    ordered = _order(all_steps, deps)
    force = list(force)
    names = {s.name for s in all_steps}
    for name in force:
        if name not in names:
            raise UserError(f"--force {name}: no step of that name (steps: {', '.join(sorted(names))})")

    planned_by_id: dict[int, PlannedStep] = {}
    by_folder: dict[str, PlannedStep] = {}
    plan: list[PlannedStep] = []
    for step in ordered:
        ref = function_ref(step)
        step_deps = {d.name: planned_by_id[id(d)] for d in deps[id(step)]}
        full_hash = step_hash(step.name, step.config, {n: p.hash for n, p in step_deps.items()})
        folder = Path(step.folder) if step.folder is not None else lab_root / folder_name(step.name, full_hash)
        node = PlannedStep(step, ref, full_hash, folder, step_deps)
        other = by_folder.get(node.key)
        if other is not None:
            if not _same_definition(node, other):
                raise UserError(
                    f"steps {step.name!r} ({node.ref}) and {other.name!r} ({other.ref}) would both write "
                    f"{node.folder}; give them different names or configs"
                )
            planned_by_id[id(step)] = other
            continue
        planned_by_id[id(step)] = node
        by_folder[node.key] = node
        for dep in step_deps.values():
            dep.dependents.append(node)
        _decide(node, step.name in force, stale_after_s)
        plan.append(node)
    return Plan(lab_root, plan)


def _decide(node: PlannedStep, forced: bool, stale_after_s: float) -> None:
    forced_deps = [d.name for d in node.deps.values() if d.forced]
    if forced or forced_deps:
        node.action, node.forced = "run", True
        node.reason = "forced" if forced else f"dependency forced ({', '.join(forced_deps)})"
        return
    record = read_step_record(node.folder)
    status = record.get("status") if record else None
    if record is not None and record.get("hash") not in (None, node.hash):
        # Only a pinned folder (Step.folder) can hold another step's record: never adopt its result.
        node.action = "run"
        node.reason = f"holds step {record.get('name')} with another config (hash {str(record['hash'])[:8]})"
        return
    if status == "succeeded":
        node.action, node.reason = "cached", "succeeded before"
        return
    node.action = "run"
    if record is None:
        node.reason = "new"
    elif status == "failed":
        node.reason = f"failed before ({record.get('error') or 'no error recorded'})"
    elif status == "running" and _held_elsewhere(node.folder, stale_after_s):
        node.reason = "running in another executor (will wait for it)"
    elif status == "running":
        node.reason = "interrupted (its executor is gone)"
    else:
        node.reason = "not run yet"


def _held_elsewhere(folder: Path, stale_after_s: float) -> bool:
    return StepLock(folder, owner="", stale_after_s=stale_after_s).holder() is not None
