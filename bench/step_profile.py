"""Where a training step spends its time, by part of the model, from torch.profiler's events.

An op's name alone does not say whose it is: ``aten::mm`` is an expert, an attention projection or the
LM head, ``aten::mul`` a norm, RoPE, SwiGLU or a gate. So while profiling, the modules and functions of
each part run inside a ``record_function`` scope (``part:<scope>``, from :func:`scoped`); a forward op
belongs to its innermost scope, and a backward op to the scope of the forward op that made its autograd
node (the two share a sequence number, as torch's own backward stack traces are found). The op's name
then splits a scope where it must (its matmuls from its elementwise work) and names what has no scope
(attention's kernel, the loss, the optimiser's ops under ``Optimizer.step``).

Used by ``bench/model_bench.py --profile`` for our MoE and transformers' Qwen3-MoE alike.
"""

from __future__ import annotations

import contextlib
import functools
from collections import defaultdict
from collections.abc import Callable, Iterator

import torch
from torch import nn

PARTS = ("expert matmuls", "other matmuls (attention projections, LM head)", "attention (SDPA kernel)",
         "attention RoPE + layout", "dispatch + combine (sort, gather, scatter, index)",
         "router + softmax + top-k + statistics", "expert SwiGLU (silu, mul)", "norms", "loss (log-softmax, NLL)",
         "optimizer", "other (embedding, residual, autograd)")
"""The rows of the table, in order."""

MATMULS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_grouped_mm", "aten::matmul",
           "aten::linear"}
_SCOPE_PART = {"router": PARTS[5], "dispatch": PARTS[4], "experts": PARTS[6], "swiglu": PARTS[6],
               "attention": PARTS[3], "norm": PARTS[7], "loss": PARTS[8]}
_BACKWARD_FUNCTION = 1  # torch.profiler's RecordScope of an autograd node's call


def part_of(op: str, scope: str | None) -> str:
    """The part (one of :data:`PARTS`) an op named ``op`` run in ``scope`` (or none) is counted in."""
    if scope == "optimizer":
        return PARTS[9]
    if op == "aten::_grouped_mm":  # both models run their experts, and only them, through it
        return PARTS[0]
    if op in MATMULS:
        return {"experts": PARTS[0], "router": PARTS[5]}.get(scope, PARTS[1])
    if "attention" in op:
        return PARTS[2]
    if "rms_norm" in op:
        return PARTS[7]
    if any(name in op for name in ("log_softmax", "nll_loss", "cross_entropy")):
        return PARTS[8]
    return _SCOPE_PART.get(scope, PARTS[10])


def _forward_scope(event) -> str | None:
    while event is not None:
        if event.name.startswith("part:"):
            return event.name.removeprefix("part:")
        if event.name.startswith("Optimizer."):
            return "optimizer"
        event = event.cpu_parent
    return None


def _backward_node(event):
    while event is not None and event.scope != _BACKWARD_FUNCTION:
        event = event.cpu_parent
    return event


def seconds_by_part(events) -> dict[str, float]:
    """Self CPU seconds of ``events`` (a profile's ``events()``) summed per part."""
    scope_of_node: dict[tuple[int, int], str | None] = {}
    for event in events:
        if _backward_node(event) is None and event.sequence_nr >= 0:
            scope_of_node.setdefault((event.sequence_nr, event.thread), _forward_scope(event))
    seconds: dict[str, float] = defaultdict(float)
    for event in events:
        node = _backward_node(event)
        scope = (_forward_scope(event) if node is None
                 else scope_of_node.get((node.sequence_nr, node.fwd_thread)))
        seconds[part_of(event.name, scope)] += event.self_cpu_time_total / 1e6
    return seconds


def part_table(parts: dict[str, list[dict[str, float]]]) -> list[str]:
    """A markdown table of ``parts`` (per side, one :func:`seconds_by_part` per profile): per part and side,
    the median milliseconds per step over the profiles and the median share of the step with its spread."""
    lines = ["| part | " + " | ".join(f"{side} ms | {side} share" for side in parts) + " |",
             "|---|" + "---:|---:|" * len(parts)]
    for part in (*PARTS, "total"):
        cells = []
        for profiles in parts.values():
            seconds = [sum(p.values()) if part == "total" else p.get(part, 0.0) for p in profiles]
            shares = sorted(s / sum(p.values()) for s, p in zip(seconds, profiles, strict=True))
            cells.append(f"{1e3 * sorted(seconds)[len(seconds) // 2]:.1f} | {shares[len(shares) // 2]:.1%} "
                         f"({shares[0]:.1%}–{shares[-1]:.1%})")
        lines.append(f"| {part} | " + " | ".join(cells) + " |")
    return lines


def _scope_functions(fn: Callable, scope: str) -> Callable:
    @functools.wraps(fn)
    def scoped_fn(*args, **kwargs):
        with torch.profiler.record_function(f"part:{scope}"):
            return fn(*args, **kwargs)
    return scoped_fn


@contextlib.contextmanager
def scoped(module_scopes: dict[str, str], function_scopes: list[tuple[object, str, str]]) -> Iterator[None]:
    """Within it, every module whose class is named in ``module_scopes`` runs its forward in that scope,
    and each ``(owner, attribute, scope)`` of ``function_scopes`` (a function or method looked up on
    ``owner`` when called) runs in its scope; all undone on exit."""
    entered: list[torch.profiler.record_function] = []

    def enter(module: nn.Module, _args) -> None:
        if type(module).__name__ in module_scopes:
            scope = module_scopes[type(module).__name__]
            entered.append(torch.profiler.record_function(f"part:{scope}").__enter__())

    def leave(module: nn.Module, _args, _out) -> None:
        if type(module).__name__ in module_scopes:
            entered.pop().__exit__(None, None, None)

    handles = [nn.modules.module.register_module_forward_pre_hook(enter),
               nn.modules.module.register_module_forward_hook(leave)]
    originals = []
    for owner, name, scope in function_scopes:
        originals.append((owner, name, getattr(owner, name)))
        setattr(owner, name, _scope_functions(getattr(owner, name), scope))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        for owner, name, original in reversed(originals):
            setattr(owner, name, original)
