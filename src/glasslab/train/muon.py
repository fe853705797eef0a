"""Muon: momentum SGD whose update for each weight matrix is replaced by its nearest orthogonal matrix.

The orthogonalisation is a quintic Newton–Schulz iteration that pushes every singular value of the
(momentum) update towards 1, so each hidden matrix moves by a step of fixed spectral size whatever
its gradient's conditioning. Tensors with more than two dimensions (stacked experts ``E×D×F``) are
treated as a batch of matrices over their leading dimensions. Embeddings, the LM head, norms and
biases are not matrices in this sense and stay on AdamW (see :mod:`glasslab.train.optim`).
"""

from __future__ import annotations

import torch

# Coefficients of the quintic iteration x ← a·x + b·x³ + c·x⁵ (applied to singular values); chosen
# so that values in (0, 1] reach roughly [0.7, 1.2] within five iterations.
NS_COEFFS = (3.4445, -4.7750, 2.0315)


def orthogonalize(update: torch.Tensor, steps: int) -> torch.Tensor:
    """Approximate ``U Vᵀ`` of ``update = U S Vᵀ`` over the last two dimensions."""
    a, b, c = NS_COEFFS
    x = update.to(torch.bfloat16 if update.is_cuda else torch.float32)
    transposed = x.size(-2) > x.size(-1)
    if transposed:  # iterate on the wide orientation: the Gram matrix is then the smaller one
        x = x.mT
    x = x / (torch.linalg.matrix_norm(x, keepdim=True) + 1e-7)
    for _ in range(steps):
        gram = x @ x.mT
        x = a * x + (b * gram + c * gram @ gram) @ x
    if transposed:
        x = x.mT
    return x.to(update.dtype)


class Muon(torch.optim.Optimizer):
    """Muon for matrices: Nesterov momentum, Newton–Schulz orthogonalisation, decoupled weight decay."""

    def __init__(self, params, lr: float, momentum: float = 0.95, ns_steps: int = 5,
                 weight_decay: float = 0.0) -> None:
        super().__init__(params, {"lr": lr, "momentum": momentum, "ns_steps": ns_steps,
                                  "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):  # noqa: D102 (torch's signature)
        for group in self.param_groups:
            lr, momentum, wd = group["lr"], group["momentum"], group["weight_decay"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(param.grad)
                buffer = state["momentum_buffer"]
                buffer.lerp_(param.grad, 1 - momentum)
                nesterov = param.grad.lerp(buffer, momentum)
                update = orthogonalize(nesterov, group["ns_steps"])
                # Orthogonal updates have RMS ~ 1/sqrt(max dim); scale tall matrices up to match.
                scale = max(1.0, param.size(-2) / param.size(-1)) ** 0.5
                if wd:
                    param.mul_(1 - lr * wd)
                param.add_(update, alpha=-lr * scale)
        return None
