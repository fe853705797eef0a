"""Reading what a ladder's runs measured: run folders → :class:`Rung` objects for the fits.

A rung's runs carry in ``run.json`` the fields the planner put there (``role``, ``ladder``, ``rung``,
``seed``, ``size_name``, ``params_active``, ``tokens``, ``flops``, ``steps``, ``batch_size``,
``seq_len``; see :func:`glasslab.ladder.plan.rung_record_extra`); the law's compute leaves out the LM
head's FLOPs, counted from the model config the record also carries. The final loss
is ``eval/macro/loss`` from ``result.json``, else the eval logged at the last planned step (an
unfinished run is an error, not a data point); losses logged along the way give the rung's loss at
every 5% of its training (linear in steps between evals), which the curve fit uses. Seeds of one
rung become one :class:`Rung`; their configs must differ only in seeds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from glasslab import config, track
from glasslab.errors import UserError
from glasslab.ladder.plan import record_law_flops
from glasslab.ladder.predict import CURVE_FRACTIONS
from glasslab.ladder.rungs import TARGET_METRIC, Rung
from glasslab.layout import METRICS_DB, RESULT_FILE

REQUIRED_FIELDS = ("rung", "params_active", "flops", "steps", "tokens")


def find_ladder_runs(lab_root: str | Path, ladder: str | None = None) -> list[Path]:
    """Run folders under ``lab_root`` whose record says ``role: rung`` (and ``ladder`` when given)."""
    found = []
    for record_path in sorted(Path(lab_root).glob("*/run.json")):
        record = json.loads(record_path.read_text())
        if record.get("role") == "rung" and (ladder is None or record.get("ladder") == ladder):
            found.append(record_path.parent)
    return found


def read_rungs(run_dirs: Iterable[str | Path]) -> list[Rung]:
    """One :class:`Rung` per rung name, its seeds' losses collected from their run folders."""
    by_rung: dict[str, list[tuple[Path, dict, float, dict[float, float]]]] = {}
    for run_dir in map(Path, run_dirs):
        record = track.read_record(run_dir)
        if record is None:
            raise UserError(f"{run_dir}: no run.json; expected a ladder rung's run folder")
        missing = [k for k in REQUIRED_FIELDS if k not in record]
        if missing:
            raise UserError(f"{run_dir}/run.json: missing {', '.join(missing)}; expected a run planned as a "
                            "ladder rung")
        steps, losses = _target_history(run_dir)
        final = _final_loss(run_dir, steps, losses, int(record["steps"]))
        partial = _losses_at_fractions(steps, losses, int(record["steps"]))
        by_rung.setdefault(str(record["rung"]), []).append((run_dir, record, final, partial))
    rungs = []
    for name, seeds in by_rung.items():
        _check_one_recipe(name, [(run_dir, record) for run_dir, record, *_ in seeds])
        record = seeds[0][1]
        common = set.intersection(*(set(p) for *_, p in seeds))
        rungs.append(Rung(
            name=name, flops=record_law_flops(record, f"{seeds[0][0]}/run.json"), losses=tuple(s[2] for s in seeds),
            params_active=float(record["params_active"]),
            tokens=float(record["tokens"]),
            size_name=str(record.get("size_name", "")), run_ids=tuple(s[0].name for s in seeds),
            partial={f: tuple(s[3][f] for s in seeds) for f in sorted(common)},
            total_flops=float(record["flops"]),
        ))
    return sorted(rungs, key=lambda r: r.flops)


def _check_one_recipe(rung: str, runs: list[tuple[Path, dict]]) -> None:
    """Seeds of a rung are pooled, so their run configs may differ only in seeds (two recipes that
    share a ladder name in one lab would otherwise be averaged into one rung)."""
    first_dir, first = runs[0]
    for run_dir, record in runs[1:]:
        fields = [k for k in config.diff(first.get("config", {}), record.get("config", {}))
                  if k.rpartition(".")[2] != "seed"]
        if fields:
            raise UserError(f"rung {rung}: {first_dir.name} and {run_dir.name} differ in more than the seed "
                            f"({', '.join(fields[:3])}{', …' if len(fields) > 3 else ''}); fit one recipe at "
                            "a time (another ladder name, or another lab)")


def _target_history(run_dir: Path) -> tuple[list[int], list[float]]:
    if not (run_dir / METRICS_DB).is_file():
        return [], []
    with track.RunReader(run_dir) as reader:
        return reader.scalars(TARGET_METRIC)


def _final_loss(run_dir: Path, steps: list[int], losses: list[float], total_steps: int) -> float:
    """The finished run's loss: result.json's, else an eval logged at the last planned step."""
    result_path = run_dir / RESULT_FILE
    if result_path.is_file():
        result = json.loads(result_path.read_text())
        if TARGET_METRIC in result:
            return float(result[TARGET_METRIC])
    if steps and steps[-1] >= total_steps:
        return float(losses[-1])
    last = f"last eval at step {steps[-1]}" if steps else "no eval logged"
    raise UserError(f"{run_dir}: rung run has not finished ({last} of {total_steps}); expected "
                    f"{TARGET_METRIC} in result.json or at the final step")


def _losses_at_fractions(steps: list[int], losses: list[float], total_steps: int) -> dict[float, float]:
    """The loss at each 5% of training inside the logged range (linear interpolation in steps)."""
    if len(steps) < 2:
        return {}
    out = {}
    for fraction in CURVE_FRACTIONS[:-1]:
        at = fraction * total_steps
        if steps[0] <= at <= steps[-1]:
            out[fraction] = float(np.interp(at, steps, losses))
    return out
