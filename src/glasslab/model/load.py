"""A trained model outside the trainer: a run's checkpoint (``RUN[@STEP]``) or an export, as our Transformer.

Evals, post-training (its base, DPO's reference), chat and the export step load models here, so none of
them reaches into the trainer::

    source = find_model("demo-sft-1a2b3c4d@150", lab)    # a run id or folder, @STEP; or an export
    model = load_model(source)                            # Transformer in eval mode
    source.tokenizer, source.context                      # where its tokenizer is, its context
    dataset_trained_on(source)                            # its dataset's folder (data.handle), or None

A run's checkpoint is read through the lab's file contract (``layout``: listed, checked against its
manifest, its config as JSON); an export (``glasslab export``) is loaded by ``transformers`` and its weights mapped
back to our parameter layout (``model.export.load_hf_state_dict``, the exact inverse of the export), so
a model given to someone as an export can be fine-tuned or chatted with here as it is.

Every run config, pretraining or post-training, names in ``data.path`` the folder its tokenizer is in: a
dataset (``glasslab data build``: its ``tokenizer/``) or, for a model tuned from an export with no
dataset at hand, that export. ``dataset_folders`` are where the dataset it trained on may be, so a caller
knows whether held-out domains and built-in tasks can be measured; this part reads no dataset manifest
(``model`` sits beside ``data``): the caller asks the data handle (``data.handle.dataset_trained_on``)
which of them holds the dataset, with the manifest hash an export recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from glasslab import config as configs
from glasslab.errors import UserError
from glasslab.layout import (
    CHECKPOINTS_DIR,
    EXPORT_MANIFEST,
    MANIFEST_FILE,
    MODEL_STATE,
    RUN_RECORD,
    SHARDED_MODEL,
    TOKENIZER_DIR,
    checkpoint_config,
    file_sha256,
    intact_checkpoint,
    is_sharded,
    latest_checkpoint,
    read_json,
)
from glasslab.model.config import ModelConfig
from glasslab.model.export import EXPORT_FORMAT, load_hf_state_dict
from glasslab.model.transformer import Transformer


@dataclass(frozen=True)
class ModelSource:
    """Where a model is and what it is, before any weight is read."""

    kind: Literal["run", "export"]
    folder: Path
    """The run folder, or the export folder."""
    step: int
    """The optimiser step of the checkpoint (for an export, the step it was exported at)."""
    model_config: ModelConfig
    config: dict[str, Any]
    """The run's full config as plain data (a checkpoint's ``config.json``; an export's manifest records
    only the model and the context, so this is ``{}`` for one)."""
    weights: Path
    """The checkpoint folder (``model.pt``) or the export folder (safetensors)."""
    sha256: str
    """sha256 of the checkpoint's or the export's manifest: a step's hash covers it, so a retrained base
    makes a new folder."""
    tokenizer: Path
    """The folder holding ``tokenizer.json`` (with the chat template)."""
    dataset_folders: tuple[Path, ...]
    """Where the dataset the model trained on may be, in order (held-out domains, built-in tasks): a run's
    data folder; an export's named dataset, in the lab or beside the export, then the one its run recorded."""
    dataset_manifest_hash: str
    """The sha256 that dataset's manifest must have (an export records it); empty: any dataset there."""
    context: int
    """Tokens per training sequence: the longest context it has seen (0 for an export made without a run,
    which does not say)."""
    run: str
    """The run id of the run that made it (an export's manifest names it)."""

    @property
    def name(self) -> str:
        """``RUN@STEP`` for a checkpoint, the export's folder name for an export."""
        return f"{self.folder.name}@{self.step}" if self.kind == "run" else self.folder.name

    @property
    def ref(self) -> str:
        """A reference :func:`find_model` resolves to this very source again (an absolute path)."""
        folder = self.folder.resolve()
        return f"{folder}@{self.step}" if self.kind == "run" else str(folder)


def split_ref(ref: str) -> tuple[str, int | None]:
    """``("RUN", STEP)`` from ``RUN@STEP``, ``(ref, None)`` without a step."""
    head, sep, tail = ref.rpartition("@")
    return (head, int(tail)) if sep and head and tail.isdigit() else (ref, None)


def find_model(ref: str, lab: str | Path | None = None) -> ModelSource:
    """The model ``ref`` names: a run id under ``lab`` or a run folder, optionally ``@STEP`` (default: its
    newest intact checkpoint); or an export's id or folder. One-line UserError when it names neither."""
    if not ref:
        raise UserError("model: empty; expected RUN[@STEP] (a run id or run folder) or an export")
    name, step = split_ref(ref)
    candidates = ([Path(lab) / name] if lab is not None else []) + [Path(name)]
    for folder in candidates:
        if (folder / EXPORT_MANIFEST).is_file():
            if step is not None:
                raise UserError(f"{ref}: an export holds one step; name it without @{step}")
            return _export_source(folder, lab)
        if (folder / RUN_RECORD).is_file() or (folder / CHECKPOINTS_DIR).is_dir():
            return _run_source(folder, step)
    where = " or ".join(str(c) for c in candidates)
    raise UserError(f"model {ref!r}: neither a run ({RUN_RECORD}, {CHECKPOINTS_DIR}/) nor an export "
                    f"({EXPORT_MANIFEST}) at {where}")


def load_model(source: ModelSource, device: str | torch.device = "cpu") -> Transformer:
    """The model's weights in our Transformer, in eval mode on ``device``."""
    model = Transformer(source.model_config)
    if source.kind == "run":
        load_checkpoint_weights(model, source.weights)
    else:
        load_hf_state_dict(model, _hf_weights(source.weights))
    return model.to(device).eval()


def weights_sha256(state: dict[str, torch.Tensor]) -> str:
    """sha256 of a model state's canonical bytes: each tensor's name, then its raw bytes (on the CPU,
    contiguous), in name order. The same weights hash the same whichever file (``torch.save``, shards)
    or process holds them, so two checkpoints are compared by this, not by their files."""
    import hashlib

    digest = hashlib.sha256()
    for name, tensor in sorted(state.items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def load_checkpoint_weights(model: Transformer, path: Path) -> None:
    """The model state (parameters and buffers) of the checkpoint folder ``path`` into ``model``, a plain
    (unsharded) model in this process, whether one file or a sharded run's shards hold it. The weights
    only: the optimiser's state and the RNGs are the trainer's business."""
    if not is_sharded(path):
        model.load_state_dict(torch.load(path / MODEL_STATE, map_location="cpu", weights_only=True))
        return
    import torch.distributed.checkpoint as dcp

    state = model.state_dict()
    # no_dist: this process reads every shard itself, inside a torchrun job or not.
    dcp.load(state, checkpoint_id=path / SHARDED_MODEL, no_dist=True)
    model.load_state_dict(state)


def _run_source(run_dir: Path, step: int | None) -> ModelSource:
    if step is None:
        found = latest_checkpoint(run_dir)
        if found is None:
            raise UserError(f"{run_dir}: no intact checkpoint (expected {CHECKPOINTS_DIR}/step-*/)")
        step, path = found
    else:
        path = intact_checkpoint(run_dir, step)
    config = checkpoint_config(path)
    record = read_json(run_dir / RUN_RECORD) or {}
    tokenizer_home = _tokenizer_home(run_dir, config, record)
    return ModelSource(
        kind="run", folder=run_dir, step=step,
        model_config=configs.from_dict(ModelConfig, config["model"], "model"), config=config, weights=path,
        sha256=file_sha256(path / MANIFEST_FILE), tokenizer=_tokenizer_folder(tokenizer_home),
        dataset_folders=(tokenizer_home,), dataset_manifest_hash="",
        context=int(config["train"]["seq_len"]), run=run_dir.name)


def _tokenizer_home(run_dir: Path, config: dict[str, Any], record: dict[str, Any]) -> Path:
    """The run's ``data.path`` where it still is; else, for a lab moved whole, the folder of that name
    (or the one run.json names) beside the run."""
    path = str((config.get("data") or {}).get("path") or "")
    named = str((record.get("dataset") or {}).get("folder") or "")
    candidates = [Path(path)] if path else []
    candidates += [run_dir.parent / n for n in (named, Path(path).name) if n]
    for candidate in candidates:
        if _holds_tokenizer(candidate):
            return candidate
    raise UserError(f"{run_dir}: its tokenizer is gone (data.path={path or 'empty'}; expected a dataset or "
                    "export folder holding tokenizer.json)")


def _export_source(folder: Path, lab: str | Path | None) -> ModelSource:
    manifest = read_json(folder / EXPORT_MANIFEST) or {}
    if manifest.get("format") != EXPORT_FORMAT:
        raise UserError(f"{folder}: not a finished glasslab export ({EXPORT_MANIFEST} of format {EXPORT_FORMAT})")
    if "model_config" not in manifest:
        raise UserError(f"{folder}: exported before exports recorded their model config; export the run again")
    return ModelSource(
        kind="export", folder=folder, step=int(manifest.get("step") or 0),
        model_config=configs.from_dict(ModelConfig, manifest["model_config"], "model_config"), config={},
        weights=folder, sha256=file_sha256(folder / EXPORT_MANIFEST), tokenizer=folder,
        dataset_folders=_export_dataset_folders(folder, manifest, lab),
        dataset_manifest_hash=str(manifest.get("dataset_manifest_hash") or ""),
        context=int(manifest.get("seq_len") or 0), run=str(manifest.get("run") or ""))


def _export_dataset_folders(folder: Path, manifest: dict[str, Any], lab: str | Path | None) -> tuple[Path, ...]:
    """Where the dataset of the export's run may be: the folder the export names (``dataset``) in ``lab`` or
    beside the export, then the dataset the run it came from (``run``, in the same places) recorded; none when
    the export names no dataset (a caller that needs it takes ``--data``)."""
    name = manifest.get("dataset")
    if not name:
        return ()
    roots = ([Path(lab)] if lab is not None else []) + [folder.resolve().parent]
    candidates = [root / name for root in roots]
    if manifest.get("run"):
        records = (read_json(root / manifest["run"] / RUN_RECORD) or {} for root in roots)
        candidates += [Path(path) for record in records if (path := (record.get("dataset") or {}).get("path"))]
    return tuple(candidates)


def _holds_tokenizer(folder: Path) -> bool:
    return (folder / TOKENIZER_DIR / "tokenizer.json").is_file() or (folder / "tokenizer.json").is_file()


def _tokenizer_folder(home: Path) -> Path:
    return home / TOKENIZER_DIR if (home / TOKENIZER_DIR / "tokenizer.json").is_file() else home


def _hf_weights(folder: Path) -> dict[str, torch.Tensor]:
    """The export's weights under ``transformers``' own names, as ``from_pretrained`` loads them (offline):
    its in-memory layout is what :func:`~glasslab.model.export.hf_state_dict` wrote, whatever layout the
    installed version keeps on disk."""
    import warnings

    import transformers

    with warnings.catch_warnings():  # zero-width shared experts warn that their init is a no-op
        warnings.simplefilter("ignore")
        hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True)
    return {name: tensor.detach() for name, tensor in hf.state_dict().items()}
