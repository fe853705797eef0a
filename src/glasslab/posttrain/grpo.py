"""Group-relative policy optimisation (GRPO): rollouts as a batch, advantages within a group, the loss.

Each prompt is answered ``G`` times (a *group*); each answer's reward r_i is turned into an advantage
relative to its group, A_i = (r_i − mean(r)) / (std(r) + ε) (population std, ε = ``ADV_EPS``), so the
model is pushed towards the answers that beat their siblings and the scale of the reward does not matter.

- A sample whose reward *failed* (raised, hung, not a number) leaves its group: the group's mean and std
  are over the other samples, and the failed one gets no loss at all (never a silent 0).
- A group with no spread (every kept reward equal, or fewer than two kept) has nothing to compare: its
  advantages are 0, so it adds only the KL term; the share of such groups is ``rl/groups_no_spread``.
  They are kept, not resampled: resampling would make a step's cost depend on the rewards.

The loss of a completion token t with log-probability log π(t) (π the policy, π_old the policy that
sampled, π_ref the frozen base):

    −min(ρ·A, clip(ρ, 1 − ε_clip, 1 + ε_clip)·A) + β·k3,   ρ = π(t) / π_old(t),
    k3 = π_ref(t)/π(t) − log(π_ref(t)/π(t)) − 1   (an unbiased, non-negative estimate of KL(π‖π_ref))

One optimiser step is taken per batch of rollouts, so π_old is π itself (detached): ρ = 1 in value and
its gradient is that of log π, the clip never binds, exactly as TRL's ``GRPOTrainer`` with one iteration.

Normalisation (``rl.normalise``): ``token`` (the default) averages over every completion token of the step
(DAPO's choice): each token counts the same, so a long wrong answer is pushed down as hard per token as
a short one, and no length bias enters through 1/|o|. ``sequence`` averages each completion's tokens,
then over completions (the original GRPO paper): every answer weighs the same whatever its length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from glasslab.posttrain.packing import IGNORE_INDEX
from glasslab.train.objectives import Autocast

ADV_EPS = 1e-4
NORMALISATIONS = ("token", "sequence")


def group_advantages(values: Sequence[float | None], group_size: int) -> tuple[list[float | None], int]:
    """(advantage of each sample (None: its reward failed), groups with no spread) for ``values`` laid
    out as consecutive groups of ``group_size``."""
    advantages: list[float | None] = []
    no_spread = 0
    for start in range(0, len(values), group_size):
        group = values[start : start + group_size]
        kept = torch.tensor([v for v in group if v is not None], dtype=torch.float64)
        spread = float(kept.std(unbiased=False)) if len(kept) > 1 else 0.0
        no_spread += spread == 0.0
        mean = float(kept.mean()) if len(kept) else 0.0
        advantages += [None if v is None else (v - mean) / (spread + ADV_EPS) if spread else 0.0 for v in group]
    return advantages, no_spread


@dataclass
class RolloutBatch:
    """Rollouts as rows ``prompt + completion``, right-padded: ``targets_BT`` holds the completion's tokens
    (``IGNORE_INDEX`` elsewhere, and everywhere in a row whose reward failed), ``real_BT`` marks the
    tokens that are not padding, ``advantages_B`` each row's advantage. ``loss_units`` is what the step's
    loss averages over (tokens or sequences); ``stats`` the rollouts' numbers for the step's metrics."""

    tokens_BT: torch.Tensor
    targets_BT: torch.Tensor
    real_BT: torch.Tensor
    advantages_B: torch.Tensor
    loss_units: int
    stats: dict[str, float] = field(default_factory=dict)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> RolloutBatch:
        move = [t.to(device, non_blocking=non_blocking) for t in (self.tokens_BT, self.targets_BT, self.real_BT,
                                                                     self.advantages_B)]
        return RolloutBatch(*move, self.loss_units, self.stats)

    def split(self, rows: int) -> list[RolloutBatch]:
        parts = zip(*(t.split(rows) for t in (self.tokens_BT, self.targets_BT, self.real_BT, self.advantages_B)),
                    strict=True)
        return [RolloutBatch(*p, self.loss_units, self.stats) for p in parts]

    def __len__(self) -> int:
        return self.tokens_BT.shape[0]


def collate_rollouts(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
                     advantages: Sequence[float | None], pad_id: int, normalise: str) -> RolloutBatch:
    """Rows of prompt + completion (inputs and shifted targets), padded to the longest."""
    rows = [list(p) + list(c) for p, c in zip(prompts, completions, strict=True)]
    width = max(len(r) for r in rows) - 1
    tokens = torch.full((len(rows), width), pad_id, dtype=torch.long)
    targets = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    real = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, (row, prompt, adv) in enumerate(zip(rows, prompts, advantages, strict=True)):
        tokens[i, : len(row) - 1] = torch.tensor(row[:-1])
        real[i, : len(row) - 1] = True
        if adv is not None:
            targets[i, len(prompt) - 1 : len(row) - 1] = torch.tensor(row[len(prompt):])
    kept_tokens = int((targets != IGNORE_INDEX).sum())
    kept_rows = int((targets != IGNORE_INDEX).any(dim=1).sum())
    units = kept_tokens if normalise == "token" else kept_rows
    adv_B = torch.tensor([0.0 if a is None else a for a in advantages], dtype=torch.float32)
    return RolloutBatch(tokens, targets, real, adv_B, max(units, 1))


def token_logps(logits_BTV: torch.Tensor, targets_BT: torch.Tensor) -> torch.Tensor:
    """(B, T) log-probability of each target (0 where it is ignored)."""
    logp_BTV = torch.log_softmax(logits_BTV.float(), dim=-1)
    picked_BT = logp_BTV.gather(-1, targets_BT.clamp_min(0)[..., None])[..., 0]
    return picked_BT.masked_fill(targets_BT == IGNORE_INDEX, 0.0)


class GRPO:
    """The GRPO objective for the trainer (:mod:`glasslab.train.objectives` is its contract): the clipped
    policy-gradient loss plus β·KL to the frozen ``reference``, summed over the batch's loss units."""

    def __init__(self, reference: nn.Module, kl_coef: float, clip_eps: float, normalise: str) -> None:
        self.reference = reference.eval().requires_grad_(False)
        self.kl_coef, self.clip_eps, self.normalise = kl_coef, clip_eps, normalise
        self._sums: dict[str, float] = {}

    def loss_tokens(self, batch: RolloutBatch) -> int:
        self._sums = {"kl": 0.0, "entropy": 0.0, "tokens": 0.0}
        return batch.loss_units

    def nats(self, net: nn.Module, micro: RolloutBatch, autocast: Autocast) -> torch.Tensor:
        with autocast():
            logits_BTV = net(micro.tokens_BT, real_BT=micro.real_BT)
        with torch.no_grad(), autocast():
            ref_BT = token_logps(self.reference(micro.tokens_BT, real_BT=micro.real_BT), micro.targets_BT)
        counted_BT = (micro.targets_BT != IGNORE_INDEX).float()
        logp_BT = token_logps(logits_BTV, micro.targets_BT)
        ratio_BT = torch.exp(logp_BT - logp_BT.detach())
        adv_B1 = micro.advantages_B[:, None]
        surrogate_BT = torch.minimum(ratio_BT * adv_B1, ratio_BT.clamp(1 - self.clip_eps, 1 + self.clip_eps) * adv_B1)
        log_ratio_BT = ref_BT - logp_BT
        kl_BT = torch.exp(log_ratio_BT) - log_ratio_BT - 1
        loss_BT = (-surrogate_BT + self.kl_coef * kl_BT) * counted_BT
        self._observe(logits_BTV, kl_BT, counted_BT)
        if self.normalise == "sequence":
            return (loss_BT.sum(dim=1) / counted_BT.sum(dim=1).clamp_min(1)).sum()
        return loss_BT.sum()

    @torch.no_grad()
    def _observe(self, logits_BTV: torch.Tensor, kl_BT: torch.Tensor, counted_BT: torch.Tensor) -> None:
        probs_BTV = torch.softmax(logits_BTV.float(), dim=-1)
        entropy_BT = -(probs_BTV * probs_BTV.clamp_min(1e-30).log()).sum(-1)
        self._sums["kl"] += float((kl_BT * counted_BT).sum())
        self._sums["entropy"] += float((entropy_BT * counted_BT).sum())
        self._sums["tokens"] += float(counted_BT.sum())

    def metrics(self, loss: float, batch: RolloutBatch) -> dict[str, float]:
        tokens = max(self._sums["tokens"], 1.0)
        return {"rl/loss": loss, "rl/kl": self._sums["kl"] / tokens, "rl/entropy": self._sums["entropy"] / tokens,
                **batch.stats}
