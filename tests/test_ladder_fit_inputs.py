"""Every end-point fit's inputs are public and refit from the CLI to the same numbers; finished heroes are
recorded in the registry and reach a later grid fit of the same recipe (issue 40, items 4 and 5)."""

from __future__ import annotations

import json
import shlex

import numpy as np
import pytest

from glasslab import config
from glasslab.lab import registry
from glasslab.ladder.fit_inputs import write_inputs
from glasslab.ladder.grid_ends import EndpointLaw, end_point_rows
from glasslab.ladder.grid_fit import fit_grid_ladder
from glasslab.ladder.grid_sim import HERO_SCHEDULE, synthetic_grid
from glasslab.ladder.hero_floor import EarlierHero
from glasslab.ladder.hero_results import recipe_of, record_hero_result, registry_heroes, result_name
from glasslab.ladder.steps import GridTarget
from glasslab.layout import RUN_RECORD
from glasslab.model import ModelConfig
from glasslab.track import read_lab_events

HERO = GridTarget(params=7e5, steps=1600, batch_tokens=166 * 64, schedule=HERO_SCHEDULE)


def refit_from_cli(tmp_path, fit: dict, name: str) -> dict:
    """Run the command ``fit.json`` records on the files written beside it; the refit's fit.json."""
    from glasslab.cli import main

    argv = shlex.split(fit["inputs"]["command"])[1:]
    argv = [str(tmp_path / a) if a in ("points.csv", "heroes.csv") else a for a in argv]
    assert main([*argv, "--lab", str(tmp_path / "lab"), "--out", str(tmp_path / name)]) == 0
    return json.loads((tmp_path / name / "fit.json").read_text())


def assert_same_fit(refit: dict, fit: dict) -> None:
    for key in ("point", "lo", "hi"):
        assert refit["prediction"][key] == fit["prediction"][key], key
    for key in ("registered", "reasons", "flags"):
        assert refit["gate"][key] == fit["gate"][key], key
    assert refit["law"]["params"] == fit["law"]["params"]


def test_a_grid_fits_points_file_refits_from_the_cli_to_the_registered_number(tmp_path):
    curves = synthetic_grid(np.random.default_rng(4), seeds=2)
    fit = fit_grid_ladder(curves, ladder="syn", target=HERO, target_flops=1e13, num_bootstrap=100)
    write_inputs(tmp_path, end_point_rows(curves), ())
    header, *rows = (tmp_path / "points.csv").read_text().splitlines()
    assert header == "params,tokens,loss,seed,flops,run" and len(rows) == fit["law"]["points"] == 2 * 17
    assert fit["inputs"]["heroes"] is None and "--law nd --ladder syn" in fit["inputs"]["command"]
    assert_same_fit(refit_from_cli(tmp_path, fit, "refit"), fit)


def run_record(folder, *, seq_len: int = 64, loss_steps: int = 1600) -> None:
    """A hero's run.json as the trainer writes it, with what the registry's result reads."""
    model = config.to_dict(ModelConfig(d_model=64, n_layers=2, n_heads=2, vocab_size=512))
    folder.mkdir(parents=True)
    (folder / RUN_RECORD).write_text(json.dumps({
        "config": {"model": model, "train": {"seq_len": seq_len, "schedule": config.to_dict(HERO_SCHEDULE)},
                   "data": {"mixture": {"weights": {"code": 1.0}}}},
        "data_manifest_hash": "abc", "steps": loss_steps, "batch_size": 166, "seq_len": seq_len}))


def test_a_finished_hero_is_recorded_and_a_later_grid_of_its_recipe_is_gated_against_it(tmp_path):
    lab = tmp_path / "lab"
    run_record(lab / "old-hero-1")
    fit = {"ladder": "old", "law": {"noise": {"sigma": 0.005}}}
    entry = record_hero_result(lab, fit, lab / "old-hero-1", {"eval/macro/loss": 3.1}, target="old-hero")
    assert entry["kind"] == "result" and entry["name"] == result_name("old")
    assert registry.gate_status(entry).startswith("measured")
    assert [e["kind"] for e in read_lab_events(lab)] == ["hero_result_recorded"]  # not a registered prediction
    assert record_hero_result(lab, fit, lab / "old-hero-1", {}, target="old-hero") is None
    recipe = recipe_of(json.loads((lab / "old-hero-1" / RUN_RECORD).read_text()))
    (hero,) = registry_heroes(lab, recipe, exclude_ladder="new")
    assert (hero.name, hero.loss, hero.noise) == ("old", 3.1, 0.005)
    assert hero.tokens == pytest.approx(1600 * 166 * 64 * (1 - 0.2 / 2 - 0.2 / 2), rel=0.01)  # warmup, decay
    assert registry_heroes(lab, recipe, exclude_ladder="old") == ()  # a ladder's own hero is its target
    assert registry_heroes(lab, {**recipe, "seq_len": 128}, exclude_ladder="new") == ()

    # A later grid of the recipe too narrow in N to place its own floor (refused alone) registers on the
    # floor from such a hero, and the refit from the CLI reads the heroes file the fit wrote.
    curves = synthetic_grid(np.random.default_rng(4), seeds=2)
    alone = fit_grid_ladder(curves, ladder="new", target=HERO, target_flops=1e13, num_bootstrap=100)
    assert not alone["gate"]["registered"] and alone["gate"]["reasons"][0].startswith("span of N")
    law = EndpointLaw(**alone["law"]["params"])
    tokens = alone["target_size"]["tokens"] / 2
    heroes = (EarlierHero("old", HERO.params / 2, tokens, float(law(HERO.params / 2, tokens)) * 1.002, 0.005),)
    gated = fit_grid_ladder(curves, ladder="new", target=HERO, target_flops=1e13, num_bootstrap=100, heroes=heroes)
    assert gated["gate"]["registered"] and gated["gate"]["floor"]["source"] == "earlier heroes of the same recipe"
    assert gated["L_inf"]["mode"] == "heroes" and gated["curve"][-1]["lo"] == pytest.approx(gated["prediction"]["lo"])
    write_inputs(tmp_path, end_point_rows(curves), heroes)
    assert gated["inputs"]["heroes"] == "heroes.csv"
    assert_same_fit(refit_from_cli(tmp_path, gated, "refit-heroes"), gated)


def test_the_site_carries_a_fits_inputs_and_the_ladder_page_says_how_to_refit_them(tmp_path):
    from glasslab.observatory.lab_scan import Lab
    from glasslab.observatory.ladder_page import fit_inputs
    from glasslab.observatory.publish import site_figures

    folder = tmp_path / "lab" / "syn-fit-0000abcd"
    folder.mkdir(parents=True)
    fit = {"ladder": "syn", "inputs": {"points": "points.csv", "heroes": None, "command": "glasslab ladder fit …"}}
    (folder / "fit.json").write_text(json.dumps(fit))
    (folder / "points.csv").write_text("params,tokens,loss,seed,flops,run\n")
    carried = {path.name: name for name, path in site_figures(Lab(tmp_path / "lab")).items()}
    assert set(carried) == {"points.csv"}
    shown = fit_inputs(folder.name, fit)
    assert shown["command"] == fit["inputs"]["command"]
    assert shown["files"] == [{"name": "points.csv", "site": carried["points.csv"]}]
    assert fit_inputs(folder.name, {"ladder": "old"}) is None  # a fit written before its inputs were
