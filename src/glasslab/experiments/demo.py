"""The demo: the whole open lab on a laptop CPU — data, a 4-rung MoE ladder, its fit, and a hero run.

``glasslab demo`` runs these steps (``glasslab run demo`` runs them without the page and the table):

1. ``data``: three built-in domains from Python's own distribution (stdlib code, docstring prose,
   pydoc reference topics) → normalise, filter, dedup, eval split → BPE tokenizer → shards + report;
2. ``demo-d16-s0`` … ``demo-d48-s0``: the ladder's rungs, one recipe with width varied, tokens per
   active parameter fixed, batch and learning rate from the planner's rule, two seeds on the small rungs;
3. ``demo-fit``: ``L(C) = L∞ + A·C^(−α)`` at a recorded asymptote swept over a range, the hero's
   predicted curve with a 90% band, and the leave-last-rung-out back-test;
4. ``demo-hero``: a run with ≥ 4× the top rung's compute, its prediction pre-registered before step 0.

At this scale the ladder is illustrative: rungs of tens of thousands of parameters trained for a few
hundred steps are noisy, and the demo reports its prediction error as it comes out. ``--quick``
shrinks everything so the whole DAG takes about a minute (the test suite runs it).
"""

from __future__ import annotations

import dataclasses

from glasslab.data import BuildConfig, MixtureConfig
from glasslab.data.config import TokenizerConfig
from glasslab.lab import Step
from glasslab.ladder.plan import LadderPlan, LadderSpec, plan_ladder
from glasslab.ladder.steps import DATA_STEP, ladder_steps
from glasslab.model import ModelConfig, MoEConfig
from glasslab.train import GuardConfig, ScheduleConfig, TrainConfig

LADDER = "demo"
VOCAB_SIZE = 1024
MIXTURE = MixtureConfig(weights={"code": 0.75, "prose": 0.18, "reference": 0.07})
"""Close to the domains' sizes (about 1.6M, 230K and 80K training tokens), so the largest runs see no
domain more than about 3 times: a ladder whose big rungs repeat a small domain 10–20 times bends off
its scaling law (the tiny ladder's back-test went from +3.6% to about +1% with this mixture)."""
LR_MULTIPLIER = 0.35
"""On the planner's LR rule: at 0.5 the demo's d48 rung (500 steps, 50 of warmup) spiked through three
rollbacks on the whole built-in corpora; at 0.35 no rung rolls back."""
WARMUP_FRACTION = 0.2
"""Of every run's steps. At 0.1 the hero spiked (grad norm ×50, loss +0.65 nats) and rolled back twice
at steps 44–55: Adam moves every weight by about the learning rate, so one update moves a layer's
output by about lr × width, and where the loss leaves its unigram plateau (~6.1 nats, ~45 steps in)
the attention updates turn coherent. The hero, the widest run, got there at lr × width ≈ 0.10; a d48
rung given the hero's lr × width spiked there too; with twice the warmup every run gets past it at
half the learning rate (docs/LOG.md)."""
L_INF = 1.0
"""Assumed irreducible eval loss (nats/token) of this eval set at this context; recorded, and swept."""
L_INF_SWEEP = (0.5, 1.5)


def build_config(quick: bool) -> BuildConfig:
    """The demo's data build: the default built-in corpora, smaller for ``--quick``."""
    cfg = BuildConfig(tokenizer=TokenizerConfig(vocab_size=VOCAB_SIZE))
    if not quick:
        return cfg
    sources = tuple(dataclasses.replace(s, max_bytes=min(s.max_bytes or 400_000, 400_000)) for s in cfg.sources)
    return dataclasses.replace(cfg, sources=sources)


def ladder_spec(quick: bool) -> LadderSpec:
    """One MoE recipe at widths 16–48 (head width 8) and a hero at width 72 (≥ 4× the top rung's compute)."""
    base = ModelConfig(vocab_size=VOCAB_SIZE, n_heads=2, n_kv_heads=2,
                       moe=MoEConfig(num_experts=8, top_k=2, num_shared_experts=1, router="sigmoid",
                                     balancing="sign"))
    return LadderSpec(name=LADDER, base_model=base, widths=(16, 24, 32, 48), hero_width=72, head_dim=8,
                      width_per_layer=16, seq_len=32 if quick else 64, tokens_per_param=1.0 if quick else 10.0,
                      min_steps=30 if quick else 200, lr_multiplier=LR_MULTIPLIER,
                      seeds_per_rung=(1,) if quick else (2, 2, 1))


def train_recipe(quick: bool) -> TrainConfig:
    """What every rung and the hero share: schedule, guard, intervals (batch, steps and LR come from the plan)."""
    return TrainConfig(schedule=ScheduleConfig(kind="wsd", warmup_fraction=WARMUP_FRACTION, decay_fraction=0.2,
                                               min_lr_ratio=0.0),
                       guard=GuardConfig(sigma=8.0), eval_max_tokens=1024 if quick else 4096, eval_batch_size=32,
                       sample_max_new_tokens=24, checkpoint_interval=100 if quick else 200)


def plan(quick: bool = False) -> LadderPlan:
    return plan_ladder(ladder_spec(quick))


def demo_steps(quick: bool = False, device: str = "cpu", threads: int = 1, hero_threads: int = 0) -> list[Step]:
    """The demo's DAG: data, rungs, fit, hero (``threads`` per rung, ``hero_threads`` for the hero)."""
    data = Step(DATA_STEP, "glasslab.data.build:build_step", build_config(quick))
    return [data, *ladder_steps(plan(quick), data, MIXTURE, train_recipe(quick), L_inf=L_INF, sweep=L_INF_SWEEP,
                                device=device, threads=threads, hero_threads=hero_threads,
                                num_bootstrap=300 if quick else 1000)]


def steps() -> list[Step]:
    """``glasslab run demo``: the full demo's steps."""
    return demo_steps()
