"""Planning a ladder: one recipe, width varied, every hyper-parameter derived from a rule.

Tiny ladders predict well only when the recipe transfers across rungs: the same tokens per active
parameter at every rung and for the hero, batch size and learning rate from one rule (never tuned
per rung), enough optimiser steps per rung, and several seeds on the small rungs. So a rung is
described by one number, its width ``d_model``; depth, heads, feed-forward and expert widths follow
from it, tokens from the tokens-per-parameter rule, batch and learning rate from the spec's named
:class:`ScalingRule` (:func:`batch_and_learning_rate`), and the hero is planned by the very same
function at its width.

Four modes: a width ladder (``widths``), compute budgets (``budgets``: the width whose rule-sized run
spends each budget), isoFLOP (``isoflop_sizes`` widths per budget, tokens = budget / FLOPs per
token), and a **grid** (``token_multiples``): each width trained to several multiples of its rule's
tokens, cheaply — one constant-learning-rate trunk per width and seed, and a short cooldown branched
off it at each token count (Hägele et al. 2024), so every grid point ends as the hero's schedule ends.
Only isoFLOP and the grid vary tokens per parameter; the grid, with tokens varied at a fixed size, is
the design that can place the loss floor (``glasslab.ladder.grid_law``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from glasslab import config
from glasslab.config import ConfigError, config_hash, require
from glasslab.errors import UserError
from glasslab.model import ModelConfig, MoEConfig

MIN_TOKENS_PER_PARAM = 1.0
MAX_TOKENS_PER_PARAM = 1000.0
"""isoFLOP sizes whose tokens per parameter fall outside this range are dropped from the plan."""


def _default_model() -> ModelConfig:
    return ModelConfig(vocab_size=2048, moe=MoEConfig(num_experts=8, top_k=2, num_shared_experts=1))


@dataclass(frozen=True)
class ScalingRule:
    """Batch size and peak learning rate as power laws of training compute C (FLOPs).

    The compute-optimal batch is ``B = batch_coefficient · C^batch_exponent`` tokens and the peak
    learning rate ``η = lr_coefficient · C^lr_exponent``. When that batch would leave a run fewer than
    ``LadderSpec.min_steps`` steps, the batch is cut to keep them and η follows it down by
    ``sqrt(B / B_opt)`` (the square-root rule for Adam), so small rungs still take enough steps. A
    rule is data: it is printed with the plan, hashed (:meth:`hash`), and a spec may name another.
    """

    name: str = "deepseek-llm"
    """What the constants are (shown with the plan)."""
    batch_coefficient: float = 0.292
    """B_opt = batch_coefficient · C^batch_exponent, in tokens."""
    batch_exponent: float = 0.3271
    lr_coefficient: float = 0.3118
    """η_opt = lr_coefficient · C^lr_exponent (AdamW)."""
    lr_exponent: float = -0.125

    def __post_init__(self) -> None:
        require(self.batch_coefficient > 0, "ladder.scaling_rule.batch_coefficient", self.batch_coefficient, "> 0")
        require(self.lr_coefficient > 0, "ladder.scaling_rule.lr_coefficient", self.lr_coefficient, "> 0")

    def hash(self) -> str:
        """8 hex digits naming these constants (the name included)."""
        return config_hash(self)[:8]


DEEPSEEK_LLM_RULE = ScalingRule()
"""The compute-optimal fits of DeepSeek LLM (Bi et al. 2024, §3.1): B = 0.292 · C^0.3271 tokens and
η = 0.3118 · C^−0.125, fitted on their recipe (AdamW, multi-step schedule); the default rule."""


@dataclass(frozen=True)
class LadderSpec:
    """A ladder: the base recipe and how it scales with width."""

    name: str = "tiny"
    """Ladder name (groups the rungs in the store; names the fit)."""
    base_model: ModelConfig = field(default_factory=_default_model)
    """The recipe every rung shares (vocabulary, norms, MoE settings); widths are set per rung."""
    widths: tuple[int, ...] = (64, 96, 128, 192)
    """d_model of each rung (width ladder mode)."""
    hero_width: int = 384
    """d_model of the hero run, planned by the same rules."""
    budgets: tuple[float, ...] = ()
    """Training compute budgets in FLOPs; when set they replace ``widths`` (budget or isoFLOP mode)."""
    isoflop_sizes: int = 0
    """Model sizes per budget (isoFLOP mode, needed for approach 3); 0 = one rule-sized model per budget."""
    head_dim: int = 32
    """Width of one attention head; heads = d_model // head_dim."""
    width_per_layer: int = 32
    """Depth rule: n_layers = max(2, round(d_model / width_per_layer))."""
    ffn_mult: float = 3.0
    """Dense SwiGLU hidden size d_ff = ffn_mult · d_model (rounded to a multiple of 16)."""
    expert_mult: float = 1.0
    """Expert hidden size d_expert = expert_mult · d_model (rounded to a multiple of 16), MoE recipes only."""
    seq_len: int = 256
    """Training context in tokens."""
    tokens_per_param: float = 20.0
    """Training tokens per active parameter (``param_counts()['active']``), the same at every rung."""
    min_steps: int = 1000
    """Fewest optimiser steps a rung may take; the batch shrinks to keep this many."""
    scaling_rule: ScalingRule = DEEPSEEK_LLM_RULE
    """How batch size and learning rate follow compute (one rule for every rung and the hero)."""
    lr_multiplier: float = 1.0
    """Scales the rule's learning rate for every rung and the hero alike (DeepSeek's constants were
    fitted on their recipe; a different one may want a different constant, never a per-rung tweak)."""
    seeds_per_rung: tuple[int, ...] = (3, 3, 2, 2)
    """Seeds of the i-th smallest rung; the last value repeats for larger rungs. The hero runs one."""
    token_multiples: tuple[float, ...] = ()
    """Grid mode (with ``widths``): each width is trained to these multiples of its rule's tokens, e.g.
    (0.25, 0.5, 1, 2, 4, 8): a constant-LR trunk to the largest and a cooldown branch at each. Each must be
    a whole multiple of the smallest, so every branch starts on a step the trunk checkpoints."""
    cooldown_fraction: float = 0.2
    """Grid mode: of each branch's steps, the last this fraction decay the learning rate (the recipe's WSD
    ``decay_fraction``, so a grid point ends as the hero does)."""
    hero_reach: float = 0.0
    """Grid mode: keep only grid points with at most 1/hero_reach of the hero's compute outside the LM head
    (e.g. 100: the hero is ≥ 100× every point); 0 keeps them all."""

    def __post_init__(self) -> None:
        require(all(w >= self.head_dim and w % self.head_dim == 0 for w in self.widths), "ladder.widths",
                self.widths, f"multiples of ladder.head_dim={self.head_dim}")
        require(self.hero_width % self.head_dim == 0, "ladder.hero_width", self.hero_width,
                f"a multiple of ladder.head_dim={self.head_dim}")
        require(self.head_dim >= 2 and self.head_dim % 2 == 0, "ladder.head_dim", self.head_dim,
                "an even number ≥ 2")
        require(all(b > 0 and math.isfinite(b) for b in self.budgets), "ladder.budgets", self.budgets,
                "positive FLOP counts")
        require(self.isoflop_sizes == 0 or (self.budgets and self.isoflop_sizes >= 2), "ladder.isoflop_sizes",
                self.isoflop_sizes, "0, or ≥ 2 together with ladder.budgets")
        require(self.width_per_layer >= 1, "ladder.width_per_layer", self.width_per_layer, "≥ 1")
        require(self.ffn_mult > 0 and self.expert_mult > 0, "ladder.ffn_mult", self.ffn_mult, "> 0")
        require(self.seq_len >= 1, "ladder.seq_len", self.seq_len, "≥ 1")
        require(self.tokens_per_param > 0, "ladder.tokens_per_param", self.tokens_per_param, "> 0")
        require(self.min_steps >= 1, "ladder.min_steps", self.min_steps, "≥ 1")
        require(self.lr_multiplier > 0, "ladder.lr_multiplier", self.lr_multiplier, "> 0")
        require(len(self.seeds_per_rung) >= 1 and min(self.seeds_per_rung) >= 1, "ladder.seeds_per_rung",
                self.seeds_per_rung, "at least one count, each ≥ 1")
        if self.token_multiples:
            smallest = min(self.token_multiples)
            require(not self.budgets, "ladder.token_multiples", self.token_multiples, "a width ladder (no budgets)")
            require(len(set(self.token_multiples)) >= 2 and smallest > 0 and all(
                abs(m / smallest - round(m / smallest)) < 1e-9 for m in self.token_multiples),
                "ladder.token_multiples", self.token_multiples, "two or more, each a whole multiple of the smallest")
        require(0 < self.cooldown_fraction < 1, "ladder.cooldown_fraction", self.cooldown_fraction, "in (0, 1)")
        require(self.hero_reach >= 0, "ladder.hero_reach", self.hero_reach, "≥ 0")


@dataclass(frozen=True)
class PlannedRung:
    """One planned run size: its model, data budget, batch, learning rate and seeds."""

    name: str
    role: Literal["rung", "hero", "trunk"]
    model: ModelConfig
    size_name: str
    params_active: int
    seq_len: int
    batch_size: int
    """Sequences per optimiser step (global batch)."""
    learning_rate: float
    steps: int
    tokens: int
    """steps · batch_size · seq_len."""
    flops: float
    """Training compute: tokens × FLOPs per token."""
    seeds: tuple[int, ...]
    trunk: str = ""
    """Grid mode: the trunk a branch forks from (a rung's name); empty for a run trained from step 0."""
    fork_step: int = 0
    """Grid mode: the trunk's step a branch starts from (where its cooldown begins)."""
    reference_steps: int = 0
    """Grid mode: steps of this width's 1× run (the rule's, rounded to whole multiples of the smallest
    branch), whose warmup every trunk and branch keeps and whose 5% points the trunk is evaluated at."""

    @property
    def tokens_per_param(self) -> float:
        return self.tokens / self.params_active

    @property
    def law_flops(self) -> float:
        """Training compute outside the LM head: the compute axis the ladder's law is fitted on."""
        return self.flops - self.tokens * self.model.head_flops_per_token()


@dataclass(frozen=True)
class LadderPlan:
    spec: LadderSpec
    mode: Literal["widths", "budgets", "isoflop", "grid"]
    rungs: tuple[PlannedRung, ...]
    """The runs whose final losses are fitted (in grid mode, the cooldown branches)."""
    hero: PlannedRung
    note: str
    trunks: tuple[PlannedRung, ...] = ()
    """Grid mode: the constant-LR trunks the branches fork from (one per width; its seeds)."""


def batch_and_learning_rate(flops: float, tokens: float, seq_len: int, min_steps: int,
                            rule: ScalingRule = DEEPSEEK_LLM_RULE) -> tuple[int, float]:
    """Global batch (sequences) and peak learning rate for a run of ``flops`` FLOPs on ``tokens`` tokens
    under ``rule`` (see :class:`ScalingRule`), with at least ``min_steps`` optimiser steps."""
    batch_tokens = rule.batch_coefficient * flops**rule.batch_exponent
    learning_rate = rule.lr_coefficient * flops**rule.lr_exponent
    capped = min(batch_tokens, tokens / min_steps)
    learning_rate *= math.sqrt(capped / batch_tokens)
    return max(1, math.floor(capped / seq_len)), learning_rate


def model_at_width(spec: LadderSpec, width: int) -> ModelConfig:
    """The base recipe at ``d_model = width`` (depth, heads, feed-forward and experts from the rules)."""
    base = spec.base_model
    n_heads = width // spec.head_dim
    kv_group = max(1, base.n_heads // (base.n_kv_heads or base.n_heads))  # n_kv_heads 0 means n_heads
    n_kv_heads = n_heads // kv_group if n_heads % kv_group == 0 else n_heads
    n_layers = max(2, round(width / spec.width_per_layer))
    moe = base.moe
    if moe is not None:
        moe = dataclasses.replace(moe, d_expert=_multiple_of_16(spec.expert_mult * width),
                                  first_k_dense=min(moe.first_k_dense, n_layers - 1))
    return dataclasses.replace(base, d_model=width, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads,
                               head_dim=spec.head_dim, d_ff=_multiple_of_16(spec.ffn_mult * width), moe=moe)


def _multiple_of_16(x: float) -> int:
    return max(16, 16 * round(x / 16))


def plan_run(spec: LadderSpec, width: int, *, name: str, role: Literal["rung", "hero"] = "rung",
             tokens: float | None = None, seeds: Sequence[int] = (0,)) -> PlannedRung:
    """Plan one run at ``width``; ``tokens`` defaults to the tokens-per-parameter rule."""
    model = model_at_width(spec, width)
    params_active = model.param_counts()["active"]
    flops_per_token = model.flops_per_token(spec.seq_len)
    wanted_tokens = tokens if tokens is not None else spec.tokens_per_param * params_active
    batch_size, rule_lr = batch_and_learning_rate(wanted_tokens * flops_per_token, wanted_tokens,
                                                  spec.seq_len, spec.min_steps, spec.scaling_rule)
    steps = max(1, round(wanted_tokens / (batch_size * spec.seq_len)))
    actual_tokens = steps * batch_size * spec.seq_len
    return PlannedRung(name, role, model, model.size_name(), params_active, spec.seq_len, batch_size,
                       rule_lr * spec.lr_multiplier, steps, actual_tokens, actual_tokens * flops_per_token,
                       tuple(seeds))


def _seeds(spec: LadderSpec, index: int) -> tuple[int, ...]:
    count = spec.seeds_per_rung[min(index, len(spec.seeds_per_rung) - 1)]
    return tuple(range(count))


def _rule_compute(spec: LadderSpec, width: int) -> float:
    model = model_at_width(spec, width)
    return spec.tokens_per_param * model.param_counts()["active"] * model.flops_per_token(spec.seq_len)


def _width_for_budget(spec: LadderSpec, budget: float) -> int:
    """The width (a multiple of head_dim) whose rule-sized run spends closest to ``budget`` FLOPs."""
    width = spec.head_dim
    while _rule_compute(spec, width + spec.head_dim) <= budget and width < 1 << 16:
        width += spec.head_dim
    above = width + spec.head_dim
    miss = lambda w: abs(math.log(_rule_compute(spec, w) / budget))
    return above if miss(above) < miss(width) else width


def budget_label(budget: float) -> str:
    """``C1.8e12``: a compute budget as a rung-name prefix (two significant figures; no '+', which step
    and folder names cannot hold)."""
    return "C" + f"{budget:.2g}".replace("e+", "e")


def plan_ladder(spec: LadderSpec) -> LadderPlan:
    """The rungs and the hero of ``spec``, smallest first."""
    hero = plan_run(spec, spec.hero_width, name=f"hero-d{spec.hero_width}", role="hero")
    if spec.token_multiples:
        return _plan_grid(spec, hero)
    if not spec.budgets:
        widths = sorted(spec.widths)
        rungs = [plan_run(spec, w, name=f"d{w}", seeds=_seeds(spec, i)) for i, w in enumerate(widths)]
        return LadderPlan(spec, "widths", tuple(rungs), hero, _FIXED_RATIO_NOTE)
    budgets = sorted(spec.budgets)
    if not spec.isoflop_sizes:
        rungs = []
        for i, budget in enumerate(budgets):
            width = _width_for_budget(spec, budget)
            tokens = budget / model_at_width(spec, width).flops_per_token(spec.seq_len)
            rungs.append(plan_run(spec, width, name=f"{budget_label(budget)}-d{width}", tokens=tokens,
                                  seeds=_seeds(spec, i)))
        return LadderPlan(spec, "budgets", tuple(rungs), hero, _FIXED_RATIO_NOTE)
    rungs = []
    for i, budget in enumerate(budgets):
        center = _width_for_budget(spec, budget)
        half = (spec.isoflop_sizes - 1) / 2
        # Sizes spaced by sqrt(2) in width around the rule's size, snapped to whole heads.
        scales = [2 ** ((k - half) / 2) for k in range(spec.isoflop_sizes)]
        head = spec.head_dim
        widths = sorted({max(head, head * round(center * s / head)) for s in scales})
        for width in widths:
            tokens = budget / model_at_width(spec, width).flops_per_token(spec.seq_len)
            rung = plan_run(spec, width, name=f"{budget_label(budget)}-d{width}", tokens=tokens, seeds=_seeds(spec, i))
            if MIN_TOKENS_PER_PARAM <= rung.tokens_per_param <= MAX_TOKENS_PER_PARAM:
                rungs.append(rung)
    note = ("isoFLOP: several sizes per budget, so approach 3 (L(N,D)) can be fitted and gives the "
            "compute-optimal (N, D); L(C) uses the best size of each budget.")
    return LadderPlan(spec, "isoflop", tuple(rungs), hero, note)


GRID_STEP_QUANTUM = 20
"""The smallest grid point's steps are a multiple of this, so a cooldown in 5% units starts on a whole step."""


def _plan_grid(spec: LadderSpec, hero: PlannedRung) -> LadderPlan:
    """Grid mode: per width, a trunk and a branch at each token multiple within the hero's reach.

    Batch and learning rate are the width's rule-sized (1×) run's, shared by its trunk and branches; the
    smallest branch's steps are rounded to :data:`GRID_STEP_QUANTUM` and the others are whole multiples of
    it, so every branch's fork step is a multiple of the smallest one's (the trunk's checkpoint interval).
    """
    cap = hero.law_flops / spec.hero_reach if spec.hero_reach else math.inf
    smallest = min(spec.token_multiples)
    branches, trunks = [], []
    for i, width in enumerate(sorted(spec.widths)):
        reference = plan_run(spec, width, name=f"d{width}", seeds=_seeds(spec, i))
        base = max(GRID_STEP_QUANTUM, GRID_STEP_QUANTUM * round(reference.steps * smallest / GRID_STEP_QUANTUM))
        # The grid's own 1× run: the rule's, rounded to whole multiples of the smallest branch.
        reference_steps = base * max(1, round(reference.steps / base))
        per_token = reference.flops / reference.tokens
        trunk_name = f"d{width}-trunk"
        kept = []
        for multiple in sorted(spec.token_multiples):
            steps = base * round(multiple / smallest)
            tokens = steps * reference.batch_size * reference.seq_len
            branch = dataclasses.replace(reference, name=f"d{width}-x{multiple:g}", steps=steps, tokens=tokens,
                                         flops=tokens * per_token, trunk=trunk_name,
                                         fork_step=steps - round(spec.cooldown_fraction * steps),
                                         reference_steps=reference_steps)
            if branch.law_flops <= cap:
                kept.append(branch)
        if not kept:
            continue
        last = max(b.fork_step for b in kept)
        tokens = last * reference.batch_size * reference.seq_len
        trunks.append(dataclasses.replace(reference, name=trunk_name, role="trunk", steps=last, tokens=tokens,
                                          flops=tokens * per_token, reference_steps=reference_steps))
        branches.extend(kept)
    if len(trunks) < 2:
        raise UserError(f"ladder {spec.name}: {len(trunks)} widths have a grid point within 1/{spec.hero_reach:g} of "
                        "the hero's compute; expected at least two (smaller widths, or a smaller ladder.hero_reach)")
    note = ("grid: each width trained to several token counts (a constant-LR trunk, a cooldown branched off at "
            "each), so L(N, D) and its floor E can be fitted on the rungs (floor mode 'grid').")
    return LadderPlan(spec, "grid", tuple(branches), hero, note, tuple(trunks))


_FIXED_RATIO_NOTE = ("fixed tokens per parameter (D ∝ N): only L(C) can be fitted; approach 3 needs an "
                     "isoFLOP plan (several sizes per budget).")


def rung_record_extra(rung: PlannedRung, seed: int, ladder: str) -> dict:
    """The fields a rung's (or the hero's) ``run.json`` carries so the fit can read it back
    (``tokens`` is the rung's training tokens, ``flops`` its training compute)."""
    record = {"role": rung.role, "ladder": ladder, "rung": rung.name, "seed": seed, "size_name": rung.size_name,
              "params_active": rung.params_active, "tokens": rung.tokens, "flops": rung.flops, "steps": rung.steps,
              "batch_size": rung.batch_size, "seq_len": rung.seq_len, "learning_rate": rung.learning_rate}
    if rung.reference_steps:
        record.update(reference_steps=rung.reference_steps, **({"trunk": rung.trunk, "fork_step": rung.fork_step}
                                                               if rung.trunk else {}))
    return record


def record_law_flops(record: dict, where: str) -> float:
    """A rung's (or the hero's) training FLOPs outside the LM head, from its ``run.json`` record (the
    fields above and the model config): the compute axis of the ladder's law. ``where`` names the
    record in the one-line error when its model config cannot say the LM head's size."""
    try:
        model = config.from_dict(ModelConfig, (record.get("config") or {}).get("model") or {}, "model")
        head = model.head_flops_per_token()
    except ConfigError as exc:
        raise UserError(f"{where}: {exc}; expected the config of a run planned as a ladder rung") from None
    return float(record["flops"]) - float(record["tokens"]) * head


def record_law_params(record: dict, where: str) -> float:
    """A run's non-embedding active parameters from its ``run.json`` model config: the grid law's N
    (Kaplan et al.'s count; embeddings are 11–70% of these runs' active parameters)."""
    try:
        model = config.from_dict(ModelConfig, (record.get("config") or {}).get("model") or {}, "model")
        return float(model.param_counts()["active_non_embedding"])
    except ConfigError as exc:
        raise UserError(f"{where}: {exc}; expected the config of a run planned as a ladder rung") from None


def plan_table(plan: LadderPlan):  # -> rich.table.Table (rich is imported here to keep imports light)
    """The plan as a rich table, one row per rung and one for the hero."""
    from rich.table import Table

    rule = plan.spec.scaling_rule
    table = Table(title=f"ladder {plan.spec.name} ({plan.mode}, seq_len {plan.spec.seq_len})",
                  caption=f"{plan.note}\nbatch and LR rule {rule.name} ({rule.hash()}): "
                  f"B = {rule.batch_coefficient:g}·C^{rule.batch_exponent:g} tokens, "
                  f"η = {rule.lr_coefficient:g}·C^{rule.lr_exponent:g} × {plan.spec.lr_multiplier:g}")
    for column in ("rung", "d_model", "layers", "heads", "experts", "size", "active", "emb", "head", "tokens",
                   "tok/param", "batch", "lr", "steps", "FLOPs", "seeds"):
        table.add_column(column, justify="left" if column in ("rung", "size") else "right")
    for rung in (*plan.trunks, *plan.rungs, plan.hero):
        m = rung.model
        experts = f"{m.moe.top_k}/{m.moe.num_experts}" if m.moe else "dense"
        # Rungs whose parameters are mostly embeddings follow a different law: show how much they are.
        embedding_share = m.param_counts()["embedding"] / rung.params_active
        head_share = m.head_flops_per_token() / m.flops_per_token(rung.seq_len)
        table.add_row(rung.name, str(m.d_model), str(m.n_layers), str(m.n_heads), experts, rung.size_name,
                      f"{rung.params_active:.3g}", f"{embedding_share:.0%}", f"{head_share:.0%}", f"{rung.tokens:.3g}",
                      f"{rung.tokens_per_param:.1f}", str(rung.batch_size), f"{rung.learning_rate:.2e}",
                      str(rung.steps), f"{rung.flops:.3g}", str(len(rung.seeds)),
                      style={"hero": "bold", "trunk": "dim"}.get(rung.role))
    table.caption += "\nemb: embedding share of active parameters; head: LM head share of FLOPs per token"
    if plan.mode == "grid":
        table.caption += "\n" + grid_cost(plan)
    return table


CPU_FLOPS_PER_CORE_SECOND = 1e10
"""Training FLOPs one CPU core does in a second on grid-sized runs, for a plan's cost in CPU-hours: protocol
(a)'s grid, 9.95e12 FLOPs, took 17.2 minutes of one core by ``bench/ladder_bench.py --estimate`` (measured step
times, ``docs/LOG.md`` 2026-12-02): 9.6e9 a core-second. The d88 hero ran 2.1e10 (8.91e13 FLOPs in 2,100 s on two
threads), so the hero's figure is an upper bound; both were measured under load, not quiet."""


def cpu_hours(flops: float) -> float:
    """Hours of one CPU core that ``flops`` training FLOPs take at :data:`CPU_FLOPS_PER_CORE_SECOND`."""
    return flops / CPU_FLOPS_PER_CORE_SECOND / 3600


def grid_cost(plan: LadderPlan) -> str:
    """A grid's training compute over all seeds (each trunk once, each branch from its fork) in FLOPs and CPU-hours,
    the span of N it fits (non-embedding and active parameters) and the extrapolation it buys: the hero's N over the
    top width's, and its compute outside the LM head over the largest grid point's."""
    trunks = sum(t.flops * len(t.seeds) for t in plan.trunks)
    branches = sum(r.flops * (r.steps - r.fork_step) / r.steps * len(r.seeds) for r in plan.rungs)
    reach = plan.hero.law_flops / max(r.law_flops for r in plan.rungs)
    non_embedding = [t.model.param_counts()["active_non_embedding"] for t in plan.trunks]
    active = [t.params_active for t in plan.trunks]
    hero_n = plan.hero.model.param_counts()["active_non_embedding"]
    grid, hero = trunks + branches, plan.hero.flops
    return (f"grid cost: {grid:.3g} training FLOPs over all seeds ({trunks:.3g} trunks, {branches:.3g} cooldowns), "
            f"~{cpu_hours(grid):.1f} CPU-hours; hero {hero:.3g} FLOPs, ~{cpu_hours(hero):.1f} CPU-hours (at "
            f"{CPU_FLOPS_PER_CORE_SECOND:.0e} FLOPs a core-second)\n"
            f"span of N: ×{max(non_embedding) / min(non_embedding):.1f} non-embedding, "
            f"×{max(active) / min(active):.1f} active; hero ×{hero_n / max(non_embedding):.1f} the top width's N; "
            f"extrapolation ×{reach:.0f} "
            f"(hero over the top grid point, outside the LM head)")
