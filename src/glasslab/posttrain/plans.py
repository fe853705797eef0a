"""The steps ``glasslab sft`` and ``glasslab dpo`` run: the data folder, the tuning run, and its export.

    steps = sft_steps("demo-hero-1a2b3c4d", ["my.jsonl"], lab, heldout=["held.jsonl"])
    run_one_step(steps[-1], lab)      # conversations -> sft -> export, each a step folder in the lab

The base is named as the lab knows it (a run id, ``@STEP``, or an export's id) when it lives in the lab,
else by its path, and the step's config records the sha256 of its checkpoint's (or export's) manifest and
of every data file given: the same command again finds the finished steps, and a retrained base or an
edited file makes new ones. A model that no ``transformers`` class represents gets no export step (said
by :func:`export_note`); the tuned run is chattable from its checkpoints all the same.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from glasslab.errors import UserError
from glasslab.lab import NO_OUTPUT, Step, output_of, run_output_of
from glasslab.model.export import ExportError, hf_architecture
from glasslab.model.load import ModelSource
from glasslab.posttrain.base import find_base
from glasslab.posttrain.conversations import ConversationsConfig, conversations_step
from glasslab.posttrain.dpo import DPOStepConfig
from glasslab.posttrain.pairs import PairsConfig, pairs_step
from glasslab.posttrain.records import file_hashes
from glasslab.posttrain.sft import SFTStepConfig
from glasslab.posttrain.tuning import TuningStepConfig, tune_step
from glasslab.train.export_step import ExportConfig, export_step

BUILTIN = "builtin"
"""Named among the data files: the built-in instruction set (SFT) or the built-in pairs (DPO)."""
TASK_PREFIX = "builtin:"
"""``builtin:TASK`` among SFT's conversations: a built-in RL task's training problems with their answers."""


def base_name(source: ModelSource, lab: str | Path) -> str:
    """How a step's config names the base: its id in ``lab`` (``RUN@STEP`` for a run) when it lives there,
    else its absolute path."""
    in_lab = source.folder.resolve().parent == Path(lab).resolve()
    return source.name if in_lab else source.ref


def _sources(files: Sequence[str], heldout: Sequence[str]) -> tuple[bool, tuple[str, ...], tuple[str, ...]]:
    """(whether ``builtin`` is named, the files and the held-out files as absolute paths)."""
    return (BUILTIN in files, tuple(str(Path(f).resolve()) for f in files if f != BUILTIN),
            tuple(str(Path(f).resolve()) for f in heldout))


def sft_steps(base: str, conversations: Sequence[str], lab: str | Path, *, heldout: Sequence[str] = (),
              cfg: SFTStepConfig | None = None) -> list[Step]:
    """conversations -> sft -> export for ``glasslab sft``; ``cfg`` gives the schedule, packing and device
    (its base and dependencies are filled in here)."""
    source = find_base(base, lab)
    tasks = [c.removeprefix(TASK_PREFIX) for c in conversations if c.startswith(TASK_PREFIX)]
    if len(tasks) > 1:
        raise UserError(f"conversations: {len(tasks)} built-in tasks named ({', '.join(tasks)}); expected one")
    builtin, files, held = _sources([c for c in conversations if not c.startswith(TASK_PREFIX)], heldout)
    data = Step("conversations", conversations_step,
                ConversationsConfig(builtin=builtin, files=files, heldout_files=held,
                                    file_hashes=file_hashes(files + held), task=tasks[0] if tasks else ""))
    cfg = dataclasses.replace(cfg or SFTStepConfig(), conversations_from=output_of(data))
    return _tuning_steps("sft", cfg, data, source, lab)


def dpo_steps(base: str, pairs: Sequence[str], lab: str | Path, *, heldout: Sequence[str] = (),
              cfg: DPOStepConfig | None = None) -> list[Step]:
    """pairs -> dpo -> export for ``glasslab dpo``."""
    source = find_base(base, lab)
    builtin, files, held = _sources(pairs, heldout)
    data = Step("pairs", pairs_step,
                PairsConfig(builtin=builtin, files=files, heldout_files=held, file_hashes=file_hashes(files + held)))
    cfg = dataclasses.replace(cfg or DPOStepConfig(), pairs_from=output_of(data))
    return _tuning_steps("dpo", cfg, data, source, lab)


def _tuning_steps(name: str, cfg: TuningStepConfig, data: Step, source: ModelSource, lab: str | Path) -> list[Step]:
    """data -> the tuning step ``name`` of ``source`` -> its export (when the model has one)."""
    config = dataclasses.replace(cfg, base=base_name(source, lab), base_sha256=source.sha256, base_from=NO_OUTPUT)
    tuned = Step(name, tune_step, config)
    return [data, tuned, *_export(tuned, source, cfg.train.total_steps)]


def export_note(source: ModelSource) -> str | None:
    """Why a model tuned from ``source`` gets no export step, or None when it does."""
    try:
        hf_architecture(source.model_config)
    except ExportError as exc:
        return f"no export: {exc}"
    return None


def _export(tuned: Step, source: ModelSource, steps: int) -> list[Step]:
    if export_note(source) is not None:
        return []
    return [Step("export", export_step, ExportConfig(**run_output_of(tuned), step=steps))]
