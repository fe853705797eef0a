"""A real (tiny) ladder as executor steps: rungs read their data from the data step whatever it is called,
the hero's prediction goes into the lab's registry before it trains, and ``--force`` never erases it."""

from __future__ import annotations

import json
import shlex

import pytest

from glasslab.data.build import build_step
from glasslab.data.config import MixtureConfig
from glasslab.data.map import map_after
from glasslab.lab import Executor, Step, read_step_record, registry
from glasslab.lab.inputs import resolve_outputs
from glasslab.lab.pool import InlinePool
from glasslab.lab.step import dep_name, versioned_config
from glasslab.ladder.hero_results import result_name
from glasslab.ladder.plan import LadderSpec, ScalingRule, plan_ladder
from glasslab.ladder.steps import ladder_steps
from glasslab.model import ModelConfig, MoEConfig
from glasslab.track import read_lab_events
from glasslab.train.config import TrainConfig
from train_data import VOCAB, tiny_build_config

NAME = "tiny/hero/eval/macro/loss"


def tiny_ladder(L_inf: float, hero_map: bool = False) -> list[Step]:
    """Three rungs and a hero of 8 steps each, on a data step that is not called "data" (``hero_map``: and a
    map of it whose clusters the hero measures its held-out loss per)."""
    base = ModelConfig(vocab_size=VOCAB, n_heads=2, n_kv_heads=2,
                       moe=MoEConfig(num_experts=4, top_k=2, num_shared_experts=0))
    # A rule with a large batch, capped by min_steps: every run takes 8 steps (a test, not a ladder).
    rule = ScalingRule(name="eight-steps", batch_coefficient=100.0)
    spec = LadderSpec(name="tiny", base_model=base, widths=(16, 24, 32), hero_width=40, head_dim=8,
                      width_per_layer=16, seq_len=16, tokens_per_param=0.25, min_steps=8, seeds_per_rung=(1,),
                      scaling_rule=rule, lr_multiplier=10.0)
    corpus = Step("corpus", build_step, tiny_build_config())
    train = TrainConfig(eval_max_tokens=64, eval_batch_size=4, sample_prompts=(), checkpoint_interval=10,
                        peak_flops=1e11)
    data_map = map_after(corpus, k=2, progress=False) if hero_map else None
    return [corpus, *([data_map] if data_map else []),
            *ladder_steps(plan_ladder(spec), corpus, MixtureConfig(weights={"code": 0.5, "prose": 0.5}), train,
                          L_inf=L_inf, num_bootstrap=50, hero_map=data_map)]


def test_the_heros_data_map_is_a_reference_an_edge_the_executor_fills_and_not_in_its_hash(tmp_path):
    plain, mapped = tiny_ladder(L_inf=1.0)[-1], tiny_ladder(L_inf=1.0, hero_map=True)[-1]
    deps = {dep_name(d) for d in mapped.deps}
    assert deps == {dep_name(d) for d in plain.deps} | {"map"} == {"corpus", "tiny-fit", "map"}  # an edge
    assert versioned_config(mapped.config, "tiny-hero") == versioned_config(plain.config, "tiny-hero")
    folders = {dep_name(d): tmp_path / f"{dep_name(d)}-0000abcd" for d in mapped.deps}
    resolved = resolve_outputs(mapped.config, folders, mapped.name, tmp_path)
    assert resolved.train.run_config().train.eval_map == "map-0000abcd"  # named as a run records a map
    assert not mapped.config.train.run.train.eval_map and plain.config.train.run_config() is plain.config.train.run


def hero_record(report) -> dict:
    (hero,) = [n for n in report.plan.steps if n.name == "tiny-hero"]
    return json.loads((hero.folder / "run.json").read_text())


@pytest.mark.slow
def test_a_ladder_on_a_renamed_data_step_registers_its_prediction_and_keeps_it(tmp_path):
    lab = tmp_path / "lab"
    first = Executor(lab, backend=InlinePool(), echo=False).run(tiny_ladder(L_inf=1.0))
    assert first.ok, first.outcomes
    corpus = next(n.folder for n in first.plan.steps if n.name == "corpus")
    for node in first.plan.steps:
        if node.name.startswith("tiny-d") or node.name == "tiny-hero":
            assert json.loads((node.folder / "run.json").read_text())["config"]["data"]["path"] == str(corpus)
    (entry,) = registry.history(lab, NAME)
    copy = hero_record(first)["prediction"]
    assert copy["registry"] == {"name": NAME, "seq": 1} and (copy["point"], copy["lo"]) == (entry["point"],
                                                                                            entry["low"])
    # The finished hero's measured loss and recipe are in the registry, for later fits of its recipe.
    (result,) = registry.history(lab, result_name("tiny"))
    assert result["kind"] == "result" and result["low"] == result["point"] == result["high"] > 0
    assert result["details"]["recipe"]["seq_len"] == 16 and result["details"]["recipe"]["data_manifest"]
    # The fit's rungs lie beside fit.json, and the command it records refits them to the registered numbers.
    from glasslab.cli import main

    fit_dir = next(n.folder for n in first.plan.steps if n.name == "tiny-fit")
    fit = json.loads((fit_dir / "fit.json").read_text())
    command = [str(fit_dir / a) if a.endswith(".csv") else a for a in shlex.split(fit["inputs"]["command"])]
    assert main([*command[1:], "--lab", str(tmp_path / "refit-lab"), "--out", str(tmp_path / "refit")]) == 0
    refit = json.loads((tmp_path / "refit" / "fit.json").read_text())
    assert [refit["prediction"][k] for k in ("point", "lo", "hi")] == [entry["point"], entry["low"], entry["high"]]
    assert refit["gate"] == fit["gate"]

    # --force on the fit reruns the fit and the hero: the same numbers again, nothing erased or added.
    again = Executor(lab, backend=InlinePool(), echo=False).run(tiny_ladder(L_inf=1.0), force=["tiny-fit"])
    assert again.ok and sorted(again.executed) == sorted(n.key for n in again.plan.steps
                                                         if n.name in ("tiny-fit", "tiny-hero"))
    assert registry.history(lab, NAME) == [entry]

    # Another fit (another asymptote) predicts other numbers: refused without --re-register ...
    other = Executor(lab, backend=InlinePool(), echo=False).run(tiny_ladder(L_inf=1.3))
    (hero,) = [n for n in other.plan.steps if n.name == "tiny-hero"]
    assert other.outcomes[hero.key].status == "failed"
    assert "already registered" in read_step_record(hero.folder)["error"] and "--re-register" in \
        read_step_record(hero.folder)["error"]
    assert registry.history(lab, NAME) == [entry] and not (hero.folder / "metrics.db").exists()
    # ... and kept beside the old one, as an incident, with it.
    replaced = Executor(lab, backend=InlinePool(), echo=False, re_register=True).run(tiny_ladder(L_inf=1.3))
    assert replaced.ok, replaced.outcomes
    old, new = registry.history(lab, NAME)
    assert old == entry and new["seq"] == 2 and new["replaces"] == 1 and new["point"] != entry["point"]
    assert hero_record(replaced)["prediction"]["registry"] == {"name": NAME, "seq": 2}
    incidents = [e for e in read_lab_events(lab) if e["kind"] == "prediction_replaced"]
    assert len(incidents) == 1 and incidents[0]["severity"] == "incident"
