"""A real (tiny) ladder as executor steps: rungs read their data from the data step whatever it is called,
the hero's prediction goes into the lab's registry before it trains, and ``--force`` never erases it."""

from __future__ import annotations

import json

import pytest

from glasslab.data.build import build_step
from glasslab.data.config import MixtureConfig
from glasslab.lab import Executor, Step, read_step_record, registry
from glasslab.lab.pool import InlinePool
from glasslab.ladder.plan import LadderSpec, ScalingRule, plan_ladder
from glasslab.ladder.steps import ladder_steps
from glasslab.model import ModelConfig, MoEConfig
from glasslab.track import read_lab_events
from glasslab.train.config import TrainConfig
from train_data import VOCAB, tiny_build_config

NAME = "tiny/hero/eval/macro/loss"


def tiny_ladder(L_inf: float) -> list[Step]:
    """Three rungs and a hero of 8 steps each, on a data step that is not called "data"."""
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
    return [corpus, *ladder_steps(plan_ladder(spec), corpus, MixtureConfig(weights={"code": 0.5, "prose": 0.5}),
                                  train, L_inf=L_inf, num_bootstrap=50)]


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
