"""The log-likelihood scorer: every choice's log-probability after its prompt → acc, acc_norm, task bpb.

Tokenization follows lm-eval-harness's ``_encode_pair`` so both score the same tokens:

- whitespace at the end of the prompt moves to the front of the continuation;
- ``context_ids = encode(prompt)`` and ``continuation_ids = encode(prompt + continuation)[len(context_ids):]``
  (the split of one encoding, so a merge across the boundary is scored as the tokenizer makes it);
- no BOS is added beyond what the tokenizer's own post-processor adds (glasslab's adds none); an
  empty prompt is replaced by the prefix token (``<|endoftext|>``, as lm-eval uses BOS or EOS).

Metrics, over items: ``acc`` — the choice with the highest log-likelihood is the answer (ties go to
the first, as ``numpy.argmax``); ``acc_norm`` — the same after dividing each log-likelihood by its
choice's length in characters (lm-eval's definition: the choice alone, without the delimiter);
``bpb`` — bits per UTF-8 byte of the right continuations, summed over items (−Σ log p / ln 2 / Σ
bytes): the task loss the ladder fits, as held-out bpb is the loss it fits.

Batching wastes no compute on repeated prompts or padding: items are grouped by prompt length, each
group's prompts run once through the model with a KV cache, the cache is repeated for the choices,
and only the continuations (right-padded to the longest in the batch) run again. Models without a
glasslab KV cache (a Hugging Face model) run prompt + continuation whole, sorted by length. The
grouping depends only on the items, so the same model gives the same numbers every time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from tokenizers import Tokenizer

from glasslab.evals.task import Task

BATCH_TOKENS = 8192
"""Tokens (prompts plus continuations) per forward pass."""


@dataclass(frozen=True)
class EncodedItem:
    """One item as token ids: the shared prompt and each choice's continuation."""

    context: tuple[int, ...]
    continuations: tuple[tuple[int, ...], ...]
    continuation_bytes: tuple[int, ...]
    """UTF-8 bytes of each scored continuation (delimiter and moved whitespace included)."""
    choice_chars: tuple[int, ...]
    """Characters of each bare choice (acc_norm's divisor)."""
    answer: int


@dataclass
class TaskResult:
    """A task's scores: accuracies in [0, 1], bpb in bits per byte, and each item's log-likelihoods."""

    name: str
    acc: float
    acc_norm: float
    bpb: float
    chance: float
    metric: str
    loglikelihoods: list[list[float]] = field(repr=False)
    """Nats, per item and choice."""

    @property
    def items(self) -> int:
        return len(self.loglikelihoods)

    @property
    def headline(self) -> float:
        """The task's headline accuracy (``acc`` or ``acc_norm`` as its config says)."""
        return self.acc_norm if self.metric == "acc_norm" else self.acc

    def metrics(self) -> dict[str, float]:
        """``eval/task/<name>/{acc,acc_norm,bpb}``."""
        prefix = f"eval/task/{self.name}"
        return {f"{prefix}/acc": self.acc, f"{prefix}/acc_norm": self.acc_norm, f"{prefix}/bpb": self.bpb}


def encode_task(task: Task, tokenizer: Tokenizer, prefix_id: int) -> list[EncodedItem]:
    """Token ids of every item's prompt and continuations, split as lm-eval splits them."""
    pairs: list[tuple[str, str]] = []
    for i in range(len(task.items)):
        prompt = task.prompt(i)
        for continuation in task.continuations(i):
            pairs.append(_move_trailing_space(prompt, continuation))
    wholes = tokenizer.encode_batch([c + x for c, x in pairs])
    contexts = tokenizer.encode_batch([c for c, _ in pairs])
    bare = tokenizer.encode_batch([x for _, x in pairs], add_special_tokens=False)
    encoded, k = [], 0
    for item in task.items:
        context_ids, conts, nbytes = None, [], []
        for choice in range(len(item.choices)):
            context, continuation = pairs[k]
            if context:
                ctx = contexts[k].ids
                cont = wholes[k].ids[len(ctx):]
            else:
                ctx, cont = [prefix_id], bare[k].ids
            if not cont:
                raise ValueError(f"task {task.name}: choice {choice} of an item encodes to no tokens")
            context_ids = context_ids or tuple(ctx)
            conts.append(tuple(cont))
            nbytes.append(len(continuation.encode("utf-8")))
            k += 1
        encoded.append(EncodedItem(context_ids, tuple(conts), tuple(nbytes),
                                   tuple(len(c) for c in item.choices), item.answer))
    return encoded


def _move_trailing_space(context: str, continuation: str) -> tuple[str, str]:
    stripped = context.rstrip()
    return stripped, context[len(stripped):] + continuation


def score_task(model: torch.nn.Module, task: Task, tokenizer: Tokenizer, *, prefix_id: int,
               device: torch.device | str = "cpu", batch_tokens: int = BATCH_TOKENS) -> TaskResult:
    """Score ``task`` on ``model`` (glasslab ``Transformer`` or a ``transformers`` causal LM).

    ``prefix_id`` stands in for an empty prompt. The model is put in eval mode and back; the caller
    chooses precision (autocast) and gradients are off.
    """
    encoded = encode_task(task, tokenizer, prefix_id)
    loglik = loglikelihoods(model, encoded, device=torch.device(device), batch_tokens=batch_tokens)
    return summarize(task, encoded, loglik)


def summarize(task: Task, encoded: Sequence[EncodedItem], loglik: list[list[float]]) -> TaskResult:
    """acc, acc_norm and bpb from per-item, per-choice log-likelihoods (nats)."""
    hits = hits_norm = 0
    nats = nbytes = 0.0
    for item, lls in zip(encoded, loglik, strict=True):
        lls_C = np.asarray(lls)
        hits += int(np.argmax(lls_C)) == item.answer
        hits_norm += int(np.argmax(lls_C / np.asarray(item.choice_chars, dtype=float))) == item.answer
        nats -= lls[item.answer]
        nbytes += item.continuation_bytes[item.answer]
    n = len(encoded)
    return TaskResult(task.name, hits / n, hits_norm / n, nats / math.log(2) / nbytes, task.chance, task.metric,
                      loglik)


@torch.no_grad()
def loglikelihoods(model: torch.nn.Module, encoded: Sequence[EncodedItem], *, device: torch.device,
                   batch_tokens: int = BATCH_TOKENS) -> list[list[float]]:
    """Log-likelihood (nats) of every continuation of every item, in item and choice order."""
    was_training = model.training
    model.eval()
    score_batch = _cached_batch if hasattr(model, "new_kv_caches") else _whole_batch
    out: list[list[float] | None] = [None] * len(encoded)
    try:
        for batch in _batches(encoded, batch_tokens):
            sums = score_batch(model, [encoded[i] for i in batch], device)
            for i, lls in zip(batch, sums, strict=True):
                out[i] = lls
    finally:
        model.train(was_training)
    return out  # type: ignore[return-value]


def _batches(encoded: Sequence[EncodedItem], batch_tokens: int) -> list[list[int]]:
    """Item indices in batches of equal prompt length, each within ``batch_tokens`` counted with padding.

    Items are sorted by prompt length, then by their longest continuation, so a batch pads its
    continuations to a length close to all of theirs; the order depends only on the items.
    """
    def longest(i: int) -> int:
        return max(len(c) for c in encoded[i].continuations)

    order = sorted(range(len(encoded)), key=lambda i: (len(encoded[i].context), longest(i), i))
    batches: list[list[int]] = []
    rows = width = 0
    for i in order:
        item = encoded[i]
        new_rows, new_width = rows + len(item.continuations), max(width, longest(i))
        same_length = batches and len(encoded[batches[-1][0]].context) == len(item.context)
        # Cost: the prompts once each, and every continuation row padded to the batch's longest.
        cost = (len(batches[-1]) + 1) * len(item.context) + new_rows * new_width if same_length else 0
        if same_length and cost <= batch_tokens:
            batches[-1].append(i)
            rows, width = new_rows, new_width
        else:
            batches.append([i])
            rows, width = len(item.continuations), longest(i)
    return batches


def _padded(rows: Sequence[Sequence[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (N, T) and lengths (N,): a causal model's outputs before the padding are exact."""
    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    for n, row in enumerate(rows):
        ids[n, : len(row)] = torch.tensor(row, dtype=torch.long)
    return ids.to(device), torch.tensor([len(r) for r in rows], device=device)


def _token_logprob_sums(logits_NKV: torch.Tensor, targets_NK: torch.Tensor, lengths_N: torch.Tensor) -> list[float]:
    """Σ log p(target) over each row's first ``length`` positions (float32)."""
    logprobs_NK = torch.log_softmax(logits_NKV.float(), dim=-1).gather(-1, targets_NK[..., None])[..., 0]
    valid_NK = torch.arange(targets_NK.shape[1], device=targets_NK.device)[None, :] < lengths_N[:, None]
    return (logprobs_NK * valid_NK).sum(dim=1).tolist()


def _regroup(sums: list[float], items: Sequence[EncodedItem]) -> list[list[float]]:
    out, k = [], 0
    for item in items:
        out.append(sums[k : k + len(item.continuations)])
        k += len(item.continuations)
    return out


def _cached_batch(model, items: Sequence[EncodedItem], device: torch.device) -> list[list[float]]:
    """Prompts once with a KV cache (all of one length), then every continuation after its repeated cache."""
    context_BT = torch.tensor([item.context for item in items], dtype=torch.long, device=device)
    conts = [c for item in items for c in item.continuations]
    rows_N = torch.tensor([b for b, item in enumerate(items) for _ in item.continuations], device=device)
    targets_NK, lengths_N = _padded(conts, device)
    prompt_len, cont_len = context_BT.shape[1], targets_NK.shape[1]
    caches = model.new_kv_caches(len(items), prompt_len)
    last_BV = model(context_BT, caches)[:, -1]
    logits_NKV = last_BV[rows_N][:, None]
    if cont_len > 1:
        # The last continuation token predicts nothing scored, so it is not fed.
        expanded = model.new_kv_caches(len(conts), prompt_len + cont_len - 1)
        for src, dst in zip(caches, expanded, strict=True):
            dst.append(src.k_BKSD[rows_N], src.v_BKSD[rows_N])
        logits_NKV = torch.cat([logits_NKV, model(targets_NK[:, :-1], expanded)], dim=1)
    return _regroup(_token_logprob_sums(logits_NKV, targets_NK, lengths_N), items)


def _whole_batch(model, items: Sequence[EncodedItem], device: torch.device) -> list[list[float]]:
    """Prompt + continuation as one right-padded sequence per choice (any causal LM)."""
    prompt_len = len(items[0].context)
    conts = [c for item in items for c in item.continuations]
    whole = [item.context + c[:-1] for item in items for c in item.continuations]
    ids_NT, _ = _padded(whole, device)
    targets_NK, lengths_N = _padded(conts, device)
    logits_NTV = _logits(model, ids_NT)
    logits_NKV = logits_NTV[:, prompt_len - 1 : prompt_len - 1 + targets_NK.shape[1]]
    return _regroup(_token_logprob_sums(logits_NKV, targets_NK, lengths_N), items)


def _logits(model, ids_NT: torch.Tensor) -> torch.Tensor:
    out = model(ids_NT)
    return out if isinstance(out, torch.Tensor) else out.logits

