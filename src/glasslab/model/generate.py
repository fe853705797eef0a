"""Sampling with a KV cache: temperature, nucleus (top-p) and a seed, one sequence at a time."""

from __future__ import annotations

import torch

from glasslab.model.transformer import Transformer


@torch.no_grad()
def generate(
    model: Transformer,
    prompt_ids: list[int],
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int = 0,
    eos_id: int | None = None,
) -> list[int]:
    """Sample up to ``max_new_tokens`` token ids after ``prompt_ids``; return only the new ids.

    ``temperature=0`` is greedy. Stops after ``eos_id`` (which is included). The model runs in eval
    mode (no routing statistics are counted) and is put back in its previous mode afterwards.
    """
    if not prompt_ids:
        raise ValueError("generate: prompt_ids is empty; give at least one token (e.g. a BOS/EOT id)")
    was_training = model.training
    model.eval()
    device = model.embed.weight.device
    generator = torch.Generator(device=device).manual_seed(seed)
    caches = model.new_kv_caches(1, len(prompt_ids) + max_new_tokens)
    tokens_BT = torch.tensor([prompt_ids], device=device)
    new_ids: list[int] = []
    try:
        for _ in range(max_new_tokens):
            logits_V = model(tokens_BT, caches)[0, -1]
            next_id = _sample(logits_V, temperature, top_p, generator)
            new_ids.append(next_id)
            if next_id == eos_id:
                break
            tokens_BT = torch.tensor([[next_id]], device=device)
    finally:
        model.train(was_training)
    return new_ids


def _sample(logits_V: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator) -> int:
    if temperature <= 0:
        return int(logits_V.argmax())
    probs_V = torch.softmax(logits_V / temperature, dim=-1)
    if top_p < 1.0:
        sorted_V, order_V = probs_V.sort(descending=True)
        # Keep the smallest prefix whose mass reaches top_p (always at least the top token).
        outside_V = sorted_V.cumsum(0) - sorted_V >= top_p
        sorted_V = sorted_V.masked_fill(outside_V, 0.0)
        probs_V = torch.zeros_like(probs_V).scatter_(0, order_V, sorted_V)
    return int(torch.multinomial(probs_V, 1, generator=generator))
