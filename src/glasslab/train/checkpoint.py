"""Checkpoints: atomic folders with a sha256 manifest, retention, and fallback past a damaged one.

A checkpoint is ``<run>/checkpoints/step-XXXXXXX/`` holding one ``torch.save`` file per part
(``model.pt``, ``optimizer.pt``, ``trainer.pt``…), the run's full config as ``config.json`` (so a
resume, a fork or an export reads the config without unpickling anything), and ``manifest.json``
listing each file's size and sha256. It is written under a hidden temp name and renamed into place
only when complete, so a process killed mid-write leaves either the previous state or a temp folder
that is ignored and swept. A folder whose manifest is missing or whose files do not match it
(truncated, corrupted) is skipped by :func:`latest_valid`, which reports it so the trainer records
``checkpoint_fallback``.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from glasslab.errors import UserError
from glasslab.layout import (
    CHECKPOINT_CONFIG,
    CHECKPOINT_PREFIX,
    CHECKPOINTS_DIR,
    MANIFEST_FILE,
    TEMP_PREFIX,
    atomic_path,
    checkpoint_path,
    file_sha256,
    read_json,
    write_json_atomic,
)

PART_SUFFIX = ".pt"


def save_checkpoint(run_dir: Path, step: int, parts: dict[str, Any], config: dict[str, Any] | None = None) -> Path:
    """Write ``parts`` (name → picklable state) and the run's ``config`` (plain data) as the checkpoint
    for ``step``, atomically; the same step written again (after a rollback) replaces the old folder."""
    final = checkpoint_path(run_dir, step)
    with atomic_path(final) as tmp:
        tmp.mkdir()
        files = {}
        for name, state in parts.items():
            path = tmp / f"{name}{PART_SUFFIX}"
            with open(path, "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())
            files[path.name] = {"bytes": path.stat().st_size, "sha256": file_sha256(path)}
        if config is not None:
            path = write_json_atomic(tmp / CHECKPOINT_CONFIG, config)
            files[path.name] = {"bytes": path.stat().st_size, "sha256": file_sha256(path)}
        write_json_atomic(tmp / MANIFEST_FILE, {"step": step, "time": time.time(), "files": files})
    return final


def checkpoint_config(path: Path) -> dict[str, Any]:
    """The run's full (unredacted) config stored beside the checkpoint in folder ``path``."""
    config = read_json(Path(path) / CHECKPOINT_CONFIG)
    if config is None:
        raise UserError(f"{path}: no {CHECKPOINT_CONFIG} (a checkpoint from before configs were stored as JSON)")
    return config


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """Completed checkpoint folders of a run as (step, path), oldest first."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    found = []
    for path in root.glob(f"{CHECKPOINT_PREFIX}*") if root.is_dir() else ():
        suffix = path.name[len(CHECKPOINT_PREFIX):]
        if path.is_dir() and suffix.isdigit():
            found.append((int(suffix), path))
    return sorted(found)


def intact_checkpoint(run_dir: Path, step: int) -> Path:
    """The checkpoint of ``run_dir`` at ``step``; a one-line UserError naming the steps there are, or what
    is wrong with it when its files do not match its manifest."""
    path = checkpoint_path(run_dir, step)
    if not path.is_dir():
        available = ", ".join(str(s) for s, _ in list_checkpoints(run_dir)) or "none"
        raise UserError(f"{run_dir.name}@{step}: no checkpoint at step {step} (available: {available})")
    problem = problem_with(path)
    if problem is not None:
        raise UserError(f"{path}: damaged checkpoint ({problem})")
    return path


def problem_with(path: Path) -> str | None:
    """Why the checkpoint at ``path`` cannot be trusted, or None when its files match the manifest."""
    try:
        manifest = json.loads((path / MANIFEST_FILE).read_text(encoding="utf-8"))
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"unreadable {MANIFEST_FILE} ({type(exc).__name__})"
    for name, expected in files.items():
        file = path / name
        if not file.is_file():
            return f"{name} is missing"
        size = file.stat().st_size
        if size != expected["bytes"]:
            return f"{name} has {size} bytes, manifest says {expected['bytes']} (truncated?)"
        if file_sha256(file) != expected["sha256"]:
            return f"{name} does not match its sha256 in the manifest (corrupted)"
    return None


def latest_valid(
    run_dir: Path, on_fallback: Callable[[int, str], None] | None = None, at_most: int | None = None,
) -> tuple[int, Path] | None:
    """The newest intact checkpoint (at step ``<= at_most`` when given), reporting each damaged one."""
    for step, path in reversed(list_checkpoints(run_dir)):
        if at_most is not None and step > at_most:
            continue
        problem = problem_with(path)
        if problem is None:
            return step, path
        if on_fallback is not None:
            on_fallback(step, problem)
    return None


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Every part of a verified checkpoint folder, by name (``model``, ``optimizer``, ...)."""
    manifest = json.loads((Path(path) / MANIFEST_FILE).read_text(encoding="utf-8"))
    parts = {}
    for name in manifest["files"]:
        if name.endswith(PART_SUFFIX):
            # Our own files, checked against their sha256 first; they hold NumPy RNG state, hence full unpickling.
            parts[name.removesuffix(PART_SUFFIX)] = torch.load(Path(path) / name, map_location=map_location,
                                                               weights_only=False)
    return parts


def apply_retention(run_dir: Path, keep_last: int, keep_every: int) -> list[int]:
    """Delete checkpoints outside the last ``keep_last`` and the multiples of ``keep_every``; return their steps."""
    checkpoints = list_checkpoints(run_dir)
    recent = {step for step, _ in checkpoints[-keep_last:]}
    removed = []
    for step, path in checkpoints:
        if step in recent or (keep_every and step % keep_every == 0):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(step)
    return removed


def sweep_temp(run_dir: Path) -> None:
    """Remove half-written temp folders left by a killed writer."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    for path in root.glob(f"{TEMP_PREFIX}*") if root.is_dir() else ():
        shutil.rmtree(path, ignore_errors=True)
