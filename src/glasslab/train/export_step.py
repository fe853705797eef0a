"""The export as a lab step: a run's checkpoint → a Hugging Face folder in ``<lab>/export-<hash8>/``.

``Step("export", "glasslab.train.export_step:export_step", ExportConfig(run=RUN_ID, step=N))``. The
step's folder is the export itself: ``AutoModelForCausalLM.from_pretrained(folder)`` and
``AutoTokenizer.from_pretrained(folder)`` load it offline, beside the export manifest
(``layout.EXPORT_MANIFEST``) and the model card (``README.md``). Its ``step.json`` config names the source
``run`` (the run id: its folder name under the lab root) and ``step``, which is how the observatory links
a run's page to its exports; the run's own timeline gets an ``export`` event too.

It lives in ``train/`` because it is the part that knows checkpoints, the model and the data together.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from glasslab import config as configs
from glasslab.config import UNVERSIONED, require
from glasslab.data import eval_batches, read_manifest
from glasslab.data.tokenizer import TOKENIZER_DIR
from glasslab.errors import UserError
from glasslab.layout import (
    EXPORT_MANIFEST,
    MANIFEST_FILE,
    REPORT_FILE,
    RESULT_FILE,
    STEP_RECORD,
    code_version,
    file_sha256,
    read_json,
)
from glasslab.model import Transformer
from glasslab.model.card import model_card
from glasslab.model.export import export_hf
from glasslab.track import RunReader, append_event, read_record
from glasslab.train import checkpoint as ckpt
from glasslab.train.run_config import RunConfig

DEFAULT_PAGE_URL = "http://127.0.0.1:8765"
"""Where ``glasslab serve`` shows the lab by default; the card links ``<page_url>/run/<run id>``."""


@dataclass(frozen=True)
class ExportConfig:
    """Which checkpoint of which run to export."""

    run: str = ""
    """The run id (its folder name under the lab root), or the path of a run folder elsewhere."""
    step: int = 0
    """The checkpoint to export: the optimiser step it was taken after."""
    checkpoint_sha256: str = ""
    """sha256 of that checkpoint's manifest, so a retrained run exports to a new folder (``glasslab export``
    sets it; empty where the run is a dependency step, whose hash already covers it)."""
    check_sequences: int = 4
    """Held-out sequences the exported model's logits are compared with ours on."""
    page_url: str = field(default=DEFAULT_PAGE_URL, metadata=UNVERSIONED)
    """The observatory's address, for the model card's link to the run's page."""

    def __post_init__(self) -> None:
        require(bool(self.run), "export.run", self.run, "a run id or run folder")
        require(self.step >= 0, "export.step", self.step, "a checkpoint step >= 0")
        require(self.check_sequences >= 1, "export.check_sequences", self.check_sequences, ">= 1")


def run_folder(lab_root: Path, run: str) -> Path:
    """The folder of run ``run`` (a run id under ``lab_root``, or a path)."""
    path = Path(run)
    return path if path.is_absolute() else Path(lab_root) / run


def export_step(ctx: Any) -> dict[str, Any]:
    """Export ``ctx.config`` (an ExportConfig) into ``ctx.output_dir``; return a summary of the manifest."""
    cfg: ExportConfig = ctx.config if isinstance(ctx.config, ExportConfig) else configs.from_dict(
        ExportConfig, ctx.config)
    run_dir = run_folder(ctx.lab_root, cfg.run)
    checkpoint = checkpoint_folder(run_dir, cfg.step)
    if cfg.checkpoint_sha256 and file_sha256(checkpoint / MANIFEST_FILE) != cfg.checkpoint_sha256:
        raise UserError(f"{checkpoint}: changed since this export was planned (its manifest's sha256 differs); "
                        "run `glasslab export` again")
    run_cfg = configs.from_dict(RunConfig, ckpt.checkpoint_config(checkpoint))
    model = Transformer(run_cfg.model)
    ckpt.load_model_weights(model, checkpoint)
    record = read_record(run_dir) or {}
    dataset = dataset_folder(ctx.lab_root, run_cfg, record)
    facts = export_facts(run_dir, cfg, run_cfg, record, dataset)
    manifest = export_hf(
        model, run_cfg.model, dataset / TOKENIZER_DIR, Path(ctx.output_dir),
        check_tokens=check_tokens(dataset, run_cfg.train.seq_len, cfg.check_sequences),
        record={"run": run_dir.name, "step": cfg.step, "checkpoint_sha256": file_sha256(checkpoint / MANIFEST_FILE),
                "dataset": dataset.name, "dataset_path": str(dataset.resolve()), "code": code_version()},
        card=lambda manifest: model_card({**facts, **manifest}),
        step_folder=True,
    )
    difference = manifest["max_logit_diff"]
    append_event(run_dir, "export", f"step {cfg.step} exported as {manifest['architecture']}",
                 f"{Path(ctx.output_dir).name}: loads with transformers.AutoModelForCausalLM; logits within "
                 f"{difference:.1e} of glasslab's", step=cfg.step)
    return {"run": run_dir.name, "step": cfg.step, "architecture": manifest["architecture"],
            "max_logit_diff": difference}


def find_export(lab_root: Path, run: str, step: int, checkpoint_sha256: str) -> Path | None:
    """A finished export step folder in the lab of exactly this checkpoint (the demo's own export step, an
    earlier ``glasslab export``), so the same checkpoint is not exported twice under two configs."""
    for manifest_path in sorted(Path(lab_root).glob(f"*/{EXPORT_MANIFEST}")):
        manifest = read_json(manifest_path) or {}
        record = read_json(manifest_path.parent / STEP_RECORD) or {}
        if (record.get("status") == "succeeded" and manifest.get("run") == run and manifest.get("step") == step
                and manifest.get("checkpoint_sha256") == checkpoint_sha256):
            return manifest_path.parent
    return None


def checkpoint_folder(run_dir: Path, step: int) -> Path:
    """The intact checkpoint of ``run_dir`` at ``step``; a one-line UserError naming the steps there are."""
    if read_record(run_dir) is None:
        raise UserError(f"{run_dir}: not a training run (no run.json)")
    return ckpt.intact_checkpoint(run_dir, step)


def dataset_folder(lab_root: Path, run_cfg: RunConfig, record: dict[str, Any]) -> Path:
    """The run's dataset: the folder its run.json names under the lab root, else ``data.path`` as given."""
    named = (record.get("dataset") or {}).get("folder")
    candidates = [Path(lab_root) / named] if named else []
    candidates += [Path(run_cfg.data.path), Path(lab_root) / Path(run_cfg.data.path).name]
    for candidate in candidates:
        if (candidate / MANIFEST_FILE).is_file():
            return candidate
    raise UserError(f"the run's dataset ({named or run_cfg.data.path}) is gone; the export needs its tokenizer")


def check_tokens(dataset: Path, seq_len: int, sequences: int) -> torch.Tensor:
    """Up to ``sequences`` held-out windows of ``seq_len`` tokens, taken round-robin over the domains."""
    domains = sorted(read_manifest(dataset)["domains"])
    per_domain = {d: next(eval_batches(dataset, d, seq_len, sequences, sequences * (seq_len + 1)))
                  for d in domains[:sequences]}
    rows = [batch[i, :seq_len] for i in range(sequences) for batch in per_domain.values() if i < len(batch)]
    return torch.stack(rows[:sequences])


def export_facts(run_dir: Path, cfg: ExportConfig, run_cfg: RunConfig, record: dict[str, Any],
                 dataset: Path) -> dict[str, Any]:
    """What the model card says (``model/card.py`` lists the fields), from the run's and dataset's files."""
    report = read_json(dataset / REPORT_FILE) or {}
    with RunReader(run_dir) as reader:
        at_step = functools.partial(_value_at, reader, step=cfg.step)
        eval_keys = [k for k in reader.scalar_keys() if k.startswith("eval/")]
        evals = {k: v for k in eval_keys if (v := at_step(k)) is not None}
        eval_step = max((s for k in eval_keys for s in reader.scalars(k)[0] if s <= cfg.step), default=None)
        tokens = at_step("train/tokens")
    if tokens is None:  # an old run store: the token count follows from the step
        tokens = cfg.step * run_cfg.train.global_batch_tokens
    result = read_json(run_dir / RESULT_FILE) or {}
    flops_per_token = record.get("flops_per_token") or run_cfg.model.flops_per_token(run_cfg.train.seq_len)
    weight_sets = run_cfg.data.mixture.weight_sets()
    return {
        "run": run_dir.name,
        "step": cfg.step,
        "page_url": f"{cfg.page_url.rstrip('/')}/run/{run_dir.name}" if cfg.page_url else "",
        "param_counts": run_cfg.model.param_counts(),
        "model": configs.to_dict(run_cfg.model),
        "data": {
            "dataset": dataset.name,
            "manifest_hash": report.get("manifest_hash") or record.get("data_manifest_hash", ""),
            "sources": report.get("sources", []),
            "weights": weight_sets[0][1] if weight_sets else {},
        },
        "training": {
            "steps": cfg.step,
            "tokens": int(tokens),
            "flops": float(tokens) * float(flops_per_token),
            "seq_len": run_cfg.train.seq_len,
            "global_batch_tokens": run_cfg.train.global_batch_tokens,
            "device": record.get("device", "cpu"),
            "world_size": record.get("world_size", 1),
            "final_step": result.get("step"),
        },
        "evals": {"step": eval_step, "metrics": evals,
                  "tasks": {name: {k: task.get(k) for k in ("items", "chance", "metric", "sha256")}
                            for name, task in (record.get("tasks") or {}).items()}},
    }


def _value_at(reader: RunReader, key: str, step: int) -> float | None:
    """``key``'s value at the last logged step <= ``step`` (latest attempt), or None."""
    steps, values = reader.scalars(key)
    found = [v for s, v in zip(steps, values, strict=True) if s <= step]
    return found[-1] if found else None
