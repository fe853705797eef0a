"""Generations from fixed prompts at intervals, so a viewer can read what the model has learned.

Sampling draws random numbers from its own seeded generator state inside ``fork_rng``, so taking a
sample never shifts the training RNG streams (resume and a run without samples stay identical).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from glasslab.train.callbacks import EARLY, AtIntervals

GenerateFn = Callable[..., list[int]]
"""``glasslab.model.generate``: (model, prompt ids, max new tokens, ...) -> the new ids only."""


def encode(tokenizer, text: str) -> list[int]:
    """Token ids of ``text`` from an HF ``tokenizers.Tokenizer`` or a ``transformers`` tokenizer."""
    encoded = tokenizer.encode(text)
    return list(getattr(encoded, "ids", encoded))


def take_samples(
    model: nn.Module, tokenizer, prompts: Sequence[str], max_new_tokens: int, seed: int,
    generate: GenerateFn, eos_id: int | None = None,
) -> list[tuple[str, str]]:
    """(prompt, generated continuation) for each prompt, sampled at temperature 0.8, top-p 0.95."""
    was_training = model.training
    model.eval()
    out = []
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            for i, prompt in enumerate(prompts):
                prompt_ids = encode(tokenizer, prompt)
                new_ids = generate(model, prompt_ids, max_new_tokens, temperature=0.8, top_p=0.95,
                                   seed=seed + i, eos_id=eos_id)
                out.append((prompt, tokenizer.decode(new_ids)))
    finally:
        model.train(was_training)
    return out


class Sampler(AtIntervals):
    """The trainer's samples as a callback: ``sample(model, step) -> [(prompt, text)]`` every
    ``sample_interval`` steps and at the end (after the evaluation), stored in the run."""

    priority = EARLY  # constructed after the Evaluator, so called after it

    def __init__(self, sample: Callable[[nn.Module, int], list[tuple[str, str]]], sample_interval: int) -> None:
        super().__init__(sample_interval)
        self.sample = sample

    def work(self, trainer: Any) -> None:
        samples = self.sample(trainer.model, trainer.step)  # every rank: FSDP2 forwards are collective
        for prompt, text in samples if trainer.run is not None else ():
            trainer.run.sample(trainer.step, prompt, text)
