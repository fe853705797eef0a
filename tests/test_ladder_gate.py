"""The registration gate: protocol (b)'s law and grid and a narrow points file are refused with reasons, an
identified fit registers, a refusal is public in the registry, and a hero on a refused fit runs only forced."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from glasslab.errors import UserError
from glasslab.lab import registry
from glasslab.ladder.gate import gate_compute_fit, gate_endpoint_fit
from glasslab.ladder.gate_sim import draw_points
from glasslab.ladder.grid_ends import GRID_FLOOR, EndpointLaw, points_of
from glasslab.ladder.hero_floor import EarlierHero, floor_from_heroes, predict_with_heroes
from glasslab.ladder.preregister import register_hero_prediction
from glasslab.layout import PREDICTIONS_FILE, append_json_line
from glasslab.track import read_lab_events

DOCS = Path(__file__).resolve().parents[1] / "docs" / "fits"
B_LAW = EndpointLaw(E=0.0, A=4.72e6, alpha=1.87, B=10.09, beta=0.076)
B_HERO = (755416.0, 13518400.0)
"""Protocol (b)'s registered law and hero (N non-embedding active, D forward area; docs/LOG.md, 2026-12-02)."""
KNOWN = EndpointLaw(E=1.8, A=1.5 * 2e4**0.34, alpha=0.34, B=1.2 * 4e5**0.3, beta=0.3)


def refused_by(gate: dict) -> set[str]:
    return {reason.split(":")[0] for reason in gate["reasons"]}


def test_protocol_b_as_registered_is_refused_for_five_reasons():
    gate = gate_endpoint_fit(B_LAW, point=2.8815, low=2.8241, high=3.0086, other_point=2.90,
                             floor_interval=(0.017, 1.673), lowest_loss=3.29, size_span=55048 / 7024,
                             top=(55048.0, 4.0e5), hero=B_HERO, beta_difference=0.010)
    assert not gate["registered"]
    assert refused_by(gate) == {"alpha plausible", "span of N", "free floor identified",
                                "size term's share of the drop to the hero", "difference check's β"}


def write_points(path: Path, sizes: tuple[float, ...], noise: float = 0.004, seed: int = 0) -> None:
    params, tokens, loss, family = draw_points(KNOWN, sizes, (0.5, 1, 2, 4), noise, np.random.default_rng(seed))
    rows = ["params,tokens,loss,seed", *(f"{n},{d},{x:.6f},{f[1]}" for n, d, x, f in
                                        zip(params, tokens, loss, family, strict=True))]
    path.write_text("\n".join(rows) + "\n")


def fit_points(tmp_path: Path, points: Path, capsys, *target: str) -> tuple[dict, str]:
    from glasslab.cli import main

    out = tmp_path / f"{points.stem}-fit"
    argv = ["ladder", "fit", str(points), "--law", "nd", "--target-params", target[0], "--target-tokens", target[1],
            "--bootstrap", "200", "--lab", str(tmp_path / "lab"), "--out", str(out)]
    assert main(argv) == 0
    return json.loads((out / "fit.json").read_text()), capsys.readouterr().out


def test_the_nd_fit_refuses_protocol_b_and_a_narrow_grid_and_registers_a_wide_one(tmp_path, capsys):
    fit, printed = fit_points(tmp_path, DOCS / "protocol_b_synthetic.csv", capsys, *map(str, B_HERO))
    assert fit["law"]["params"]["alpha"] > 1.2 and "registration gate: REFUSES" in printed
    assert {"alpha plausible", "span of N", "size term's share of the drop to the hero"} <= refused_by(fit["gate"])

    write_points(tmp_path / "narrow.csv", (1.0, 1.6, 2.5, 4.0))
    fit, printed = fit_points(tmp_path, tmp_path / "narrow.csv", capsys, "8e5", "1.6e7")
    assert "span of N" in refused_by(fit["gate"]) and "refuses: span of N: largest N / smallest N = 4" in printed

    write_points(tmp_path / "wide.csv", (1.0, 2.5, 6.0, 15.0, 40.0))
    fit, printed = fit_points(tmp_path, tmp_path / "wide.csv", capsys, "4e6", "8e7")
    truth = float(KNOWN(4e6, 8e7))
    assert fit["gate"]["registered"], fit["gate"]["reasons"]
    assert "registration gate: REGISTERS" in printed
    assert fit["prediction"]["lo"] <= truth <= fit["prediction"]["hi"]
    assert fit["prediction"]["point"] == pytest.approx(truth, rel=0.02)


def test_an_lc_fit_with_its_free_floor_at_zero_or_a_sweep_outside_its_band_is_refused():
    free = gate_compute_fit(alpha=0.1, point=3.0, low=2.9, high=3.1, other_point=3.0, free_floor=(0.0, 0.2, 1.5),
                            lowest_loss=3.5, swept=[])
    assert refused_by(free) == {"free floor identified"}
    pinned = gate_compute_fit(alpha=0.1, point=3.0, low=2.9, high=3.1, other_point=3.05, free_floor=None,
                              lowest_loss=3.5, swept=[(0.5, 2.95), (1.5, 3.2)])
    assert refused_by(pinned) == {"prediction across the swept floors"}
    ok = gate_compute_fit(alpha=0.1, point=3.0, low=2.9, high=3.1, other_point=3.05, free_floor=None,
                          lowest_loss=3.5, swept=[(0.5, 2.95), (1.5, 3.05)])
    assert ok["registered"] and ok["reasons"] == []


def fit_record(registered: bool) -> dict:
    gate = {"registered": registered, "reasons": [] if registered else ["alpha plausible: alpha = 1.87"],
            "flags": [], "checks": []}
    return {"ladder": "g", "target": "eval/macro/loss", "curve": [], "L_inf": {"mode": "grid", "value": 0.0},
            "law": {"form": "L(N,D)", "params": {}}, "rungs": [], "backtest": {"last": None},
            "prediction": {"flops": 1e14, "point": 2.88, "lo": 2.82, "hi": 3.01, "level": 0.9}, "gate": gate}


def test_a_refusal_is_recorded_and_stops_the_hero_unless_forced_and_old_entries_still_read(tmp_path):
    append_json_line(tmp_path / PREDICTIONS_FILE, {"name": "old/hero/eval/macro/loss", "metric": "eval/macro/loss",
                                                  "point": 3.0, "low": 2.9, "high": 3.1, "level": 0.9,
                                                  "target": "old-hero", "source": "old-fit", "details": {},
                                                  "registered_at": "2026-12-01T00:00:00Z", "code": "x", "seq": 1})
    assert registry.predictions(tmp_path)["old/hero/eval/macro/loss"]["kind"] == "prediction"

    with pytest.raises(UserError, match="registration gate refused the fit .alpha plausible"):
        register_hero_prediction(tmp_path, fit_record(False), target="g-hero", source="g-fit")
    refusal = registry.predictions(tmp_path)["g/hero/eval/macro/loss"]
    assert (refusal["kind"], refusal["forced"], refusal["schema"]) == ("refusal", False, 2)
    assert refusal["gate"]["reasons"] == ["alpha plausible: alpha = 1.87"]

    forced = register_hero_prediction(tmp_path, fit_record(False), target="g-hero", source="g-fit", forced=True)
    assert (forced["kind"], forced["forced"], forced["seq"], forced["replaces"]) == ("refusal", True, 2, 1)
    assert register_hero_prediction(tmp_path, fit_record(False), target="g-hero", source="g-fit", forced=True) == forced
    kinds = [e["kind"] for e in read_lab_events(tmp_path)]
    assert kinds == ["prediction_refused", "prediction_forced"]

    entry = register_hero_prediction(tmp_path / "other", fit_record(True), target="g-hero", source="g-fit",
                                     forced=True)
    assert (entry["kind"], entry["forced"]) == ("prediction", False)  # forcing an identified fit marks nothing


def hero_of(name: str, params: float, tokens: float, shift: float = 0.0, noise: float = 0.005) -> EarlierHero:
    """An earlier hero of KNOWN's recipe: its measured loss the truth, moved by ``shift`` (relative)."""
    return EarlierHero(name, params, tokens, float(KNOWN(params, tokens)) * (1 + shift), noise)


def grid_points(sizes: tuple[float, ...], seed: int = 0):
    return points_of(*draw_points(KNOWN, sizes, (0.5, 1, 2, 4), 0.004, np.random.default_rng(seed)))


def test_earlier_heroes_set_the_floor_of_a_grid_too_narrow_to_place_its_own():
    points = grid_points((1.0, 1.6, 2.5, 4.0))
    top_n, top_d = float(points.params_n.max()), float(points.tokens_n.max())
    target = (12 * top_n, 20 * top_d)
    truth = float(KNOWN(*target))
    alone = predict_with_heroes(points, target, (), num_bootstrap=200, rng=np.random.default_rng(1))
    assert "span of N" in refused_by(alone.gate) and alone.gate["floor"]["source"] == GRID_FLOOR

    heroes = (hero_of("h1", 6 * top_n, 8 * top_d, +0.003), hero_of("h2", 9 * top_n, 12 * top_d, -0.003))
    floor = floor_from_heroes(points, heroes)
    assert floor.low <= KNOWN.E <= floor.high and floor.value == pytest.approx(KNOWN.E, abs=0.1)
    ends = predict_with_heroes(points, target, heroes, num_bootstrap=200, rng=np.random.default_rng(1))
    assert ends.gate["registered"], ends.gate["reasons"]
    assert ends.gate["floor"]["source"] == "earlier heroes of the same recipe"
    assert not ends.gate["free_fit"]["registered"]  # the free fit stays on record beside the pinned one
    assert ends.law.E == pytest.approx(floor.value)
    assert ends.lo <= truth <= ends.hi and ends.point == pytest.approx(truth, rel=0.01)
    assert abs(alone.point / truth - 1) > 0.03  # what the heroes bought: the free fit missed by > 3%


def test_a_hero_the_grid_contradicts_and_heroes_that_contradict_each_other_are_refused():
    points = grid_points((1.0, 2.5, 6.0, 15.0, 40.0))
    top_n, top_d = float(points.params_n.max()), float(points.tokens_n.max())
    target = (4 * top_n, 8 * top_d)
    agreeing = predict_with_heroes(points, target, (hero_of("h1", 2 * top_n, 3 * top_d),), num_bootstrap=200,
                                   rng=np.random.default_rng(1))
    assert agreeing.gate["registered"], agreeing.gate["reasons"]
    assert agreeing.gate["floor"]["source"] == GRID_FLOOR  # an identified grid keeps its own floor

    off = predict_with_heroes(points, target, (hero_of("off", 2 * top_n, 3 * top_d, +0.05),), num_bootstrap=200,
                              rng=np.random.default_rng(1))
    assert "consistent with earlier hero off" in refused_by(off.gate["free_fit"])
    assert refused_by(off.gate) == {"the grid holds the heroes' floor"}  # its floor lies above the grid's
    far = predict_with_heroes(points, target, (hero_of("far", 2 * top_n, 3 * top_d, +0.15),), num_bootstrap=200,
                              rng=np.random.default_rng(1))
    assert refused_by(far.gate) == {"consistent with earlier hero far"}
    assert far.gate["floor"]["note"] == "no floor in [0, lowest loss) reconciles the earlier heroes with the grid"

    narrow = grid_points((1.0, 1.6, 2.5, 4.0))
    top_n, top_d = float(narrow.params_n.max()), float(narrow.tokens_n.max())
    split = (hero_of("low", 6 * top_n, 8 * top_d, -0.04), hero_of("high", 9 * top_n, 12 * top_d, +0.04))
    torn = predict_with_heroes(narrow, (12 * top_n, 20 * top_d), split, num_bootstrap=200,
                               rng=np.random.default_rng(1))
    assert {"consistent with earlier hero low", "consistent with earlier hero high"} <= refused_by(torn.gate)


def test_the_nd_fit_reads_heroes_and_says_where_its_floor_came_from(tmp_path, capsys):
    from glasslab.observatory.ladder_page import gate_line

    write_points(tmp_path / "narrow.csv", (1.0, 1.6, 2.5, 4.0))
    (tmp_path / "heroes.csv").write_text("name,params,tokens,loss,noise\n"
                                         f"h1,480000,51200000,{float(KNOWN(4.8e5, 5.12e7)) * 1.003:.5f},0.005\n")
    from glasslab.cli import main

    out = tmp_path / "fit"
    assert main(["ladder", "fit", str(tmp_path / "narrow.csv"), "--law", "nd", "--target-params", "9.6e5",
                 "--target-tokens", "1.28e8", "--bootstrap", "200", "--heroes", str(tmp_path / "heroes.csv"),
                 "--lab", str(tmp_path / "lab"), "--out", str(out)]) == 0
    fit = json.loads((out / "fit.json").read_text())
    assert fit["gate"]["registered"], fit["gate"]["reasons"]
    assert fit["L_inf"]["text"].startswith("calibrated on earlier heroes of the same recipe (h1): E = ")
    assert "the floor from earlier heroes of the same recipe" in gate_line(fit, None)["text"]
    assert fit["prediction"]["point"] == pytest.approx(float(KNOWN(9.6e5, 1.28e8)), rel=0.01)

    (tmp_path / "bad.csv").write_text("name,params,tokens,loss,noise\nh1,480000,51200000,two,0.005\n")
    assert main(["ladder", "fit", str(tmp_path / "narrow.csv"), "--law", "nd", "--target-params", "9.6e5",
                 "--target-tokens", "1.28e8", "--heroes", str(tmp_path / "bad.csv"), "--lab", str(tmp_path / "lab"),
                 "--out", str(tmp_path / "bad-fit")]) == 2
    assert "bad.csv:2: loss='two'; expected a positive number" in capsys.readouterr().err
    assert main(["ladder", "fit", str(tmp_path / "narrow.csv"), "--L-inf", "1.0", "--heroes",
                 str(tmp_path / "heroes.csv"), "--lab", str(tmp_path / "lab"), "--out", str(tmp_path / "c-fit")]) == 2
    assert "expected --law nd" in capsys.readouterr().err


def test_the_width_frontier_counts_what_each_cut_would_refuse_and_keep():
    from glasslab.ladder.gate_sim import GridOutcome, width_frontier

    def grid(error: float, half: float, *reasons: str) -> GridOutcome:
        return GridOutcome("wide", 0.005, error, not reasons, True, reasons, half, GRID_FLOOR)

    outcomes = [grid(4.0, 2.0), grid(-5.0, 3.5, "interval width: half-width 3.5%"), grid(6.0, 2.0, "span of N: 4"),
                grid(0.5, 2.8), grid(1.0, 4.5, "interval width: half-width 4.5%"), grid(-1.2, 1.0, "span of N: 4")]
    frontier = width_frontier(outcomes)
    assert frontier[2.5] == (pytest.approx(2 / 3), pytest.approx(0.0))  # keeps only the 2% ill-posed grid
    assert frontier[3.0] == (pytest.approx(2 / 3), pytest.approx(1 / 3))
    assert frontier[5.0] == (pytest.approx(1 / 3), pytest.approx(2 / 3))  # the span rule still refuses one of each
