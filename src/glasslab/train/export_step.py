"""The export as a lab step: a run's checkpoint → a Hugging Face folder in ``<lab>/export-<hash8>/``.

``Step("export", "glasslab.train.export_step:export_step", ExportConfig(run=RUN_ID, step=N))``. The
step's folder is the export itself: ``AutoModelForCausalLM.from_pretrained(folder)`` and
``AutoTokenizer.from_pretrained(folder)`` load it offline, beside the export manifest
(``layout.EXPORT_MANIFEST``) and the model card (``README.md``). Its ``step.json`` config names the source
``run`` (the run id: its folder name under the lab root) and ``step``, which is how the observatory links
a run's page to its exports; the run's own timeline gets an ``export`` event too.

Any run exports, pretraining or post-training: the checkpoint is read with :mod:`glasslab.model.load`,
which also says where the tokenizer is and whether the dataset is at hand (its held-out text is what the
logits are compared on; without it, seeded random token ids are).

An export is given away: its manifest and card name the run and the dataset by folder name and the
dataset's manifest hash (``model.load`` finds the dataset again by both in a lab), and the card's facts
go through :class:`glasslab.public.Publicizer`, so no local path or host name leaves the lab in it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from glasslab import config as configs
from glasslab.config import UNVERSIONED, require
from glasslab.data.config import MixtureConfig
from glasslab.data.handle import dataset_trained_on, open_dataset
from glasslab.data.loader import eval_batches
from glasslab.errors import UserError
from glasslab.lab.inputs import RunOutput, resolve_outputs
from glasslab.layout import (
    EXPORT_MANIFEST,
    REPORT_FILE,
    RESULT_FILE,
    STEP_RECORD,
    code_version,
    intact_checkpoint,
    read_json,
)
from glasslab.model.card import model_card
from glasslab.model.export import export_hf
from glasslab.model.load import ModelSource, find_model, load_model
from glasslab.public import Publicizer
from glasslab.track import RunReader, append_event, read_record

DEFAULT_PAGE_URL = "http://127.0.0.1:8765"
"""Where ``glasslab serve`` shows the lab by default; the card links ``<page_url>/run/<run id>``."""


@dataclass(frozen=True)
class ExportConfig(RunOutput):
    """Which checkpoint of which run to export: the run (``run``, a run id or a run folder's path; the executor
    resolves ``run_dir``, the folder of a dependency of that name or that folder under the lab root) and its step.
    ``ExportConfig(**run_output_of(run_step), step=N)`` exports the run a step of the same plan makes."""

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


def export_step(ctx: Any) -> dict[str, Any]:
    """Export ``ctx.config`` (an ExportConfig) into ``ctx.output_dir``; return a summary of the manifest."""
    given = ctx.config if isinstance(ctx.config, ExportConfig) else configs.from_dict(ExportConfig, ctx.config)
    cfg: ExportConfig = resolve_outputs(given, ctx.inputs, ctx.name, ctx.lab_root)  # as given, or as the executor did
    run_dir = cfg.run_folder
    checkpoint_folder(run_dir, cfg.step)  # a one-line error for a folder that is no run, or a missing step
    source = find_model(f"{run_dir}@{cfg.step}")
    if cfg.checkpoint_sha256 and source.sha256 != cfg.checkpoint_sha256:
        raise UserError(f"{source.weights}: changed since this export was planned (its manifest's sha256 "
                        "differs); run `glasslab export` again")
    model = load_model(source)
    record = read_record(run_dir) or {}
    dataset = dataset_trained_on(source)
    facts = Publicizer(ctx.lab_root, [str(record.get("host") or "")]).data(
        export_facts(run_dir, cfg, source, record, dataset))
    digest = open_dataset(dataset).manifest_hash if dataset else None
    manifest = export_hf(
        model, source.model_config, source.tokenizer, Path(ctx.output_dir),
        check_tokens=check_tokens(dataset, source.model_config.vocab_size, source.context, cfg.check_sequences),
        record={"run": run_dir.name, "step": cfg.step, "checkpoint_sha256": source.sha256,
                "seq_len": source.context, "role": record.get("role"),
                "dataset": dataset.resolve().name if dataset else None,
                "dataset_manifest_hash": digest, "code": code_version()},
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
    return intact_checkpoint(run_dir, step)


def check_tokens(dataset: Path | None, vocab_size: int, seq_len: int, sequences: int) -> torch.Tensor:
    """Up to ``sequences`` held-out windows of ``seq_len`` tokens, taken round-robin over the dataset's
    domains; without a dataset (a model tuned from an export), seeded random ids: the comparison of logits
    checks the weight mapping, which any tokens exercise."""
    if dataset is None:
        return torch.randint(vocab_size, (sequences, seq_len), generator=torch.Generator().manual_seed(0))
    domains = sorted(open_dataset(dataset).domains)
    per_domain = {d: next(eval_batches(dataset, d, seq_len, sequences, sequences * (seq_len + 1)))[0]
                  for d in domains[:sequences]}
    rows = [batch[i, :seq_len] for i in range(sequences) for batch in per_domain.values() if i < len(batch)]
    return torch.stack(rows[:sequences])


def export_facts(run_dir: Path, cfg: ExportConfig, source: ModelSource, record: dict[str, Any],
                 dataset: Path | None) -> dict[str, Any]:
    """What the model card says (``model/card.py`` lists the fields), from the run's and ``dataset``'s files."""
    report = (read_json(dataset / REPORT_FILE) or {}) if dataset else {}
    train_cfg = source.config.get("train", {})
    data_cfg = source.config.get("data", {})
    with RunReader(run_dir) as reader:
        at_step = functools.partial(_value_at, reader, step=cfg.step)
        eval_keys = [k for k in reader.scalar_keys() if k.startswith("eval/")]
        evals = {k: v for k in eval_keys if (v := at_step(k)) is not None}
        eval_step = max((s for k in eval_keys for s in reader.scalars(k)[0] if s <= cfg.step), default=None)
        tokens = at_step("train/tokens")
    if tokens is None:  # an old run store: the token count follows from the step
        tokens = cfg.step * train_cfg["global_batch_tokens"]
    result = read_json(run_dir / RESULT_FILE) or {}
    model_cfg = source.model_config
    flops_per_token = record.get("flops_per_token") or model_cfg.flops_per_token(source.context)
    # A pretraining run's weights in force at its start; a post-training run has no mixture.
    weight_sets = configs.from_dict(MixtureConfig, data_cfg["mixture"]).weight_sets() if "mixture" in data_cfg else []
    return {
        "run": run_dir.name,
        "step": cfg.step,
        "page_url": f"{cfg.page_url.rstrip('/')}/run/{run_dir.name}" if cfg.page_url else "",
        "param_counts": model_cfg.param_counts(),
        "model": configs.to_dict(model_cfg),
        "data": {
            "dataset": dataset.name if dataset else "",
            "manifest_hash": report.get("manifest_hash") or record.get("data_manifest_hash", ""),
            "sources": report.get("sources", []),
            "weights": weight_sets[0][1] if weight_sets else {},
        },
        "training": {
            "steps": cfg.step,
            "tokens": int(tokens),
            "flops": float(tokens) * float(flops_per_token),
            "seq_len": source.context,
            "global_batch_tokens": train_cfg["global_batch_tokens"],
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
