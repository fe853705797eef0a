"""Inputs the executor resolves: a step's config holds a typed reference to another step's output.

A step that reads what another wrote holds ``output_of(that_step)`` in its config (Marin's
``output_path_of(step)``), not a step name in a ``*_from`` string that its function looks up in
``ctx.inputs`` by hand. The executor then

- adds the edge: the referenced step becomes a dependency (:class:`~glasslab.lab.step.Step` collects them);
- hashes the reference as the referenced step's name (``config_value``), which is exactly how the ``*_from``
  names were hashed, so no existing step's hash moves; the dependency's own hash is in the step's identity
  as every dependency's is;
- fills the path: the step function gets its config with every reference's ``path`` set to the
  dependency's output folder (:func:`resolve_outputs`, when the config is sent to the step's process).

An empty reference (:data:`NO_OUTPUT`, written ``""`` as the empty ``*_from`` was) means no such input.

A run another step starts from or exports (a fork's parent, an export's run) is a :class:`RunOutput`: named by
its run id, the folder name ``<name>-<hash8>`` (``run_output_of(step)``), which is what such configs always
hashed, or a run given by the user (its id under the lab root, or its path). The executor fills its
``run_dir``: the dependency's folder of that name, else that folder under the lab root.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from glasslab.config import TRANSIENT, UNVERSIONED
from glasslab.errors import UserError

if TYPE_CHECKING:
    from glasslab.lab.step import Step


@dataclass(frozen=True)
class StepOutput:
    """The output folder of the step named ``name``, as a field of another step's config."""

    name: str
    """The producing step's name (empty: no input). What the step's hash covers and ``step.json`` records."""
    path: str = ""
    """Its output folder: empty until the executor resolves it for the step's function."""
    step: Step | None = field(default=None, compare=False, repr=False)
    """The producing step itself when the reference was made from it (the executor adds it as a dependency);
    None when read back from a ``step.json`` (the name then names a dependency)."""

    def __bool__(self) -> bool:
        return bool(self.name)

    @property
    def dependency(self) -> Step | str:
        """The step this reference is an edge to: itself, or its name when read back from a ``step.json``."""
        return self.step if self.step is not None else self.name

    def config_value(self) -> str:
        return self.name

    @classmethod
    def from_config_value(cls, value: Any, where: str) -> StepOutput:
        if not isinstance(value, str):
            raise UserError(f"{where}={value!r}: expected the name of a step (a step's output)")
        return cls(value)

    @property
    def folder(self) -> Path:
        """The resolved output folder; an internal error before the executor filled it."""
        assert self.path, f"the output of step {self.name!r} was not resolved by the executor"
        return Path(self.path)


NO_OUTPUT = StepOutput("")
"""No input of this kind (the default of an optional reference)."""


@dataclass(frozen=True)
class RunOutput:
    """A run's folder named by its run id; a config that starts from or exports a run extends it (``ForkPoint``,
    ``ExportConfig``), so ``run`` and ``run_dir`` sit among its own fields."""

    run: str = ""
    """The run id (its folder name, which carries its hash), or the path of a run folder outside the lab."""
    run_dir: str = field(default="", metadata=UNVERSIONED)
    """Where the run's folder is: filled by the executor (or given with the run); the same run may be reached
    by several paths, so it is not hashed."""
    producer: Any = field(default=None, compare=False, repr=False, metadata=TRANSIENT)
    """The step whose output the run is, when the reference was made from it (the executor adds the edge)."""

    @property
    def dependency(self) -> Step:
        return self.producer

    @property
    def run_folder(self) -> Path:
        """The resolved run folder; an internal error before the executor filled it."""
        assert self.run_dir, f"the folder of run {self.run!r} was not resolved by the executor"
        return Path(self.run_dir)


def output_of(step: Step) -> StepOutput:
    """A reference to ``step``'s output folder, for another step's config."""
    return StepOutput(step.name, step=step)


def run_output_of(step: Step) -> dict[str, Any]:
    """The fields of a :class:`RunOutput` naming the run ``step`` makes by the folder the executor will give it
    (``ForkPoint(**run_output_of(trunk), step=200)``)."""
    from glasslab.lab.step import planned_folder_name

    return {"run": planned_folder_name(step), "producer": step}


def step_outputs(config: Any) -> Iterator[StepOutput | RunOutput]:
    """Every reference in ``config`` made from a step (nested dataclasses, lists and tuples): the step's edges."""
    if isinstance(config, StepOutput):
        if config:
            yield config
    elif isinstance(config, RunOutput):
        if config.producer is not None:  # one read back from a step.json names a listed dependency's run
            yield config
    elif dataclasses.is_dataclass(config) and not isinstance(config, type):
        for f in dataclasses.fields(config):
            yield from step_outputs(getattr(config, f.name))
    elif isinstance(config, (list, tuple)):
        for value in config:
            yield from step_outputs(value)


def resolve_outputs(config: Any, folders: Mapping[str, Path], step_name: str, lab_root: Path) -> Any:
    """``config`` with every reference's ``path`` set to the folder of the dependency it names (``folders``:
    dependency name → output folder), each run's ``run_dir`` to the dependency's folder of that name, else that
    folder under ``lab_root``, and the steps they were made from dropped (the config travels to another process)."""

    def resolve(ref: StepOutput | RunOutput) -> StepOutput | RunOutput:
        if isinstance(ref, RunOutput):
            by_folder = {folder.name: folder for folder in folders.values()}
            found = ref.run_dir or by_folder.get(ref.run) or Path(lab_root) / ref.run
            return dataclasses.replace(ref, run_dir=str(found), producer=None)
        if not ref:
            return ref
        if ref.name not in folders:
            raise UserError(
                f"step {step_name!r}: its config refers to the output of step {ref.name!r}, which is "
                f"not a dependency (dependencies: {', '.join(sorted(folders)) or 'none'})"
            )
        return StepOutput(ref.name, str(folders[ref.name]))

    return _replace_references(config, resolve)


def relocate_outputs(config: Any, old_root: Path, new_root: Path) -> Any:
    """``config`` (resolved) with every folder under ``old_root`` moved under ``new_root``: a step run in another
    node's working copy of an object-store lab (``node_copy.py``). Folders outside the lab stay as they are."""

    def relocate(ref: StepOutput | RunOutput) -> StepOutput | RunOutput:
        if isinstance(ref, RunOutput):
            return dataclasses.replace(ref, run_dir=moved_under(ref.run_dir, old_root, new_root))
        return dataclasses.replace(ref, path=moved_under(ref.path, old_root, new_root))

    return _replace_references(config, relocate)


def moved_under(path: str, old_root: Path, new_root: Path) -> str:
    """``path`` moved from under ``old_root`` to under ``new_root``; as it is when it is not under ``old_root``."""
    inside = path and Path(path).is_relative_to(old_root)
    return str(new_root / Path(path).relative_to(old_root)) if inside else path


def _replace_references(config: Any, replace: Callable[[StepOutput | RunOutput], Any]) -> Any:
    """``config`` with each reference (nested dataclasses, lists and tuples) replaced by ``replace(ref)``;
    the parts holding none are the same objects."""
    if isinstance(config, (RunOutput, StepOutput)):
        return replace(config)
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        changed = {f.name: _replace_references(getattr(config, f.name), replace) for f in dataclasses.fields(config)
                   if f.init}
        if all(changed[name] is getattr(config, name) for name in changed):
            return config
        return dataclasses.replace(config, **changed)
    if isinstance(config, (list, tuple)):
        values = [_replace_references(value, replace) for value in config]
        return config if all(a is b for a, b in zip(values, config, strict=True)) else type(config)(values)
    return config
