"""Experiment files as modules: one name per file, the same in every process that loads it.

``glasslab run path/to/file.py`` imports the file as a module whose name is derived from its absolute
path, and marks the module with that path. A step function defined there is referenced by that module
name plus the file (see ``step.FunctionRef``), so a step process — a subprocess, a Ray task, a
torchrun worker — loads the same file under the same name and finds its functions and config classes.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import sys
from pathlib import Path
from types import ModuleType

from glasslab.errors import UserError

EXPERIMENT_FILE_ATTR = "__glasslab_experiment_file__"
"""Set on modules loaded from an experiment file, so workers can load the same file by path."""


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


def user_pythonpath(paths: list[str] | None = None) -> str:
    """``PYTHONPATH`` for processes this one starts (step processes, Ray workers): this process's
    ``sys.path`` minus the interpreter's own folders (stdlib, site-packages), which their interpreter brings
    itself, so they import what this one could (the checkout's ``src``, an experiment file's folder)."""
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    keep = []
    for entry in sys.path if paths is None else paths:
        real = os.path.realpath(entry or os.getcwd())
        if os.path.isdir(real) and not any(real == p or real.startswith(p + os.sep) for p in prefixes):
            if real not in keep:
                keep.append(real)
    return os.pathsep.join(keep)
