"""Every end-point fit's inputs, public: the points file and the earlier heroes it was fitted on.

A grid ladder's fit step and ``glasslab ladder fit POINTS --law nd`` write, beside ``fit.json``, the points
the end-point law was fitted on (:data:`POINTS_FILE`: one row per finished branch and seed — N, D as the
forward area at the end, final loss, seed, FLOPs outside the LM head, the run) and, when earlier heroes
of the recipe took part, those heroes (:data:`HEROES_FILE`). ``fit.json``'s ``inputs`` holds the command
that refits them; both paths build their points through one grouping (``points.rungs_of``) and one fitter
(``hero_floor.predict_with_heroes``) with the same random seed, so the command reproduces the registered
number, or the refusal and its reasons, exactly. An ``L(C)`` fit writes its rungs' final losses the same way
(:func:`compute_inputs_record`). The published site carries the files beside the fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from glasslab.ladder.hero_floor import EarlierHero, write_heroes
from glasslab.ladder.points import write_points
from glasslab.ladder.rungs import Rung

POINTS_FILE = "points.csv"
HEROES_FILE = "heroes.csv"


def inputs_record(ladder: str, target_size: tuple[float, float], num_bootstrap: int,
                  heroes: Sequence[EarlierHero]) -> dict[str, Any]:
    """``fit.json``'s ``inputs``: the files and the command (run in the fit's folder) that refits them."""
    command = (f"glasslab ladder fit {POINTS_FILE} --law nd --ladder {ladder} --target-params {target_size[0]!r} "
               f"--target-tokens {target_size[1]!r} --bootstrap {num_bootstrap}"
               + (f" --heroes {HEROES_FILE}" if heroes else ""))
    return {"points": POINTS_FILE, "heroes": HEROES_FILE if heroes else None, "command": command}


def compute_inputs_record(ladder: str, L_inf: float | None, sweep: Sequence[float], target_flops: float,
                          num_bootstrap: int) -> dict[str, Any]:
    """``fit.json``'s ``inputs`` of an ``L(C)`` fit: its rungs' final losses refit to the same prediction, interval
    and gate (the curve and back-test also read the rungs' partial evals, which the file does not hold)."""
    sweep_args = (" --sweep " + " ".join(repr(float(x)) for x in sweep)) if sweep else ""
    command = (f"glasslab ladder fit {POINTS_FILE} --ladder {ladder} --L-inf "
               f"{'free' if L_inf is None else repr(float(L_inf))}{sweep_args} --target-flops {target_flops!r} "
               f"--bootstrap {num_bootstrap}")
    return {"points": POINTS_FILE, "heroes": None, "command": command}


def write_inputs(folder: str | Path, points: Sequence[dict[str, Any]], heroes: Sequence[EarlierHero]) -> None:
    """The points file (and the heroes file, when any hero took part) in ``folder``."""
    write_points(Path(folder) / POINTS_FILE, points)
    if heroes:
        write_heroes(Path(folder) / HEROES_FILE, heroes)


def rung_points(rungs: Sequence[Rung]) -> list[dict[str, Any]]:
    """A points file's rungs back as its rows (the k-th loss of a rung with seed k: its family)."""
    return [{"params": r.params_active, "tokens": r.tokens, "loss": loss, "seed": k, "flops": r.flops}
            for r in rungs for k, loss in enumerate(r.losses)]
