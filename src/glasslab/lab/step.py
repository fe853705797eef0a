"""A step: one unit of work with a versioned output folder, and how its identity is hashed.

A step is a name, an importable function, a config and dependencies. Its output folder is
``<lab>/<name>-<hash8>``; the hash covers the step's name, the *versioned* fields of its config
(fields marked ``UNVERSIONED`` in glasslab.config, such as worker counts, are left out) and the hashes
of its dependencies, so changing a versioned field moves the step and everything downstream of it
to new folders, while a rerun with the same inputs finds the old ones. The code version is recorded
in ``step.json`` but not hashed (``glasslab run --force NAME`` reruns after a code change).

The function is referenced by module and qualified name, never pickled, because it runs in another
process (a subprocess, a Ray task, or N torchrun workers) that imports it afresh.
"""

from __future__ import annotations

import hashlib
import importlib
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glasslab.config import canonical_json, to_dict
from glasslab.errors import UserError
from glasslab.lab.inputs import step_outputs
from glasslab.lab.modules import EXPERIMENT_FILE_ATTR, load_module_from_file
from glasslab.lab.retry import RetryPolicy

STEP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.]*(-[A-Za-z0-9_.]+)*")
HASH_CHARS = 8


@dataclass(frozen=True)
class Resources:
    """What one step asks of the machine. ``cpus``/``gpus`` are per worker process; ``cpus`` is also the
    process's ``OMP_NUM_THREADS`` (the local backend sets it unless the user exported one; Ray sets it).

    ``workers > 1`` runs the step function on that many processes of one node through torchrun
    (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` set; the function
    calls ``torch.distributed.init_process_group`` itself, gloo on CPU). With ``workers == 1`` the
    function runs in a plain process with no distributed environment.
    """

    cpus: float = 1
    gpus: float = 0
    workers: int = 1

    def __post_init__(self) -> None:
        if not (self.cpus >= 0 and self.gpus >= 0):
            raise UserError(f"resources cpus={self.cpus!r} gpus={self.gpus!r}: expected numbers >= 0")
        if not (isinstance(self.workers, int) and self.workers >= 1):
            raise UserError(f"resources.workers={self.workers!r}: expected an integer >= 1")


@dataclass(frozen=True)
class FunctionRef:
    """Where a step function lives: ``module:qualname``, plus the file for experiment-file modules."""

    module: str
    qualname: str
    file: str | None = None

    def __str__(self) -> str:
        return f"{self.file or self.module}:{self.qualname}"

    def load(self) -> Callable[..., Any]:
        """Import the module (loading the experiment file when there is one) and return the function."""
        if self.file is not None and self.module not in sys.modules:
            load_module_from_file(Path(self.file))
        try:
            obj: Any = importlib.import_module(self.module)
            for part in self.qualname.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            raise UserError(f"step function {self}: not importable ({type(exc).__name__}: {exc})") from None
        if not callable(obj):
            raise UserError(f"step function {self}: {type(obj).__name__} is not callable")
        return obj


@dataclass(frozen=True, eq=False)
class Step:
    """One unit of work. ``fn`` is an importable function or ``"module:function"``; it is called as
    ``fn(ctx)`` with a :class:`StepContext`. ``config`` is a frozen config dataclass or plain JSON-able
    data. ``deps`` are Steps or step names; their output folders reach ``fn`` as ``ctx.inputs``. A step named in
    the config by a reference to its output (``lab.inputs.output_of``) is a dependency without being listed.

    ``folder`` pins the output folder (a command's ``--run-dir``/``--out``) instead of
    ``<lab>/<name>-<hash8>``; the hash is still computed and recorded in the folder's ``step.json``,
    and a folder whose record holds another hash is never taken for this step's result."""

    name: str
    fn: Callable[..., Any] | str
    config: Any = None
    deps: tuple[Step | str, ...] = ()
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    resources: Resources = field(default_factory=Resources)
    folder: str | Path | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.name, str) and STEP_NAME.fullmatch(self.name)):
            raise UserError(
                f"step name {self.name!r}: expected letters, digits, '_', '.' and single '-' (a folder name)"
            )
        deps = (self.deps,) if isinstance(self.deps, (Step, str)) else tuple(self.deps)
        named = {dep_name(d) for d in deps if isinstance(d, (Step, str))}
        for ref in step_outputs(self.config):  # a reference to a step's output is an edge to that step
            if dep_name(ref.dependency) not in named:
                deps += (ref.dependency,)
                named.add(dep_name(ref.dependency))
        for dep in deps:
            if not isinstance(dep, (Step, str)):
                raise UserError(f"step {self.name!r}: dependency {dep!r} is neither a Step nor a step name")
        object.__setattr__(self, "deps", deps)
        names = [dep_name(d) for d in deps]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise UserError(f"step {self.name!r}: depends twice on a step named {twice[0]!r}")

    def __repr__(self) -> str:
        return f"Step({self.name!r})"


@dataclass(frozen=True)
class StepContext:
    """What a step function receives: where to write, what to read, and its config."""

    name: str
    output_dir: Path
    """The step's own folder; write only here (it exists; a failed earlier attempt's files remain)."""
    config: Any
    inputs: dict[str, Path]
    """Dependency name → that dependency's output folder."""
    lab_root: Path
    attempt: int = 1
    """1 for the first try of this folder, counting every earlier attempt (reruns and retries)."""
    step_hash: str = ""
    re_register: bool = False
    """The run was started with ``--re-register``: the step may replace a prediction that the lab's
    registry (``registry.py``) already holds with other numbers (an incident event says so)."""
    force_registration: bool = False
    """The run was started with ``--force-registration``: a hero whose fit the registration gate refused
    runs anyway, its registry entry and run marked forced (``glasslab.ladder.gate``)."""


def dep_name(dep: Step | str) -> str:
    return dep.name if isinstance(dep, Step) else dep


def function_ref(step: Step) -> FunctionRef:
    """The importable reference for ``step.fn``; a one-line UserError when other processes couldn't
    import it (lambdas, nested functions, ``__main__``, a missing module or attribute)."""
    fn = step.fn
    if isinstance(fn, str):
        module, sep, qualname = fn.partition(":")
        if not sep or not module or not qualname:
            raise UserError(f"step {step.name!r}: function {fn!r}: expected 'module:function'")
        ref = FunctionRef(module, qualname)
    else:
        module = getattr(fn, "__module__", None)
        qualname = getattr(fn, "__qualname__", None)
        if not callable(fn) or not module or not qualname:
            raise UserError(f"step {step.name!r}: function {fn!r} is not an importable function")
        if "<" in qualname:
            raise UserError(
                f"step {step.name!r}: function {qualname} is not importable (lambda or nested function); "
                "define it at the top level of a module"
            )
        if module == "__main__":
            raise UserError(
                f"step {step.name!r}: function {qualname} lives in __main__, which step processes cannot "
                "import; put it in a module or an experiment file run with `glasslab run FILE.py`"
            )
        file = getattr(sys.modules.get(module), EXPERIMENT_FILE_ATTR, None)
        ref = FunctionRef(module, qualname, file)
    loaded = ref.load()
    if not isinstance(fn, str) and loaded is not fn:
        raise UserError(f"step {step.name!r}: importing {ref} gives another object than the step's function")
    return ref


def versioned_config(config: Any, step_name: str) -> Any:
    """The config's versioned fields as plain data (what the hash covers)."""
    data = to_dict(config, versioned_only=True)
    _check_plain(data, step_name)
    return data


def _check_plain(data: Any, step_name: str) -> None:
    try:
        canonical_json(data)
    except (TypeError, ValueError) as exc:
        raise UserError(f"step {step_name!r}: config is not plain JSON-able data ({exc})") from None


def step_hash(name: str, config: Any, dep_hashes: Mapping[str, str]) -> str:
    """Hex sha256 of the step's name, versioned config and dependencies' hashes (by dependency name)."""
    identity = {
        "name": name, "config": versioned_config(config, name), "deps": dict(sorted(dep_hashes.items())),
    }
    return hashlib.sha256(canonical_json(identity).encode()).hexdigest()


def folder_name(name: str, full_hash: str) -> str:
    """``<name>-<hash8>``: the step's output folder under the lab root (also its run id)."""
    return f"{name}-{full_hash[:HASH_CHARS]}"


def planned_folder_name(step: Step) -> str:
    """The folder name (run id) the executor will give ``step``: its hash covers its dependencies' hashes, so
    a step can name a dependency's run (the run an export exports, the run a fork starts from) before it
    exists."""

    def full_hash(s: Step) -> str:
        return step_hash(s.name, s.config, {d.name: full_hash(d) for d in s.deps})

    return folder_name(step.name, full_hash(step))
