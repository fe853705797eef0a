"""``train()``: a run folder from a RunConfig — fresh, resumed after a crash, or forked from another run.

Run folder: ``run.json`` (written before step 0, never changed), ``metrics.db``, ``checkpoints/``
and, once finished, ``result.json``. Only rank 0 writes; the other ranks train and keep quiet.

- ``resume=True`` continues from the newest intact checkpoint (a damaged one is skipped and recorded
  as ``checkpoint_fallback``). The config may differ only in unversioned fields (intervals,
  retention); any other difference fails naming the fields — a deliberate change is a fork.
- ``fork="PARENT_DIR@STEP"`` starts a new run from the parent's checkpoint at STEP with this config
  (same model, anything else may change); run.json links the parent and a ``fork`` event lists the
  changed fields. Step numbers continue from STEP, so the curves join up.
- SIGTERM (preemption) finishes the current step, writes a checkpoint, records ``preempted`` and
  returns normally; ``glasslab train --resume`` later continues it.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from glasslab import config as configs
from glasslab import track
from glasslab.errors import UserError
from glasslab.layout import METRICS_DB, RESULT_FILE, TRAINER_STATE, write_json_atomic
from glasslab.train import checkpoint as ckpt
from glasslab.train import distributed
from glasslab.train.build import build_parts, describe
from glasslab.train.compile_rule import run_compile_choice
from glasslab.train.loop import Trainer
from glasslab.train.rng import capture_rng, restore_rng
from glasslab.train.run_config import RunConfig
from glasslab.train.throughput import peak_flops


def train(run_cfg: RunConfig, run_dir: str | Path, *, resume: bool = False, fork: str | None = None,
          record_extra: dict | None = None, device: str = "cpu",
          progress: Callable[[int, int, dict[str, float]], None] | None = None) -> dict[str, Any]:
    """Train ``run_cfg`` into ``run_dir``; return the final metrics (incl. ``eval/macro/loss``).

    ``progress(step, total_steps, last_metrics)`` is called after every optimiser step (a progress
    bar, say); it must be cheap.

    Under torchrun every rank calls this; the process group is set up from the environment. Apart
    from ``run_dir`` it leaves no trace: RNG states and the SIGTERM handler are put back on return.
    """
    run_dir = Path(run_dir)
    caller_rng = capture_rng()  # the run seeds every generator; the caller gets its own back
    ctx = distributed.setup(device)
    finished = False
    try:
        result = _train(run_cfg, run_dir, ctx, resume, fork, record_extra or {}, progress)
        finished = True
        return result
    finally:
        ctx.close(clean=finished)
        restore_rng(caller_rng)


def _train(run_cfg: RunConfig, run_dir: Path, ctx: distributed.DistContext, resume: bool, fork: str | None,
           record_extra: dict, progress: Callable[[int, int, dict[str, float]], None] | None) -> dict[str, Any]:
    cfg = run_cfg.train
    cfg.micro_batches(ctx.world_size)  # batch shape errors before anything is built
    config_data = configs.to_dict(run_cfg)
    fallbacks: list[tuple[int, str]] = []
    start_from: Path | None = None
    if resume:
        reason = "resume"
        if ctx.is_main:
            ckpt.sweep_temp(run_dir)  # half-written folders of the killed writer
        start_from = _resume_point(run_dir, run_cfg, config_data, fallbacks)
    elif fork:
        reason = "fork"
        parent_dir, parent_step, start_from = _fork_point(fork, run_cfg, config_data)
        record_extra = {**record_extra, "parent": {"run": parent_dir.name, "run_dir": str(parent_dir),
                                                   "step": parent_step}}
    else:
        reason = "start"
        if (run_dir / METRICS_DB).exists() or ckpt.list_checkpoints(run_dir):
            raise UserError(f"{run_dir}: already holds a run; pass --resume to continue it or choose another folder")

    parts = build_parts(run_cfg, ctx)
    bf16 = cfg.precision == "bf16" or (cfg.precision == "auto" and ctx.device.type == "cuda")
    peak, peak_source = peak_flops(cfg.peak_flops, ctx.device, bf16)
    run = None
    ctx.barrier()  # every rank has checked the folder before rank 0 writes into it
    if ctx.is_main:
        extra = {**describe(run_cfg), "world_size": ctx.world_size, "device": str(ctx.device),
                 "peak_flops": peak, "peak_flops_source": peak_source, "total_steps": cfg.total_steps,
                 "compile": dataclasses.asdict(run_compile_choice(cfg, parts.flops_per_token, ctx.device)),
                 **record_extra}
        run = track.init(run_dir, config_data, record_extra=extra, reason=reason)
    try:
        trainer = Trainer(cfg, parts, run, run_dir, ctx, config_data, peak, progress)
        for step, problem in fallbacks:
            trainer.record_fallback(step, problem)
        if start_from is not None:
            trainer.load(start_from, fork=reason == "fork")
        if run is not None and reason == "resume":
            run.annotate("resume", f"resumed at step {trainer.step}", step=trainer.step)
        if run is not None and reason == "fork":
            changed = configs.diff(checkpoint_config(start_from), config_data)
            run.annotate("fork", f"forked from {record_extra['parent']['run']}@{trainer.step}",
                         body="changed: " + (", ".join(changed) or "nothing"), step=trainer.step)
        started = time.time()
        with _preemption_signal(trainer):
            status = trainer.fit()
        result = _result(trainer, status, time.time() - started)
        if run is not None:
            if status == "finished":
                write_json_atomic(run_dir / RESULT_FILE, result)
            run.finish(status)
        return result
    except BaseException:
        if run is not None:
            run.finish("failed")
        raise


def _resume_point(run_dir: Path, run_cfg: RunConfig, config_data: dict, fallbacks: list) -> Path | None:
    """The checkpoint to resume from (None: none was written yet), after checking the config is the same."""
    record = track.read_record(run_dir)
    if record is None:
        raise UserError(f"{run_dir}: nothing to resume (no run.json); start it without --resume")
    found = ckpt.latest_valid(run_dir, on_fallback=lambda step, problem: fallbacks.append((step, problem)))
    if found:
        changed = configs.diff(checkpoint_config(found[1]), config_data)
    else:  # killed before its first checkpoint: run.json holds the config, with secrets redacted
        changed = configs.diff(record["config"], configs.redact(config_data))
    changed = [key for key in changed if key not in _unversioned_keys(run_cfg)]
    if changed:
        raise UserError(f"{run_dir}: cannot resume with a changed config ({', '.join(changed)} differ); "
                        "use --fork RUN@STEP for a deliberate change")
    return found[1] if found else None


def _fork_point(fork: str, run_cfg: RunConfig, config_data: dict) -> tuple[Path, int, Path]:
    """(parent run folder, step, checkpoint folder) of ``PARENT_DIR@STEP``, checked."""
    parent, sep, step_text = fork.rpartition("@")
    if not sep or not step_text.isdigit():
        raise UserError(f"--fork {fork!r}: expected RUN@STEP, e.g. my-run@200")
    parent_dir, step = Path(parent), int(step_text)
    path = ckpt.checkpoint_path(parent_dir, step)
    available = [s for s, _ in ckpt.list_checkpoints(parent_dir)]
    if not path.is_dir():
        raise UserError(f"--fork {fork!r}: no checkpoint at step {step} in {parent_dir} "
                        f"(available: {', '.join(map(str, available)) or 'none'})")
    problem = ckpt.problem_with(path)
    if problem is not None:
        raise UserError(f"--fork {fork!r}: checkpoint {path} is damaged: {problem}")
    model_changes = [k for k in configs.diff(checkpoint_config(path), config_data) if k.startswith("model.")]
    if model_changes:
        raise UserError(f"--fork {fork!r}: a fork keeps the parent's model, but {', '.join(model_changes)} differ")
    return parent_dir, step, path


def checkpoint_config(checkpoint_dir: Path) -> dict:
    """The full (unredacted) run config stored in a checkpoint."""
    return torch.load(Path(checkpoint_dir) / TRAINER_STATE, map_location="cpu", weights_only=False)["config"]


def _unversioned_keys(run_cfg: RunConfig) -> set[str]:
    """Dotted keys of fields marked UNVERSIONED (present in the full dict, absent in the versioned one)."""
    return set(configs.diff(configs.to_dict(run_cfg), configs.to_dict(run_cfg, versioned_only=True)))


def _result(trainer: Trainer, status: str, seconds: float) -> dict[str, Any]:
    """Final metrics, counters (tokens, training FLOPs = tokens × FLOPs/token) and per-rank state hashes."""
    return {
        **trainer.last_metrics,
        "status": status,
        "step": trainer.step,
        "tokens": trainer.tokens,
        "flops": trainer.tokens * trainer.parts.flops_per_token,
        "seconds": seconds,
        "replica_state_sha256": trainer.ctx.all_gather_object(trainer.replica_fingerprint()),
    }


class _preemption_signal:
    """While active, SIGTERM asks the trainer to checkpoint and stop after the current step."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.previous = None

    def _handle(self, signum, frame) -> None:
        self.trainer.preempt_requested = True

    def __enter__(self) -> None:
        if threading.current_thread() is threading.main_thread():  # signals only reach the main thread
            self.previous = signal.signal(signal.SIGTERM, self._handle)

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
