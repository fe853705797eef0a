"""Sampling with a KV cache: temperature, top-k, nucleus (top-p) and a seed, for one sequence or a batch.

The next-token distribution is the one ``transformers`` samples from with the same settings (its
temperature, top-k and top-p warpers, in that order), so a model and its export draw alike.

A batch of prompts of different lengths is left-padded to one width. The padding never changes what a
real token computes: each row's positions start at 0 at its first real token (RoPE sees the same
positions as unbatched), no query attends to a padding key (the caches carry each row's padding), and an
MoE routes only real tokens (padding is not dispatched, so it neither takes an expert's capacity nor
counts in routing statistics). Rows that have finished are marked as padding from then on, for the same
reason. So a batched greedy sample equals the unbatched one token for token.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence

import torch

from glasslab.model.transformer import Transformer


def next_token_probs(logits_V: torch.Tensor, temperature: float = 1.0, top_k: int = 0,
                     top_p: float = 1.0) -> torch.Tensor:
    """Probabilities (..., V) to sample the next token from, row by row: logits / temperature, then only
    the ``top_k`` most likely (0 = all), then the smallest set whose mass reaches ``top_p`` (always the
    top token)."""
    logits_V = logits_V.float() / temperature
    if 0 < top_k < logits_V.shape[-1]:
        kth = torch.topk(logits_V, top_k, dim=-1).values[..., -1:]
        logits_V = logits_V.masked_fill(logits_V < kth, float("-inf"))
    probs_V = torch.softmax(logits_V, dim=-1)
    if top_p < 1.0:
        sorted_V, order_V = probs_V.sort(dim=-1, descending=True)
        outside_V = sorted_V.cumsum(-1) - sorted_V >= top_p  # mass before a token already reaches top_p
        probs_V = torch.zeros_like(probs_V).scatter_(-1, order_V, sorted_V.masked_fill(outside_V, 0.0))
        probs_V = probs_V / probs_V.sum(-1, keepdim=True)
    return probs_V


def draw(logits_BV: torch.Tensor, temperature: float, top_k: int, top_p: float,
         generator: torch.Generator) -> torch.Tensor:
    """The next token id of each row (B,) from its logits (B, V): greedy at ``temperature <= 0``, else
    sampled from :func:`next_token_probs` with ``generator``."""
    if temperature <= 0:
        return logits_BV.argmax(dim=-1)
    return torch.multinomial(next_token_probs(logits_BV, temperature, top_k, top_p), 1, generator=generator)[:, 0]


def _stop_ids(eos_id: int | Collection[int] | None) -> list[int]:
    return [] if eos_id is None else [eos_id] if isinstance(eos_id, int) else list(eos_id)


@torch.no_grad()
def stream_batch(
    model: Transformer,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    eos_id: int | Collection[int] | None = None,
    top_k: int = 0,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield, for each new position, (the drawn ids (B,), which rows were still running (B,) bool).

    A row stops after an ``eos_id`` (that id is yielded as running); the stream ends when every row has
    stopped or after ``max_new_tokens``. ``generator`` (on the model's device) draws the samples; None:
    a fresh one seeded 0. The model runs in eval mode (no routing statistics are counted) and is put back
    in its previous mode when the stream ends or is closed.
    """
    if not prompts or not all(prompts):
        raise ValueError("generate: a prompt is empty; give at least one token (e.g. a BOS/EOT id)")
    was_training = model.training
    model.eval()
    device = model.embed.weight.device
    generator = generator or torch.Generator(device=device).manual_seed(0)
    width = max(len(p) for p in prompts)
    pad_B = torch.tensor([width - len(p) for p in prompts], device=device)
    tokens_BT = torch.tensor([[0] * (width - len(p)) + list(p) for p in prompts], device=device)
    real_BT = torch.arange(width, device=device)[None, :] >= pad_B[:, None]
    padded = bool(pad_B.any())
    caches = model.new_kv_caches(len(prompts), width + max_new_tokens, pad_B if padded else None)
    stop_S = torch.tensor(_stop_ids(eos_id), dtype=torch.long, device=device)
    running_B = torch.ones(len(prompts), dtype=torch.bool, device=device)
    try:
        for _ in range(max_new_tokens):
            logits_BV = model(tokens_BT, caches, real_BT=real_BT if padded else None)[:, -1]
            next_B = draw(logits_BV, temperature, top_k, top_p, generator)
            yield next_B, running_B.clone()
            running_B &= ~torch.isin(next_B, stop_S)
            if not running_B.any():
                break
            tokens_BT, real_BT = next_B[:, None], running_B[:, None]
            padded = padded or not bool(running_B.all())
    finally:
        model.train(was_training)


def generate_batch(
    model: Transformer,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    eos_id: int | Collection[int] | None = None,
    top_k: int = 0,
) -> list[list[int]]:
    """The new ids of each prompt (up to and including its ``eos_id``), drawn together: see
    :func:`stream_batch`."""
    columns = list(stream_batch(model, prompts, max_new_tokens, temperature, top_p, generator, eos_id, top_k))
    if not columns:
        return [[] for _ in prompts]
    ids_BN = torch.stack([ids for ids, _ in columns], dim=1).tolist()
    running_BN = torch.stack([running for _, running in columns], dim=1).tolist()
    return [[i for i, keep in zip(ids, running, strict=True) if keep] for ids, running in zip(ids_BN, running_BN,
                                                                                              strict=True)]


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
    """Yield up to ``max_new_tokens`` new token ids after ``prompt_ids``, one as soon as it is drawn
    (``temperature=0`` is greedy; stops after an ``eos_id``, which is yielded): :func:`stream_batch` of
    one prompt, drawn with a generator seeded ``seed``."""
    if not prompt_ids:
        raise ValueError("generate: prompt_ids is empty; give at least one token (e.g. a BOS/EOT id)")
    generator = torch.Generator(device=model.embed.weight.device).manual_seed(seed)
    for ids_B, _ in stream_batch(model, [prompt_ids], max_new_tokens, temperature, top_p, generator, eos_id, top_k):
        yield int(ids_B[0])


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
