"""Checkpoints: atomic folders with a sha256 manifest, retention, and fallback past a damaged one.

A checkpoint is ``<run>/checkpoints/step-XXXXXXX/`` holding one ``torch.save`` file per part
(``model.pt``, ``optimizer.pt``, ``trainer.pt``…), the run's full config as ``config.json`` (so a
resume, a fork or an export reads the config without unpickling anything), and ``manifest.json``
listing each file's size and sha256. A sharded (FSDP2) run writes its model and optimiser as
torch distributed checkpoint folders instead (``model/``, ``optimizer/``: every rank writes its own
shard, and any number of ranks, or one process, reads them back: :func:`save_sharded_checkpoint`);
the trainer's own state (``trainer.pt``: loader, balancer, guard, RNG) and its callbacks'
(``callbacks.pt``, by callback name, only when one has state: a run without stateful callbacks writes
the same files as before they existed) are small and host-side and stay files written by rank 0.
A checkpoint is written under a hidden temp name and renamed into place only when complete, so a
process killed mid-write leaves either the previous state or a temp folder that is ignored and swept. A
folder whose manifest is missing or whose files do not match it (truncated, corrupted) is skipped by
``layout.latest_checkpoint``, which reports it so the trainer records ``checkpoint_fallback``.

Which checkpoints stay: the last ``keep_last`` written on the interval (or at a preemption, or the end),
the multiples of ``keep_every``, and with ``train.keep_log`` the published schedule (:func:`published_steps`).
A schedule checkpoint off the interval is marked extra in its manifest; it does not count toward
``keep_last`` and a rollback passes it by, so publishing more checkpoints never changes the run. Each
manifest also holds the tokens trained on and the sha256 of the weights' canonical bytes
(``model.load.weights_sha256``), and ``checkpoints.json`` beside the folders lists every kept one.

Reading checkpoints back (listing, verifying, their config) is the lab's file
contract in :mod:`glasslab.layout`, and a model's weights are read by :mod:`glasslab.model.load`, so
loading a model needs nothing of the trainer; this module writes checkpoints and restores the trainer.
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
    CHECKPOINT_LIST,
    CHECKPOINTS_DIR,
    EXTRA_CHECKPOINT,
    MANIFEST_FILE,
    SHARDED_MODEL,
    TEMP_PREFIX,
    atomic_path,
    checkpoint_config,
    checkpoint_path,
    file_sha256,
    intact_checkpoint,
    is_extra_checkpoint,
    is_sharded,
    list_checkpoints,
    move_into_place,
    read_json,
    remove,
    temp_path,
    write_json_atomic,
)
from glasslab.train.callbacks import LAST, Callback
from glasslab.train.config import TrainConfig
from glasslab.train.distributed import DistContext
from glasslab.train.schedule import decay_start

# The read side, from the file contract, for the trainer's callers that reach checkpoints through here.
__all__ = ["CALLBACKS_PART", "HOST_PARTS", "SHARDED_MODEL", "SHARDED_OPTIMIZER", "Checkpointer", "apply_retention",
           "checkpoint_config", "intact_checkpoint", "is_sharded", "list_checkpoints", "load_checkpoint",
           "published_steps", "save_checkpoint", "save_sharded_checkpoint", "sweep_temp", "write_checkpoint_list"]

PART_SUFFIX = ".pt"
CALLBACKS_PART = "callbacks"
"""The part holding the trainer's callbacks' states by name (written only when one has state)."""
HOST_PARTS = frozenset({"trainer", CALLBACKS_PART})
"""Parts read onto the CPU whatever device the rest goes to: the trainer's loader, guard and RNG states
and the callbacks' (generators take their state as CPU tensors, and the rest is bookkeeping)."""
SHARDED_OPTIMIZER = "optimizer"
"""The folder of a sharded run's optimiser state; absent before the first optimiser step."""


def published_steps(cfg: TrainConfig) -> frozenset[int]:
    """The steps ``train.keep_log`` keeps: 0, the powers of two below ``checkpoint_interval``, the last
    step before a WSD decay starts, and the final step."""
    total = cfg.total_steps
    steps = {0, total}
    power = 1
    while power < min(cfg.checkpoint_interval, total):
        steps.add(power)
        power *= 2
    start = decay_start(cfg.schedule, total)
    if start is not None:
        steps.add(start)
    return frozenset(steps)


class Checkpointer(Callback):
    """When the trainer writes its checkpoint (``trainer.save_checkpoint``, which applies retention): at
    step 0 of a fresh run (so a rollback always has somewhere to go), every ``checkpoint_interval`` steps,
    at the published schedule's steps off the interval (extra, ``trainer.published_steps``), and as
    training finishes or stops."""

    priority = LAST  # after every other callback has taken the step in: their states are the step's

    def on_start(self, trainer: Any) -> None:
        if not list_checkpoints(trainer.run_dir):
            trainer.save_checkpoint()

    def after_step(self, trainer: Any, metrics: dict[str, float]) -> None:
        step, cfg = trainer.step, trainer.cfg
        if step % cfg.checkpoint_interval == 0:
            trainer.save_checkpoint()
        elif step in trainer.published_steps and step < cfg.total_steps:  # the final one comes after the last eval
            trainer.save_checkpoint(extra=True)

    def on_end(self, trainer: Any, status: str) -> None:
        if status != "failed" and not checkpoint_path(trainer.run_dir, trainer.step).exists():
            trainer.save_checkpoint()


def save_checkpoint(run_dir: Path, step: int, parts: dict[str, Any], config: dict[str, Any] | None = None,
                    about: dict[str, Any] | None = None) -> Path:
    """Write ``parts`` (name → picklable state) and the run's ``config`` (plain data) as the checkpoint
    for ``step``, atomically; the same step written again (after a rollback) replaces the old folder.
    ``about`` adds fields to the manifest (``tokens``, ``weights_sha256``, ``extra``)."""
    final = checkpoint_path(run_dir, step)
    with atomic_path(final) as tmp:
        tmp.mkdir()
        _finish_folder(tmp, step, parts, config, {}, about)
    return final


def save_sharded_checkpoint(run_dir: Path, step: int, ctx: DistContext, shards: dict[str, dict | None],
                            parts: dict[str, Any] | None, config: dict[str, Any] | None = None,
                            about: dict[str, Any] | None = None) -> Path:
    """The checkpoint for ``step`` of a sharded run; every rank calls it (a collective).

    ``shards``: folder name → a state dict of this rank's shards (DTensors), written with torch
    distributed checkpoint by every rank at once (None: nothing to write yet). ``parts`` and
    ``config`` and ``about`` are rank 0's, as in :func:`save_checkpoint`. Each rank hashes the files it wrote;
    rank 0 writes the manifest and renames the folder into place, so a job killed mid-write leaves a
    temp folder that :func:`sweep_temp` removes.
    """
    import torch.distributed.checkpoint as dcp

    final = checkpoint_path(run_dir, step)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(ctx.all_gather_object(str(temp_path(final)) if ctx.is_main else None)[0])
    try:
        written: dict[str, dict] = {}
        for name, state in shards.items():
            if state is not None:
                dcp.save(state, checkpoint_id=tmp / name)
                written.update(_files_of_rank(tmp, name, ctx.rank))
        shard_files = {k: v for files in ctx.all_gather_object(written) for k, v in files.items()}
        if ctx.is_main:
            for name, state in shards.items():
                if state is not None:
                    shard_files.update(_described(tmp, f"{name}/.metadata"))
            _finish_folder(tmp, step, parts or {}, config, shard_files, about)
            move_into_place(tmp, final)
    except BaseException:
        if ctx.is_main:
            remove(tmp)
        raise
    ctx.barrier()
    return final


def _files_of_rank(tmp: Path, folder: str, rank: int) -> dict[str, dict]:
    """The shard files torch distributed checkpoint wrote for ``rank`` (``__<rank>_<i>.distcp``), described."""
    described: dict[str, dict] = {}
    for path in sorted((tmp / folder).glob(f"__{rank}_*.distcp")):
        described.update(_described(tmp, f"{folder}/{path.name}"))
    return described


def _described(root: Path, name: str) -> dict[str, dict]:
    path = root / name
    return {name: {"bytes": path.stat().st_size, "sha256": file_sha256(path)}}


def _finish_folder(tmp: Path, step: int, parts: dict[str, Any], config: dict[str, Any] | None,
                   files: dict[str, dict], about: dict[str, Any] | None) -> None:
    """Write ``parts`` and ``config`` into ``tmp``, then the manifest over them and ``files``."""
    files = dict(files)
    for name, state in parts.items():
        path = tmp / f"{name}{PART_SUFFIX}"
        with open(path, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        files.update(_described(tmp, path.name))
    if config is not None:
        path = write_json_atomic(tmp / CHECKPOINT_CONFIG, config)
        files.update(_described(tmp, path.name))
    write_json_atomic(tmp / MANIFEST_FILE, {"step": step, "time": time.time(), **(about or {}), "files": files})


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu",
                    only: frozenset[str] | None = None) -> dict[str, Any]:
    """The single-file parts of a verified checkpoint folder, by name (``model``, ``optimizer``,
    ``trainer``; ``only`` those named); tensors go to ``map_location`` except in :data:`HOST_PARTS`."""
    manifest = json.loads((Path(path) / MANIFEST_FILE).read_text(encoding="utf-8"))
    parts = {}
    for name in manifest["files"]:
        part = name.removesuffix(PART_SUFFIX)
        if name.endswith(PART_SUFFIX) and (only is None or part in only):
            # Our own files, checked against their sha256 first; they hold NumPy RNG state, hence full unpickling.
            parts[part] = torch.load(Path(path) / name, weights_only=False,
                                     map_location="cpu" if part in HOST_PARTS else map_location)
    return parts


def apply_retention(run_dir: Path, keep_last: int, keep_every: int, keep: frozenset[int] = frozenset()) -> list[int]:
    """Delete checkpoints outside the last ``keep_last`` (extra ones not counted), the multiples of
    ``keep_every`` and the steps in ``keep``; return their steps."""
    checkpoints = list_checkpoints(run_dir)
    regular = [step for step, path in checkpoints if not is_extra_checkpoint(path)]
    recent = set(regular[-keep_last:])
    removed = []
    for step, path in checkpoints:
        if step in recent or step in keep or (keep_every and step % keep_every == 0):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(step)
    return removed


def write_checkpoint_list(run_dir: Path) -> list[dict[str, Any]]:
    """Rewrite ``<run>/checkpoints.json`` from the kept checkpoints' manifests; returns its entries: ``step``,
    ``tokens``, ``weights_sha256`` (the weights' canonical bytes), ``extra``, ``files`` (name → sha256)."""
    entries = []
    for step, path in list_checkpoints(run_dir):
        manifest = read_json(path / MANIFEST_FILE) or {}
        entries.append({"step": step, "tokens": manifest.get("tokens"),
                        "weights_sha256": manifest.get("weights_sha256"),
                        "extra": bool(manifest.get(EXTRA_CHECKPOINT)),
                        "files": {name: f["sha256"] for name, f in manifest.get("files", {}).items()}})
    write_json_atomic(Path(run_dir) / CHECKPOINT_LIST, {"checkpoints": entries})
    return entries


def sweep_temp(run_dir: Path) -> None:
    """Remove half-written temp folders left by a killed writer."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    for path in root.glob(f"{TEMP_PREFIX}*") if root.is_dir() else ():
        shutil.rmtree(path, ignore_errors=True)
