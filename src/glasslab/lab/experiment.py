"""Experiments are Python: a file (or a built-in module) defining ``steps() -> list[Step]``.

``glasslab run path/to/file.py`` loads the file as a module; ``glasslab run NAME`` imports the
built-in ``glasslab.experiments.NAME``. A file's module gets a name derived from its absolute path,
and is marked with the path, so step processes (subprocesses, Ray tasks, torchrun workers) load the
same file under the same name and find its step functions and config classes.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import pkgutil
import re
import sys
from pathlib import Path
from types import ModuleType

from glasslab.errors import UserError
from glasslab.lab.step import EXPERIMENT_FILE_ATTR, Step

BUILTIN_PACKAGE = "glasslab.experiments"


def module_name_for_file(path: Path) -> str:
    """A stable module name for an experiment file (same in every process that loads it)."""
    resolved = str(path.resolve())
    stem = re.sub(r"\W", "_", path.stem)
    return f"glasslab_experiment_{stem}_{hashlib.sha256(resolved.encode()).hexdigest()[:8]}"


def load_module_from_file(path: Path) -> ModuleType:
    """Import an experiment file as a module (once per process); its folder joins ``sys.path`` so
    helper modules beside it import as they would for a script."""
    path = path.resolve()
    name = module_name_for_file(path)
    if name in sys.modules:
        return sys.modules[name]
    if not path.is_file():
        raise UserError(f"{path}: experiment file not found")
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    setattr(module, EXPERIMENT_FILE_ATTR, str(path))
    sys.modules[name] = module  # before exec: dataclasses and pickle look the module up by name
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        del sys.modules[name]
        raise UserError(f"{exc.filename or path}:{exc.lineno}: {exc.msg}") from None
    except ImportError as exc:
        del sys.modules[name]
        raise UserError(f"{path}: {type(exc).__name__}: {exc}") from None
    except BaseException:
        del sys.modules[name]
        raise
    return module


def builtin_experiments() -> list[str]:
    """Names of the experiments shipped in ``glasslab.experiments``."""
    package = importlib.import_module(BUILTIN_PACKAGE)
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_"))


def load_experiment(target: str | Path) -> list[Step]:
    """The steps of an experiment file (``*.py`` path) or a built-in experiment (its module name)."""
    target_str = str(target)
    if target_str.endswith(".py") or Path(target_str).is_file():
        module = load_module_from_file(Path(target_str))
        where = target_str
    else:
        known = builtin_experiments()
        if target_str not in known:
            raise UserError(
                f"experiment {target_str!r}: not a .py file nor a built-in experiment "
                f"(built-ins: {', '.join(known) or 'none'})"
            )
        module = importlib.import_module(f"{BUILTIN_PACKAGE}.{target_str}")
        where = module.__name__
    make_steps = getattr(module, "steps", None)
    if not callable(make_steps):
        raise UserError(f"{where}: defines no steps() function returning a list of Steps")
    steps = make_steps()
    if not isinstance(steps, (list, tuple)) or not all(isinstance(s, Step) for s in steps):
        raise UserError(f"{where}: steps() returned {type(steps).__name__}; expected a list of Step")
    if not steps:
        raise UserError(f"{where}: steps() returned no steps")
    return list(steps)
