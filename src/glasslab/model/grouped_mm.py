"""Grouped matmul over expert-sorted rows, for every dtype and device, eager or under ``torch.compile``.

``torch._grouped_mm`` is the kernel (one launch on CUDA, one BLAS call per group on the CPU), but it is
private and evolving: its compile-time shape rule accepts only bf16 (torch 2.13), its CPU backward
rejects some gradient layouts, and older builds lack it. Wrapping it in two custom ops with our own
backward gives the compiler an opaque node of fixed shape — so nothing around the experts breaks the
graph and the elementwise work on either side fuses — and one place for the fallback loop.

Rows ``ends_E[e-1]:ends_E[e]`` of ``x_ND`` belong to group (expert) e; ``ends_E`` is the int32
cumulative count of rows per group (``torch._grouped_mm``'s ``offs``).
"""

from __future__ import annotations

import functools

import torch


@functools.cache
def kernel_runs(device_type: str, dtype: torch.dtype) -> bool:
    """Whether ``torch._grouped_mm`` runs the three layouts the experts need here (forward only: the
    backward is ours). Draws no random numbers, so it may run at any point of a resumed run."""
    if not hasattr(torch, "_grouped_mm"):
        return False
    x = torch.ones(32, 16, device=device_type, dtype=dtype)
    w = torch.ones(2, 16, 8, device=device_type, dtype=dtype)
    ends = torch.tensor([16, 32], device=device_type, dtype=torch.int32)
    try:
        with torch.no_grad():
            y = torch._grouped_mm(x, w, offs=ends)
            torch._grouped_mm(y, w.transpose(-2, -1), offs=ends)
            torch._grouped_mm(x.t(), y, offs=ends)
    except (RuntimeError, NotImplementedError, TypeError):
        return False
    return True


def _spans(ends_E: torch.Tensor) -> list[tuple[int, int]]:
    ends = ends_E.tolist()
    return list(zip([0, *ends[:-1]], ends, strict=True))


@torch.library.custom_op("glasslab::grouped_mm", mutates_args=())
def grouped_mm(x_ND: torch.Tensor, w_EDF: torch.Tensor, ends_E: torch.Tensor) -> torch.Tensor:
    """(N, F): each group's rows of ``x_ND`` (N, D) times that group's ``w_EDF[e]`` (D, F)."""
    if kernel_runs(x_ND.device.type, x_ND.dtype):
        return torch._grouped_mm(x_ND, w_EDF, offs=ends_E)
    out_NF = x_ND.new_empty(x_ND.shape[0], w_EDF.shape[-1])
    for e, (start, end) in enumerate(_spans(ends_E)):
        torch.mm(x_ND[start:end], w_EDF[e], out=out_NF[start:end])
    return out_NF


@grouped_mm.register_fake
def _(x_ND: torch.Tensor, w_EDF: torch.Tensor, ends_E: torch.Tensor) -> torch.Tensor:
    return x_ND.new_empty(x_ND.shape[0], w_EDF.shape[-1])


@torch.library.custom_op("glasslab::grouped_mm_weight_grad", mutates_args=())
def grouped_mm_weight_grad(x_ND: torch.Tensor, grad_NF: torch.Tensor, ends_E: torch.Tensor) -> torch.Tensor:
    """(E, D, F): per group, its rows of ``x_ND`` transposed times its rows of ``grad_NF`` (zero for a
    group without rows)."""
    if kernel_runs(x_ND.device.type, x_ND.dtype):
        return torch._grouped_mm(x_ND.t(), grad_NF, offs=ends_E)
    out_EDF = x_ND.new_zeros(ends_E.shape[0], x_ND.shape[1], grad_NF.shape[1])
    for e, (start, end) in enumerate(_spans(ends_E)):
        if end > start:
            torch.mm(x_ND[start:end].t(), grad_NF[start:end], out=out_EDF[e])
    return out_EDF


@grouped_mm_weight_grad.register_fake
def _(x_ND: torch.Tensor, grad_NF: torch.Tensor, ends_E: torch.Tensor) -> torch.Tensor:
    return x_ND.new_empty(ends_E.shape[0], x_ND.shape[1], grad_NF.shape[1])


def _setup_context(ctx, inputs, output) -> None:
    x_ND, w_EDF, ends_E = inputs
    ctx.save_for_backward(x_ND, w_EDF, ends_E)


def _backward(ctx, grad_NF: torch.Tensor):
    x_ND, w_EDF, ends_E = ctx.saved_tensors
    grad_NF = grad_NF.contiguous()  # the CUDA kernel needs a dense row-major gradient
    grad_x = grouped_mm(grad_NF, w_EDF.transpose(-2, -1), ends_E) if ctx.needs_input_grad[0] else None
    grad_w = grouped_mm_weight_grad(x_ND, grad_NF, ends_E) if ctx.needs_input_grad[1] else None
    return grad_x, grad_w, None


grouped_mm.register_autograd(_backward, setup_context=_setup_context)

# A custom op has no autocast rule of its own: under bf16 autocast it would receive the fp32
# activations and master weights, and the experts (most of an MoE's FLOPs) would run in fp32, through
# the per-group loop where the kernel takes bf16 only. The trainer autocasts to bf16 alone, so the
# rule casts to it; the cast's backward returns fp32 gradients to the weights.
for _device_type in ("cpu", "cuda"):
    grouped_mm.register_autocast(_device_type, torch.bfloat16)
