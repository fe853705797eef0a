"""Experiments are Python: a file (or a built-in module) defining ``steps() -> list[Step]``.

``glasslab run path/to/file.py`` loads the file as a module (``modules.py`` says how, so step processes
load it under the same name); ``glasslab run NAME`` imports the built-in ``glasslab.experiments.NAME``.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from glasslab.errors import UserError
from glasslab.lab.modules import load_module_from_file
from glasslab.lab.step import Step

BUILTIN_PACKAGE = "glasslab.experiments"


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
