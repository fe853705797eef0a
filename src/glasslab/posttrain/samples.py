"""A post-trained model's samples: its replies to fixed user messages, recorded as chat turns.

A sample's prompt and text are each a conversation ``[{"role", "content"}]`` in JSON (:func:`chat_turns`),
the form the run page draws as chat turns; :func:`turn_text` reads one back. The base model's replies to
the same prompts are recorded in ``run.json`` before step 0, so the page and the demo's table show a reply
before and after.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from torch import nn

from glasslab.data.chat import ChatEncoder
from glasslab.model import generate
from glasslab.train.config import TrainConfig
from glasslab.train.samples import take_samples

CHAT_PROMPTS = (
    "What does `json.dumps` do?",
    "Explain `assert` in Python.",
    "Write a Python function `clamp(x, low, high)`: Return x limited to the range [low, high].",
)
"""User messages the samples reply to (the base model's replies are recorded beside them)."""


def chat_turns(role: str, content: str) -> str:
    """A sample's prompt or text as a conversation, ``[{"role", "content"}]`` in JSON."""
    return json.dumps([{"role": role, "content": content}], ensure_ascii=False)


def turn_text(sample_text: str) -> str:
    """The content of a sample written by :func:`chat_turns` (the text itself for a plain sample)."""
    try:
        turns = json.loads(sample_text)
    except ValueError:
        return sample_text
    return turns[-1]["content"] if isinstance(turns, list) and turns else sample_text


class _ChatPrompts:
    """Lets ``take_samples`` pose each prompt as a user message and read back the assistant's reply."""

    def __init__(self, encoder: ChatEncoder) -> None:
        self.encoder = encoder

    def encode(self, text: str) -> list[int]:
        return self.encoder.prompt_ids([{"role": "user", "content": text}])

    def decode(self, ids: list[int]) -> str:
        return self.encoder.decode_reply(ids)


def chat_sampler(cfg: TrainConfig, encoder: ChatEncoder) -> Callable[[nn.Module, int], list[tuple[str, str]]] | None:
    """``sample(model, step)``: replies to ``cfg.sample_prompts`` posed as user messages (None without any)."""
    if not (cfg.sample_prompts and cfg.sample_max_new_tokens):
        return None
    prompts = _ChatPrompts(encoder)

    def sample(model: nn.Module, step: int) -> list[tuple[str, str]]:
        replies = take_samples(model, prompts, cfg.sample_prompts, cfg.sample_max_new_tokens, seed=cfg.seed + step,
                               generate=generate, eos_id=encoder.im_end_id)
        return [(chat_turns("user", prompt), chat_turns("assistant", reply)) for prompt, reply in replies]

    return sample
