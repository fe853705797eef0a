"""Checkpoints: atomic folders with a sha256 manifest, retention, and fallback past a damaged one.

A checkpoint is ``<run>/checkpoints/step-XXXXXXX/`` holding one ``torch.save`` file per part
(``model.pt``, ``optimizer.pt``, ``trainer.pt``…), the run's full config as ``config.json`` (so a
resume, a fork or an export reads the config without unpickling anything), and ``manifest.json``
listing each file's size and sha256. It is written under a hidden temp name and renamed into place
only when complete, so a process killed mid-write leaves either the previous state or a temp folder
that is ignored and swept. A folder whose manifest is missing or whose files do not match it
(truncated, corrupted) is skipped by ``layout.latest_checkpoint``, which reports it so the trainer records
``checkpoint_fallback``. Reading checkpoints back (listing, verifying, their config) is the lab's file
contract in :mod:`glasslab.layout`, so loading a model needs nothing of the trainer; this module writes them.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from glasslab.layout import (
    CHECKPOINT_CONFIG,
    CHECKPOINTS_DIR,
    MANIFEST_FILE,
    TEMP_PREFIX,
    atomic_path,
    checkpoint_config,
    checkpoint_path,
    file_sha256,
    intact_checkpoint,
    list_checkpoints,
    write_json_atomic,
)

# The read side, from the file contract, for the trainer's callers that reach checkpoints through here.
__all__ = ["apply_retention", "checkpoint_config", "intact_checkpoint", "list_checkpoints", "load_checkpoint",
           "save_checkpoint", "sweep_temp"]

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
