"""Optimiser groups from the model's parameter groups: who decays, who gets Muon, one learning rate knob.

Rules: norms, biases (anything 1-D) and embeddings never decay; every other matrix does. With
``optimizer.name = "muon"``, the hidden matrices (``attn``, ``mlp``, ``experts``) go to Muon and
everything else stays on AdamW. Each torch param group remembers its peak ``base_lr`` so the schedule
sets ``lr = base_lr × multiplier`` every step without keeping state of its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import nn

from glasslab.train.config import OptimizerConfig
from glasslab.train.muon import Muon

NO_DECAY_GROUPS = frozenset({"embed", "norm"})
MUON_GROUPS = frozenset({"attn", "mlp", "experts"})


class OptimizerSet:
    """One or two torch optimisers stepped together, with a shared learning-rate multiplier."""

    def __init__(self, optimizers: list[torch.optim.Optimizer]) -> None:
        self.optimizers = optimizers

    @property
    def param_groups(self) -> list[dict]:
        return [g for opt in self.optimizers for g in opt.param_groups]

    def set_lr_multiplier(self, multiplier: float) -> None:
        for group in self.param_groups:
            group["lr"] = group["base_lr"] * multiplier

    def step(self) -> None:
        for opt in self.optimizers:
            opt.step()

    def zero_grad(self) -> None:
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)

    def state_dict(self, get_one: Callable[[torch.optim.Optimizer], dict] | None = None) -> list[dict]:
        """Each optimiser's state dict (``get_one(opt)`` gathers a sharded one)."""
        return [get_one(opt) if get_one else opt.state_dict() for opt in self.optimizers]

    def load_state_dict(self, states: list[dict],
                        load_one: Callable[[torch.optim.Optimizer, dict], None] | None = None) -> None:
        """Load moments and step counts; hyper-parameters stay those of the current config (a fork may change them)."""
        with self.kept_hyperparameters():
            for opt, state in zip(self.optimizers, states, strict=True):
                if load_one:
                    load_one(opt, state)
                else:
                    opt.load_state_dict(state)

    @contextlib.contextmanager
    def kept_hyperparameters(self) -> Iterator[None]:
        """Around a load of moments and step counts by other means (a sharded checkpoint): the
        hyper-parameters of the current config come back afterwards."""
        hyper = [[{k: v for k, v in group.items() if k != "params"} for group in opt.param_groups]
                 for opt in self.optimizers]
        yield
        for opt, groups in zip(self.optimizers, hyper, strict=True):
            for group, kept in zip(opt.param_groups, groups, strict=True):
                group.update(kept)


def split_params(
    groups: dict[str, list[tuple[str, nn.Parameter]]], use_muon: bool,
) -> dict[str, list[nn.Parameter]]:
    """Partition trainable parameters into ``adamw_decay``, ``adamw_no_decay`` and ``muon``.

    A parameter listed in two groups (a tied embedding and LM head) is placed once, by its first group.
    """
    placed: set[int] = set()
    parts: dict[str, list[nn.Parameter]] = {"adamw_decay": [], "adamw_no_decay": [], "muon": []}
    for group_name, named in groups.items():
        for _, param in named:
            if id(param) in placed or not param.requires_grad:
                continue
            placed.add(id(param))
            if group_name in NO_DECAY_GROUPS or param.ndim < 2:
                parts["adamw_no_decay"].append(param)
            elif use_muon and group_name in MUON_GROUPS:
                parts["muon"].append(param)
            else:
                parts["adamw_decay"].append(param)
    return parts


def build_optimizer(
    cfg: OptimizerConfig, groups: dict[str, list[tuple[str, nn.Parameter]]], fused: bool = False,
) -> OptimizerSet:
    """The optimiser set for a model's ``param_groups()`` (see the module docstring for the rules)."""
    parts = split_params(groups, use_muon=cfg.name == "muon")
    adamw_groups = [
        {"params": parts["adamw_decay"], "weight_decay": cfg.weight_decay, "base_lr": cfg.lr, "label": "decay"},
        {"params": parts["adamw_no_decay"], "weight_decay": 0.0, "base_lr": cfg.lr, "label": "no_decay"},
    ]
    adamw_groups = [g for g in adamw_groups if g["params"]]
    optimizers: list[torch.optim.Optimizer] = []
    if adamw_groups:
        optimizers.append(torch.optim.AdamW(adamw_groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, fused=fused or None))
    if parts["muon"]:
        optimizers.append(Muon(
            [{"params": parts["muon"], "base_lr": cfg.muon_lr, "label": "muon"}], lr=cfg.muon_lr,
            momentum=cfg.muon_momentum, ns_steps=cfg.muon_ns_steps, weight_decay=cfg.weight_decay,
        ))
    return OptimizerSet(optimizers)
