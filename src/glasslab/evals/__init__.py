"""Downstream tasks: multiple-choice items scored by log-likelihood, as lm-eval-harness scores them.

Public API (see each module):

- :class:`TaskConfig`, :class:`Task`, :class:`Item` — a task and the config naming it (``task``);
- :func:`read_items`, :func:`write_items` — task files, with adapters for HellaSwag/ARC/PIQA layouts
  (``formats``);
- :func:`load_task`, :func:`load_tasks` — a config to a task, built-in or from a file (``load``);
- :func:`score_task`, :class:`TaskResult`, :class:`TaskScorer` — the scorer (``scorer``, ``load``);
- built-in tasks made from a dataset's held-out split (``builtin``); lm-eval task YAML (``harness``).

This part imports ``data`` and ``model``, never ``train``: the trainer calls it at eval intervals.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "Item": "task",
    "Task": "task",
    "TaskConfig": "task",
    "read_items": "formats",
    "write_items": "formats",
    "TaskResult": "scorer",
    "score_task": "scorer",
    "load_task": "load",
    "load_tasks": "load",
    "TaskScorer": "load",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'glasslab.evals' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"glasslab.evals.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
