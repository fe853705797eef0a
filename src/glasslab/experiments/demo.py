"""The demo: the whole open lab on a laptop CPU — data, a 4-rung MoE ladder, its fit, and a hero run.

``glasslab demo`` runs these steps (``glasslab run demo`` runs them without the page and the table):

1. ``data``: three built-in domains from Python's own distribution (stdlib code, docstring prose,
   pydoc reference topics) → normalise, filter, dedup, eval split → BPE tokenizer → shards + report;
2. ``demo-d16-s0`` … ``demo-d48-s0``: the ladder's rungs, one recipe with width varied, tokens per
   active parameter fixed, batch and learning rate from the planner's rule, two seeds on the small rungs;
   every run scores the downstream :data:`TASKS` during training (``eval/task/...``);
3. ``demo-fit``: ``L(C) = L∞ + A·C^(−α)`` at a recorded asymptote swept over a range, the hero's
   predicted curve with a 90% band, and the leave-last-rung-out back-test; per task, compute → task
   bpb → accuracy, the hero's predicted accuracy with its interval and back-test;
4. ``map``: the data map of the dataset (its documents embedded and clustered into content domains, the data
   page's Map), beside the rungs; then ``demo-hero``: a run with ≥ 4× the top rung's compute, its predictions
   (loss and task accuracies) registered before step 0, its held-out loss measured per content domain of the
   map too (the run page's cluster × step heatmap);
5. ``export``: the hero's last checkpoint as a Hugging Face ``transformers`` folder with a model card
   (its logits checked against ours), linked from the hero's page;
6. ``demo-conversations`` → ``demo-sft`` → ``export``: the built-in instruction set (decontaminated
   against the data's eval split), supervised fine-tuning of the hero into a chat model, and its export
   with the chat template (``glasslab chat export-<hash8>``);
7. ``demo-pairs`` → ``demo-dpo``: the built-in arithmetic task's preference pairs (the right answer over
   another problem's; the held-out pairs are problems no training pair asks), and preference tuning (DPO)
   of the SFT model, with the SFT model as its frozen reference. The pairs of the instruction set's
   ``describe`` conversations are left out: on them DPO moved held-out accuracy by +0.0 points (docs/LOG.md);
8. ``demo-prompts`` → ``demo-rl``: RL with verifiable rewards (GRPO) of the DPO model on the built-in
   arithmetic task, its held-out pass@1 (greedy, problems no training prompt asks) before and after.

At this scale the ladder is illustrative: rungs of tens of thousands of parameters trained for a few
hundred steps are noisy, and the demo reports its prediction error as it comes out. Everything the
demo's size decides is one :class:`DemoSize`: :data:`FULL` (``glasslab demo``) or :data:`QUICK`
(``--quick``: the whole DAG in about two minutes; the test suite runs it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from glasslab.data.build import data_step as build_data_step
from glasslab.data.config import BuildConfig, MixtureConfig, TokenizerConfig
from glasslab.data.map import map_after
from glasslab.evals.task import TaskConfig
from glasslab.lab import Step, output_of, run_output_of
from glasslab.lab.card import Expectation, ExperimentCard
from glasslab.ladder.plan import LadderPlan, LadderSpec, plan_ladder
from glasslab.ladder.steps import ladder_steps
from glasslab.model import ModelConfig, MoEConfig
from glasslab.posttrain.conversations import ConversationsConfig, conversations_step
from glasslab.posttrain.dpo import DPOStepConfig, default_dpo_train
from glasslab.posttrain.pairs import PairsConfig, pairs_step
from glasslab.posttrain.rl_prompts import PromptsConfig, builtin_sha256, prompts_step
from glasslab.posttrain.rl_step import RLStepConfig
from glasslab.posttrain.sft import SFTConfig, SFTStepConfig, default_sft_train
from glasslab.posttrain.tuning import tune_step
from glasslab.train.config import GuardConfig, ScheduleConfig, TrainConfig
from glasslab.train.export_step import ExportConfig, export_step

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
TASKS = (TaskConfig(builtin="next_word", domain="code"), TaskConfig(builtin="next_word", domain="prose"))
"""Downstream tasks every rung and the hero score: of the built-ins, the two the demo's models beat chance
on most (at d48 on the full data: code 0.44, prose 0.41, chance 0.25), about 600 items each after
decontamination; ``continuation`` and ``docstring`` stay near chance at these sizes."""
HERO_MIN_TOKENS_PER_S = 100.0
"""The hero's floor on a CPU: the quick demo's rungs run at about 10,000 tokens/s on a quiet thread, and
the hero measured about 430 tokens/s with six test suites sharing two cores."""
DPO_MIN_ACCURACY = 0.6
"""DPO's held-out preference accuracy on the arithmetic pairs: the SFT model starts near 0.45-0.48 (a coin
with a slight bias against the right answer); the full demo measured 0.753, a bench base 0.685."""
TASK_SFT_MAX_LOSS = 1.0
"""The task SFT's held-out loss on the arithmetic answers (the DPO model starts above 7 nats; 0.633 measured)."""
RL_MIN_PASS_AT_1 = 0.10
"""RL's held-out arithmetic pass@1 at its end: the start band's floor. RL is expected to keep what the task SFT
taught, not (at this model size) to add 20 points to it: docs/LOG.md, 2026-12-05."""
HERO_EXPECTATIONS = (
    Expectation("hero final eval loss", prediction=f"{LADDER}/hero/eval/macro/loss"),
    Expectation("hero macro task accuracy", prediction=f"{LADDER}/hero/task/macro"),
    Expectation("hero throughput", step=f"{LADDER}-hero", metric="throughput/tokens_per_second",
                low=HERO_MIN_TOKENS_PER_S, unit="tokens/s"),
)
POSTTRAIN_EXPECTATIONS = (
    Expectation("DPO held-out preference accuracy", step=f"{LADDER}-dpo", metric="eval/dpo/pref_accuracy",
                low=DPO_MIN_ACCURACY),
    Expectation("task SFT held-out answer loss", step=f"{LADDER}-task-sft", metric="eval/sft/loss",
                high=TASK_SFT_MAX_LOSS, unit="nats/token"),
    Expectation("RL held-out pass@1", step=f"{LADDER}-rl", metric="eval/rl/pass_at_1", low=RL_MIN_PASS_AT_1),
)
CARD = ExperimentCard(
    title="Does a 4-rung MoE ladder predict its hero's loss?",
    question="Trained on the built-in corpora, does a hero run with at least 4x the top rung's compute end "
             "with an eval loss and a downstream task accuracy inside the 90% bands that the ladder's fit "
             "registered before the hero's step 0?",
    design="Data build and BPE tokenizer; four MoE rungs (width 16-48, one recipe, tokens per active "
           "parameter fixed, batch and LR from the planner's rule); L(C) = L_inf + A*C^-alpha at a recorded "
           "asymptote, swept; the hero's prediction registered in the lab's registry; the hero trained and "
           "watched against its band; the hero exported for transformers, then fine-tuned (SFT) on the "
           "built-in instruction set into a chat model, exported with its chat template, and preference-tuned "
           "(DPO) on built-in pairs (the right arithmetic answer over another problem's), then tuned briefly on "
           "the arithmetic task's training problems and by RL with verifiable rewards (GRPO) on the task.",
    expectations=HERO_EXPECTATIONS + POSTTRAIN_EXPECTATIONS,
)
"""The demo's experiment card (``glasslab card demo``)."""
EXPORT_STEP = "export"
"""The hero's export: ``<lab>/export-<hash8>/``, the name every export step has (the run page finds them by it)."""
CONVERSATIONS_STEP = f"{LADDER}-conversations"
SFT_STEP = f"{LADDER}-sft"
PAIRS_STEP = f"{LADDER}-pairs"
DPO_STEP = f"{LADDER}-dpo"
TASK_CONVERSATIONS_STEP = f"{LADDER}-task-conversations"
TASK_SFT_STEP = f"{LADDER}-task-sft"
PROMPTS_STEP = f"{LADDER}-prompts"
RL_STEP = f"{LADDER}-rl"
RL_TASK = "arithmetic"


@dataclass(frozen=True)
class DemoSize:
    """Everything that makes the demo bigger or smaller; the recipe itself does not change with it."""

    max_source_bytes: int
    """Cap on each built-in source's bytes (0: the corpora's own caps)."""
    seq_len: int
    """Training context of every rung and the hero, tokens."""
    tokens_per_param: float
    """Training tokens per active parameter, the same at every rung."""
    min_steps: int
    """Fewest optimiser steps of a rung (the batch shrinks to keep them)."""
    seeds_per_rung: tuple[int, ...]
    """Seeds of the i-th smallest rung (the last value repeats)."""
    eval_max_tokens: int
    """Held-out tokens evaluated per domain at each eval."""
    checkpoint_interval: int
    """Optimiser steps between checkpoints."""
    num_bootstrap: int
    """Bootstrap replicates of the fit's intervals."""
    task_eval_every: int
    """Score :data:`TASKS` at every this-many-th evaluation (a run evaluates 20 times) and at the end."""
    sft_task_items: int
    """Items of each task scored before and after SFT (0 = all, about 600 each)."""
    sft_steps: int
    """Optimiser steps of the SFT of the hero (rows of ``sft_seq_len`` tokens, 16 per step)."""
    sft_seq_len: int
    """SFT row length, tokens (conversations are packed into rows)."""
    sft_max_modules: int
    """Standard-library modules read for the built-in instruction set (0 = all)."""
    dpo_steps: int
    """Optimiser steps of the DPO of the SFT model (16 pairs per step)."""
    map_k: int = 40
    """Content domains of the map of the hero's training data (``glasslab data map --k``)."""
    cluster_eval_every: int = 5
    """The hero measures its held-out loss per content domain of the map at every this-many-th evaluation
    and at the last (``train.cluster_eval_every``)."""
    task_sft_steps: int = 200
    """Optimiser steps of the task SFT of the DPO model before RL (32 one-turn problems per step)."""
    rl_steps: int = 40
    """GRPO steps of the RL of the task-SFT model (8 prompts × 8 answers per step)."""


FULL = DemoSize(max_source_bytes=0, seq_len=64, tokens_per_param=10.0, min_steps=200, seeds_per_rung=(2, 2, 1),
                eval_max_tokens=4096, checkpoint_interval=200, num_bootstrap=1000, task_eval_every=5,
                sft_task_items=0, sft_steps=150, sft_seq_len=128, sft_max_modules=0, dpo_steps=100)
"""``glasslab demo``: two seeds on the small rungs, about 10 minutes on a laptop CPU."""
QUICK = DemoSize(max_source_bytes=400_000, seq_len=32, tokens_per_param=1.0, min_steps=30, seeds_per_rung=(1,),
                 eval_max_tokens=1024, checkpoint_interval=100, num_bootstrap=300, task_eval_every=10,
                 sft_task_items=200, sft_steps=40, sft_seq_len=128, sft_max_modules=120, dpo_steps=20,
                 map_k=8, task_sft_steps=20, rl_steps=8)
"""``glasslab demo --quick``: the whole DAG in about two minutes (the test suite's demo lab)."""


def card(size: DemoSize) -> ExperimentCard:
    """The card the demo runs under at ``size``: ``--quick``'s hero is too small for the post-training bands
    (its task SFT leaves held-out pass@1 near 0.1 and the answers' loss near 2: docs/LOG.md, 2026-12-05), so
    its card expects the hero's numbers only."""
    return CARD if size == FULL else dataclasses.replace(CARD, expectations=HERO_EXPECTATIONS)


def build_config(size: DemoSize) -> BuildConfig:
    """The demo's data build: the default built-in corpora, each capped at ``size.max_source_bytes``."""
    cfg = BuildConfig(tokenizer=TokenizerConfig(vocab_size=VOCAB_SIZE))
    cap = size.max_source_bytes
    if not cap:
        return cfg
    sources = tuple(dataclasses.replace(s, max_bytes=min(s.max_bytes or cap, cap)) for s in cfg.sources)
    return dataclasses.replace(cfg, sources=sources)


def data_step(size: DemoSize) -> Step:
    """The demo's data build as a step (``glasslab data build demo`` builds this very step)."""
    return build_data_step(build_config(size))


def ladder_spec(size: DemoSize) -> LadderSpec:
    """One MoE recipe at widths 16–48 (head width 8) and a hero at width 72 (≥ 4× the top rung's compute)."""
    base = ModelConfig(vocab_size=VOCAB_SIZE, n_heads=2, n_kv_heads=2,
                       moe=MoEConfig(num_experts=8, top_k=2, num_shared_experts=1, router="sigmoid",
                                     balancing="sign"))
    return LadderSpec(name=LADDER, base_model=base, widths=(16, 24, 32, 48), hero_width=72, head_dim=8,
                      width_per_layer=16, seq_len=size.seq_len, tokens_per_param=size.tokens_per_param,
                      min_steps=size.min_steps, lr_multiplier=LR_MULTIPLIER, seeds_per_rung=size.seeds_per_rung)


def train_recipe(size: DemoSize, sinks: tuple[str, ...] = ()) -> TrainConfig:
    """What every rung and the hero share: schedule, guard, intervals, tasks, sinks, the published checkpoint
    schedule (``keep_log``: what the site lists and ``glasslab export RUN@STEP`` exports; batch, steps and LR
    come from the plan)."""
    return TrainConfig(schedule=ScheduleConfig(kind="wsd", warmup_fraction=WARMUP_FRACTION,
                                               decay_fraction=0.2, min_lr_ratio=0.0),
                       guard=GuardConfig(sigma=8.0), eval_max_tokens=size.eval_max_tokens, eval_batch_size=32,
                       sample_max_new_tokens=24, checkpoint_interval=size.checkpoint_interval, sinks=sinks,
                       eval_tasks=TASKS, task_eval_every=size.task_eval_every,
                       cluster_eval_every=size.cluster_eval_every, keep_log=True)


def sft_tasks(size: DemoSize) -> tuple[TaskConfig, ...]:
    """What SFT is scored on before and after: :data:`TASKS` as they are and posed as chat turns, at
    ``size.sft_task_items`` items each."""
    plain = tuple(dataclasses.replace(task, max_items=size.sft_task_items) for task in TASKS)
    return plain + tuple(dataclasses.replace(task, chat=True) for task in plain)


def plan(size: DemoSize = FULL) -> LadderPlan:
    return plan_ladder(ladder_spec(size))


def demo_steps(size: DemoSize = FULL, device: str = "cpu", threads: int = 1, hero_threads: int = 0,
               sinks: tuple[str, ...] = ()) -> list[Step]:
    """The demo's DAG: data, its map, rungs, fit, hero, the hero's export (``threads`` per rung, ``hero_threads``
    for the hero; ``sinks`` are every run's ``train.sinks``)."""
    data = data_step(size)
    data_map = map_after(data, k=size.map_k, progress=False)
    ladder_plan = plan(size)
    ladder = ladder_steps(ladder_plan, data, MIXTURE, train_recipe(size, sinks), L_inf=L_INF, sweep=L_INF_SWEEP,
                          device=device, threads=threads, hero_threads=hero_threads, num_bootstrap=size.num_bootstrap,
                          hero_map=data_map)
    hero = ladder[-1]
    export = Step(EXPORT_STEP, export_step, ExportConfig(**run_output_of(hero), step=ladder_plan.hero.steps))
    # The map after the rungs: the executor starts ready steps in list order, the longest runs first.
    return [data, *ladder[:-2], data_map, *ladder[-2:], export,
            *posttrain_steps(size, data, hero, device, hero_threads)]


def posttrain_steps(size: DemoSize, data: Step, hero: Step, device: str = "cpu", threads: int = 0) -> list[Step]:
    """The hero's post-training: the instruction set, SFT of the hero's last checkpoint and its export, the
    built-in pairs and DPO of the SFT model, then the arithmetic task's SFT and RL of the DPO model."""
    conversations = Step(CONVERSATIONS_STEP, conversations_step,
                         ConversationsConfig(builtin_max_modules=size.sft_max_modules,
                                             decontaminate_from=output_of(data)))
    train = dataclasses.replace(default_sft_train(), seq_len=size.sft_seq_len, max_steps=size.sft_steps,
                                global_batch_tokens=size.sft_seq_len * 16, checkpoint_interval=size.sft_steps,
                                eval_tasks=sft_tasks(size))
    sft = Step(SFT_STEP, tune_step, SFTStepConfig(train=train, sft=SFTConfig(eval_max_conversations=256),
                                                 base_from=output_of(hero), conversations_from=output_of(conversations),
                                                 device=device, threads=threads))
    export = Step(EXPORT_STEP, export_step, ExportConfig(**run_output_of(sft), step=size.sft_steps))
    pairs = Step(PAIRS_STEP, pairs_step, PairsConfig(describe=False))
    dpo_train = dataclasses.replace(default_dpo_train(), seq_len=size.sft_seq_len, max_steps=size.dpo_steps,
                                    global_batch_tokens=size.sft_seq_len * 16, checkpoint_interval=size.dpo_steps)
    dpo = Step(DPO_STEP, tune_step, DPOStepConfig(train=dpo_train, base_from=output_of(sft),
                                                 pairs_from=output_of(pairs), device=device, threads=threads))
    return [conversations, sft, export, pairs, dpo, *rl_stage(size, dpo, device, threads)]


def rl_stage(size: DemoSize, dpo: Step, device: str = "cpu", threads: int = 0) -> list[Step]:
    """The built-in arithmetic task: a short SFT of the DPO model on its training problems (so RL starts with
    some held-out answers right: DPO teaches to prefer the right answer, not to write it), then its prompts
    and GRPO of the task-SFT model on them (answers of up to 5 tokens, 8 prompts × 8 answers per step;
    ``docs/rl.md``). Neither trains on the task's held-out problems."""
    conversations = Step(TASK_CONVERSATIONS_STEP, conversations_step, ConversationsConfig(builtin=False, task=RL_TASK))
    sft_cfg = SFTStepConfig(base_from=output_of(dpo), conversations_from=output_of(conversations), device=device,
                            threads=threads)
    sft_train = dataclasses.replace(sft_cfg.train, seq_len=32, global_batch_tokens=32 * 32,
                                    max_steps=size.task_sft_steps, checkpoint_interval=size.task_sft_steps,
                                    eval_max_tokens=256, sample_max_new_tokens=8)
    task_sft = Step(TASK_SFT_STEP, tune_step, dataclasses.replace(sft_cfg, train=sft_train))
    prompts = Step(PROMPTS_STEP, prompts_step, PromptsConfig(builtin=RL_TASK, builtin_sha256=builtin_sha256(RL_TASK)))
    cfg = RLStepConfig(base_from=output_of(task_sft), prompts_from=output_of(prompts), device=device, threads=threads)
    train = dataclasses.replace(cfg.train, seq_len=40, global_batch_tokens=40 * 64, max_steps=size.rl_steps,
                                checkpoint_interval=size.rl_steps, eval_interval=max(1, size.rl_steps // 2),
                                eval_max_tokens=256)
    rl = dataclasses.replace(cfg.rl, reward=f"builtin:{RL_TASK}", max_new_tokens=5, eval_max_prompts=0)
    return [conversations, task_sft, prompts,
            Step(RL_STEP, tune_step, dataclasses.replace(cfg, train=train, rl=rl))]


def steps() -> list[Step]:
    """``glasslab run demo``: the full demo's steps."""
    return demo_steps()
