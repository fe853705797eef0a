"""Gradient and parameter norms per parameter group (``embed``, ``attn``, ``mlp``, ``experts``...).

Norms are returned as one tensor so the loop converts them to Python floats with a single
``tolist()``: one device synchronisation per step however many groups there are.
"""

from __future__ import annotations

import torch
from torch import nn

from glasslab.train.distributed import full_value


def unique_groups(groups: dict[str, list[tuple[str, nn.Parameter]]]) -> dict[str, list[nn.Parameter]]:
    """Each trainable parameter under its first group only (a tied embedding is counted once)."""
    seen: set[int] = set()
    out: dict[str, list[nn.Parameter]] = {}
    for name, named in groups.items():
        params = [p for _, p in named if p.requires_grad and id(p) not in seen]
        seen.update(id(p) for p in params)
        if params:
            out[name] = params
    return out


def group_norms(tensors_by_group: dict[str, list[torch.Tensor]]) -> torch.Tensor:
    """L2 norm of each group's tensors followed by the total, as a 1-D tensor (groups in order)."""
    # Under FSDP2 the tensors are shards (DTensors) and each norm is reduced over ranks here.
    norms = [full_value(torch.nn.utils.get_total_norm(tensors, 2.0)) for tensors in tensors_by_group.values()]
    per_group = torch.stack(norms).float()
    return torch.cat([per_group, torch.linalg.vector_norm(per_group).reshape(1)])


def grads_by_group(params_by_group: dict[str, list[nn.Parameter]]) -> dict[str, list[torch.Tensor]]:
    """The gradients of each group (a parameter without one counts as zero)."""
    return {
        name: [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        for name, params in params_by_group.items()
    }


def named_norms(prefix: str, group_names: list[str], values: list[float]) -> dict[str, float]:
    """``{prefix/<group>: v, ..., prefix/total: v}`` from :func:`group_norms` output as floats."""
    metrics = {f"{prefix}/{name}": v for name, v in zip(group_names, values, strict=False)}
    metrics[f"{prefix}/total"] = values[-1]
    return metrics
