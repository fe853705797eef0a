"""Loss curves with the schedule under them: what the grid law (``grid_law``) is fitted on.

A run's eval loss at step s depends on how much it has learnt (the area under its learning-rate
schedule so far) and on how far its learning rate has been annealed. Following Tissue et al. 2024
("Scaling law with learning rate annealing"), both are integrals of the schedule's multiplier
``η_i`` (the peak is 1) over the steps ``i < s``:

- ``S1`` (forward area), in tokens: ``Σ η_i · tokens per step`` — a run at constant LR has seen S1
  tokens; warmup and decay count for less. Measured in tokens, not in steps, so runs with other
  batches (the hero's) sit on one axis with the rungs'.
- ``S2`` (annealing area), dimensionless in [0, 1 − floor]: the LR drops ``δ_i = max(η_{i−1} − η_i, 0)``
  pass through a momentum ``m_i = λ·m_{i−1} + δ_i`` with ``λ = exp(−1/τ)`` and ``S2 = (1 − λ)·Σ m_i``:
  a drop counts fully once τ steps have passed after it, so a decay's benefit builds up over its
  steps and is complete once it has been digested. τ (steps) is fitted with the law.

:func:`read_grid_runs` reads a grid ladder's trunks and branches (run folders) as :class:`RunCurve`
objects; :func:`target_curve` gives the same integrals for the hero's planned schedule at every 5%.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.signal import lfilter

from glasslab import config, track
from glasslab.errors import UserError
from glasslab.ladder.plan import record_law_flops, record_law_params
from glasslab.ladder.rungs import TARGET_METRIC
from glasslab.layout import METRICS_DB, RESULT_FILE
from glasslab.train.config import ScheduleConfig
from glasslab.train.schedule import lr_multiplier

GRID_FIELDS = ("rung", "role", "seed", "steps", "tokens", "flops", "batch_size", "seq_len", "reference_steps")


@dataclass(frozen=True)
class RunCurve:
    """One grid run (a trunk or a branch) and its eval loss along training.

    ``params`` is the law's N (non-embedding active parameters); ``steps``/``losses`` the evals of
    ``eval/macro/loss`` this run logged (a branch's start after its fork); ``schedule``, ``total_steps``
    and ``batch_tokens`` say what the learning rate did at every step, from step 0.
    """

    run_id: str
    rung: str
    role: str
    width: str
    """The trunk's name: every run of one width (``d16-trunk`` and its branches) shares it."""
    seed: int
    reference_steps: int
    """Steps of the width's 1× run (its warmup is the recipe's fraction of these)."""
    params: float
    params_active: float
    tokens: float
    flops: float
    total_flops: float
    size_name: str
    schedule: ScheduleConfig
    total_steps: int
    batch_tokens: int
    steps: tuple[int, ...]
    losses: tuple[float, ...]
    final: float | None
    """The finished run's ``eval/macro/loss`` (None for an unfinished trunk)."""

    @property
    def family(self) -> tuple[str, int]:
        """Runs of one width and seed share a trunk, so its noise: the unit of the grid's noise model."""
        return self.width, self.seed

    @functools.cached_property
    def _multipliers(self) -> np.ndarray:
        return schedule_multipliers(self.schedule, self.total_steps)

    def multipliers(self) -> np.ndarray:
        """The LR multiplier of each of the run's steps (computed once)."""
        return self._multipliers

    def forward_area(self) -> np.ndarray:
        """S1 (tokens) at each logged eval step."""
        return forward_area(self.multipliers(), self.batch_tokens, self.steps)

    def annealing_area(self, taus: Sequence[float]) -> np.ndarray:
        """S2 at each logged eval step for each τ: shape (len(taus), len(steps)); 0 for a run whose
        learning rate never fell (a trunk)."""
        if not self._anneals:
            return np.zeros((len(taus), len(self.steps)))
        return annealing_area(self.multipliers(), taus, self.steps)

    @functools.cached_property
    def _anneals(self) -> bool:
        multipliers = self.multipliers()
        return bool(np.any(multipliers[1:] < multipliers[:-1]))


def schedule_multipliers(schedule: ScheduleConfig, total_steps: int) -> np.ndarray:
    """The LR multiplier of every optimiser step 0 … total_steps − 1 (the trainer's own function)."""
    return np.array([lr_multiplier(schedule, i, total_steps) for i in range(total_steps)])


def forward_area(multipliers: np.ndarray, batch_tokens: int, at_steps: Sequence[float]) -> np.ndarray:
    """S1 in tokens after each of ``at_steps`` optimiser steps (fractional steps interpolate)."""
    cumulative = np.concatenate([[0.0], np.cumsum(multipliers)]) * batch_tokens
    return np.interp(np.asarray(at_steps, dtype=float), np.arange(len(cumulative)), cumulative)


def annealing_area(multipliers: np.ndarray, taus: Sequence[float], at_steps: Sequence[float]) -> np.ndarray:
    """S2 after each of ``at_steps`` steps for each memory τ (steps): shape (len(taus), len(at_steps))."""
    drops = np.maximum(np.concatenate([[0.0], multipliers[:-1] - multipliers[1:]]), 0.0)
    out = np.empty((len(taus), len(at_steps)))
    for k, tau in enumerate(taus):
        keep = float(np.exp(-1.0 / tau))
        momentum = lfilter([1.0], [1.0, -keep], drops)
        cumulative = np.concatenate([[0.0], np.cumsum(momentum)]) * (1.0 - keep)
        out[k] = np.interp(np.asarray(at_steps, dtype=float), np.arange(len(cumulative)), cumulative)
    return out


@dataclass(frozen=True)
class TargetCurve:
    """The hero's planned run at the fractions of its training the band is drawn at."""

    params: float
    fractions: tuple[float, ...]
    steps: tuple[float, ...]
    forward_area: np.ndarray
    multipliers: np.ndarray

    def annealing_area(self, taus: Sequence[float]) -> np.ndarray:
        return annealing_area(self.multipliers, taus, self.steps)


def target_curve(params: float, schedule: ScheduleConfig, total_steps: int, batch_tokens: int,
                 fractions: Sequence[float]) -> TargetCurve:
    """S1 (and S2 on demand) of a planned run of ``total_steps`` steps at each fraction of its training."""
    multipliers = schedule_multipliers(schedule, total_steps)
    steps = tuple(f * total_steps for f in fractions)
    return TargetCurve(params, tuple(fractions), steps, forward_area(multipliers, batch_tokens, steps), multipliers)


def read_grid_runs(run_dirs: Iterable[str | Path]) -> list[RunCurve]:
    """The grid runs in ``run_dirs`` (trunks and branches), their eval curves and schedules.

    A one-line UserError names a folder that is not a grid run or a branch that has not finished.
    """
    curves = []
    for run_dir in map(Path, run_dirs):
        record = track.read_record(run_dir)
        if record is None:
            raise UserError(f"{run_dir}: no run.json; expected a grid ladder's run folder")
        missing = [k for k in GRID_FIELDS if k not in record]
        if missing:
            raise UserError(f"{run_dir}/run.json: missing {', '.join(missing)}; expected a run planned as a grid "
                            "ladder's trunk or branch")
        where = f"{run_dir}/run.json"
        train = config.from_dict(ScheduleConfig, record["config"]["train"]["schedule"], "train.schedule")
        steps, losses = _history(run_dir)
        final = _final(run_dir)
        if record["role"] != "trunk" and final is None:
            raise UserError(f"{run_dir}: grid rung has not finished (no {TARGET_METRIC} in {RESULT_FILE})")
        width = record.get("trunk") or record["rung"]
        curves.append(RunCurve(
            run_id=run_dir.name, rung=str(record["rung"]), role=str(record["role"]), width=str(width),
            seed=int(record["seed"]), reference_steps=int(record["reference_steps"]),
            params=record_law_params(record, where),
            params_active=float(record["params_active"]), tokens=float(record["tokens"]),
            flops=record_law_flops(record, where), total_flops=float(record["flops"]),
            size_name=str(record.get("size_name", "")), schedule=train, total_steps=int(record["steps"]),
            batch_tokens=int(record["batch_size"]) * int(record["seq_len"]), steps=tuple(steps),
            losses=tuple(losses), final=final))
    return sorted(curves, key=lambda c: (c.params, c.role != "trunk", c.tokens, c.seed))


def _history(run_dir: Path) -> tuple[list[int], list[float]]:
    if not (run_dir / METRICS_DB).is_file():
        return [], []
    with track.RunReader(run_dir) as reader:
        return reader.scalars(TARGET_METRIC)


def _final(run_dir: Path) -> float | None:
    path = run_dir / RESULT_FILE
    if not path.is_file():
        return None
    value = json.loads(path.read_text()).get(TARGET_METRIC)
    return float(value) if isinstance(value, (int, float)) else None
