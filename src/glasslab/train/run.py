"""``train()``: a run folder from a RunConfig (or a post-training step's recipe) — fresh, resumed after a
crash, or forked from another run.

Run folder: ``run.json`` (written before step 0, never changed), ``metrics.db``, ``checkpoints/``
and, once finished, ``result.json``. Only rank 0 writes; the other ranks train and keep quiet.

- ``resume=True`` continues from the newest intact checkpoint (a damaged one is skipped and recorded
  as ``checkpoint_fallback``). The config may differ only in unversioned fields (intervals,
  retention); any other difference fails naming the fields — a deliberate change is a fork.
- ``fork=ForkPoint(...)`` starts a new run from the parent's checkpoint with this config (same
  model, anything else may change); run.json links the parent and a ``fork`` event lists the changed
  fields. Step numbers continue from the parent's step, so the curves join up.
- SIGTERM (preemption) finishes the current step, writes a checkpoint, records ``preempted`` and
  returns normally; a rerun of the step (or ``glasslab train --resume``) later continues it.

A resume, a fall-back past a damaged checkpoint and a fork are also said on the terminal (stderr,
rank 0), so a person watching knows where the run picked up.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from glasslab import config as configs
from glasslab import track
from glasslab.data.handle import open_dataset
from glasslab.errors import UserError
from glasslab.layout import METRICS_DB, RESULT_FILE, latest_checkpoint, write_json_atomic
from glasslab.train import checkpoint as ckpt
from glasslab.train import distributed
from glasslab.train.build import Pretraining
from glasslab.train.callbacks import Callback
from glasslab.train.compile_rule import run_compile_choice
from glasslab.train.fork import ForkPoint, fork_checkpoint
from glasslab.train.loop import Trainer
from glasslab.train.recipe import Recipe
from glasslab.train.rng import capture_rng, restore_rng
from glasslab.train.run_config import RunConfig
from glasslab.train.throughput import peak_flops


def train(run: RunConfig | Recipe, run_dir: str | Path, *, resume: bool = False, fork: ForkPoint | None = None,
          record_extra: dict | None = None, device: str = "cpu", callbacks: Sequence[Callback] = ()) -> dict[str, Any]:
    """Train ``run`` into ``run_dir``; return the final metrics (incl. ``eval/macro/loss`` for pretraining).

    ``run`` is a RunConfig (pretraining) or a :class:`~glasslab.train.recipe.Recipe` that builds its own
    parts (what a post-training step hands in).

    ``callbacks`` join the trainer's own at its fixed points (see ``callbacks.py``): they are told of every
    step, eval and checkpoint, may ask to stop, and their state is kept in the checkpoints.

    Under torchrun every rank calls this; the process group is set up from the environment. Apart
    from ``run_dir`` it leaves no trace: RNG states and the SIGTERM handler are put back on return.
    """
    run_dir = Path(run_dir)
    recipe = as_recipe(run)  # the vocabulary follows the tokenizer: run.json records the size used
    caller_rng = capture_rng()  # the run seeds every generator; the caller gets its own back
    ctx = distributed.setup(device)
    finished = False
    try:
        result = _train(recipe, run_dir, ctx, resume, fork, record_extra or {}, callbacks)
        finished = True
        return result
    finally:
        ctx.close(clean=finished)
        restore_rng(caller_rng)


def as_recipe(run: RunConfig | Recipe) -> Recipe:
    """``run`` as a recipe: a RunConfig is pretraining (its sinks checked, its dataset resolved), a recipe stays
    itself."""
    return Pretraining(run) if isinstance(run, RunConfig) else run


def _train(recipe: Recipe, run_dir: Path, ctx: distributed.DistContext, resume: bool, fork: ForkPoint | None,
           record_extra: dict, callbacks: Sequence[Callback]) -> dict[str, Any]:
    cfg = recipe.config.train
    cfg.micro_batches(ctx.world_size)  # batch shape errors before anything is built
    config_data = configs.to_dict(recipe.config)
    reason, start_from, fallbacks = _start_point(recipe, run_dir, ctx, resume, fork, config_data)
    if reason == "fork":
        record_extra = {**record_extra, "parent": fork.lineage()}

    parts = recipe.build(ctx)
    peak, peak_source = peak_flops(cfg.peak_flops, ctx.device, cfg.bf16_on(ctx.device.type))
    run = None
    ctx.barrier()  # every rank has checked the folder before rank 0 writes into it
    if ctx.is_main:
        # The threads too: CPU kernels may sum in another order on another count (`glasslab reproduce` uses it).
        extra = {**recipe.describe(), "world_size": ctx.world_size, "device": str(ctx.device),
                 "threads": torch.get_num_threads(),
                 "peak_flops": peak, "peak_flops_source": peak_source, "total_steps": cfg.total_steps,
                 "compile": dataclasses.asdict(run_compile_choice(cfg, parts.flops_per_token, ctx.device)),
                 **record_extra}
        run = track.init(run_dir, config_data, sinks=cfg.sinks, record_extra=extra, reason=reason)
    try:
        trainer = Trainer(cfg, parts, run, run_dir, ctx, config_data, peak, callbacks)
        for step, problem in fallbacks:
            trainer.record_fallback(step, problem)
        if start_from is not None:
            trainer.load(start_from, fork=reason == "fork")
        if reason == "resume":
            lines = [f"checkpoint step {step} is damaged ({problem}); resuming from step {trainer.step}"
                     for step, problem in fallbacks]
            _say(ctx, *(lines or [f"resuming from step {trainer.step}"]))
            if run is not None:
                run.annotate("resume", f"resumed at step {trainer.step}", step=trainer.step)
        if reason == "fork":
            changed = configs.diff(ckpt.checkpoint_config(start_from), config_data)
            _say(ctx, f"forking {fork} (changed: {', '.join(changed) or 'nothing'})")
            if run is not None:
                run.annotate("fork", f"forked from {fork}", body="changed: " + (", ".join(changed) or "nothing"),
                             step=trainer.step)
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


def _start_point(recipe: Recipe, run_dir: Path, ctx: distributed.DistContext, resume: bool, fork: ForkPoint | None,
                 config_data: dict) -> tuple[str, Path | None, list[tuple[int, str]]]:
    """Why this attempt begins (``resume``, ``fork`` or ``start``), the checkpoint it loads (None: from
    scratch) and the damaged checkpoints a resume passed over (step, problem), after checking the folder."""
    fallbacks: list[tuple[int, str]] = []
    if resume:
        if ctx.is_main:
            ckpt.sweep_temp(run_dir)  # half-written folders of the killed writer
        check_resumable(run_dir, recipe)
        found = latest_checkpoint(run_dir, on_fallback=lambda step, problem: fallbacks.append((step, problem)))
        return "resume", found[1] if found else None, fallbacks
    if fork is not None:
        return "fork", fork_checkpoint(fork, config_data), fallbacks
    check_fresh(run_dir)
    return "start", None, fallbacks


def check_fresh(run_dir: str | Path) -> None:
    """Raise a one-line UserError when ``run_dir`` already holds a run (a fresh start would mix two).

    A run store with no ``run.json`` and no checkpoint is a start that died before its record was written
    (``track.init`` opens the store first): nothing was trained, so it is removed and the start goes on,
    rather than a retry of the same step being refused forever."""
    run_dir = Path(run_dir)
    if ckpt.list_checkpoints(run_dir) or ((run_dir / METRICS_DB).exists() and track.read_record(run_dir)):
        raise UserError(f"{run_dir}: already holds a run; pass --resume to continue it or choose another folder")
    for leftover in run_dir.glob(f"{METRICS_DB}*"):  # the database and its -wal/-shm files
        leftover.unlink(missing_ok=True)  # every rank checks, before rank 0 writes


def check_resumable(run_dir: str | Path, run: RunConfig | Recipe) -> None:
    """Raise a one-line UserError unless ``run_dir`` holds a run that ``run`` may continue: it has
    a ``run.json`` whose config differs from ``run``'s in unversioned fields at most (intervals,
    retention). Compared as recorded (secrets redacted), so nothing is unpickled."""
    record = track.read_record(run_dir)
    if record is None:
        raise UserError(f"{run_dir}: nothing to resume (no run.json); start it without --resume")
    config = as_recipe(run).config  # run.json holds the vocabulary the run resolved
    changed = configs.diff(record["config"], configs.redact(configs.to_dict(config)))
    changed = [key for key in changed if key not in _unversioned_keys(config) and not _data_moved(key, record, config)]
    if changed:
        raise UserError(f"{run_dir}: cannot resume with a changed config ({', '.join(changed)} differ); "
                        "use --fork RUN@STEP for a deliberate change")


def _say(ctx: distributed.DistContext, *lines: str) -> None:
    """Tell the person at the terminal (rank 0, stderr; a step's stderr is its step.log)."""
    if ctx.is_main:
        for line in lines:
            print(line, file=sys.stderr, flush=True)


def _data_moved(key: str, record: dict[str, Any], config: Any) -> bool:
    """Whether ``key`` is ``data.path`` and the dataset there is the one the run trained on (the same
    manifest): the same data at another path, as on another node of an object-store lab, whose working
    copy is its own folder (docs/formats.md)."""
    if key != "data.path" or not record.get("data_manifest_hash"):
        return False
    try:
        return open_dataset(config.data.path).manifest_hash == record["data_manifest_hash"]
    except (OSError, UserError):
        return False


def _unversioned_keys(config: Any) -> set[str]:
    """Dotted keys of fields marked UNVERSIONED (present in the full dict, absent in the versioned one)."""
    return set(configs.diff(configs.to_dict(config), configs.to_dict(config, versioned_only=True)))


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
