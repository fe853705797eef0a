"""Sampling with a KV cache: temperature, top-k, nucleus (top-p) and a seed, one sequence at a time.

The next-token distribution is the one ``transformers`` samples from with the same settings (its
temperature, top-k and top-p warpers, in that order), so a model and its export draw alike.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

import torch

from glasslab.model.transformer import Transformer


def next_token_probs(logits_V: torch.Tensor, temperature: float = 1.0, top_k: int = 0,
                     top_p: float = 1.0) -> torch.Tensor:
    """Probabilities (V,) to sample the next token from: logits / temperature, then only the ``top_k``
    most likely (0 = all), then the smallest set whose mass reaches ``top_p`` (always the top token)."""
    logits_V = logits_V.float() / temperature
    if 0 < top_k < logits_V.numel():
        kth = torch.topk(logits_V, top_k).values[-1]
        logits_V = logits_V.masked_fill(logits_V < kth, float("-inf"))
    probs_V = torch.softmax(logits_V, dim=-1)
    if top_p < 1.0:
        sorted_V, order_V = probs_V.sort(descending=True)
        outside_V = sorted_V.cumsum(0) - sorted_V >= top_p  # mass before a token already reaches top_p
        probs_V = torch.zeros_like(probs_V).scatter_(0, order_V, sorted_V.masked_fill(outside_V, 0.0))
        probs_V = probs_V / probs_V.sum()
    return probs_V


def draw(logits_V: torch.Tensor, temperature: float, top_k: int, top_p: float,
         generator: torch.Generator) -> int:
    """The next token id from one position's logits: greedy at ``temperature <= 0``, else sampled from
    :func:`next_token_probs` with ``generator``."""
    if temperature <= 0:
        return int(logits_V.argmax())
    return int(torch.multinomial(next_token_probs(logits_V, temperature, top_k, top_p), 1, generator=generator))


@torch.no_grad()
def stream(
    model: Transformer,
    prompt_ids: list[int],
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int = 0,
    eos_id: int | Collection[int] | None = None,
    top_k: int = 0,
) -> Iterator[int]:
    """Yield up to ``max_new_tokens`` new token ids after ``prompt_ids``, one as soon as it is drawn.

    ``temperature=0`` is greedy. Stops after an ``eos_id`` (which is yielded). The model runs in eval
    mode (no routing statistics are counted) and is put back in its previous mode when the stream ends
    or is closed.
    """
    if not prompt_ids:
        raise ValueError("generate: prompt_ids is empty; give at least one token (e.g. a BOS/EOT id)")
    stop = set() if eos_id is None else {eos_id} if isinstance(eos_id, int) else set(eos_id)
    was_training = model.training
    model.eval()
    device = model.embed.weight.device
    generator = torch.Generator(device=device).manual_seed(seed)
    caches = model.new_kv_caches(1, len(prompt_ids) + max_new_tokens)
    tokens_BT = torch.tensor([prompt_ids], device=device)
    try:
        for _ in range(max_new_tokens):
            next_id = draw(model(tokens_BT, caches)[0, -1], temperature, top_k, top_p, generator)
            yield next_id
            if next_id in stop:
                break
            tokens_BT = torch.tensor([[next_id]], device=device)
    finally:
        model.train(was_training)


def generate(
    model: Transformer,
    prompt_ids: list[int],
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int = 0,
    eos_id: int | Collection[int] | None = None,
    top_k: int = 0,
) -> list[int]:
    """The new token ids :func:`stream` yields, as one list (only the new ids, not the prompt)."""
    return list(stream(model, prompt_ids, max_new_tokens, temperature, top_p, seed, eos_id, top_k))
