"""Chatting with a run's checkpoint: load the model and its tokenizer, keep the history, stream replies.

``glasslab chat`` is a thin terminal around :class:`ChatSession`. A reply is the continuation of the
whole conversation so far in the chat format, sampled until ``<|im_end|>`` (or ``<|endoftext|>``);
text streams out as soon as it decodes to whole characters. When the conversation grows past the
context the model was trained with, the oldest exchanges are dropped (the system message stays).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from glasslab import config as configs
from glasslab.data.chat import ChatEncoder
from glasslab.data.tokenizer import EOT, load_tokenizer
from glasslab.errors import UserError
from glasslab.layout import MODEL_STATE
from glasslab.model import Transformer
from glasslab.model.generate import stream
from glasslab.track import read_record
from glasslab.train.run_config import RunConfig
from glasslab.train.sft import resolve_base


@dataclass(frozen=True)
class Sampling:
    """How replies are drawn (``temperature=0``: greedy)."""

    temperature: float = 0.7
    top_k: int = 0
    top_p: float = 0.9
    max_new_tokens: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        configs.require(self.temperature >= 0, "--temperature", self.temperature, ">= 0")
        configs.require(self.top_k >= 0, "--top-k", self.top_k, ">= 0")
        configs.require(0 < self.top_p <= 1, "--top-p", self.top_p, "in (0, 1]")
        configs.require(self.max_new_tokens >= 1, "--max-new-tokens", self.max_new_tokens, ">= 1")


@dataclass
class ChatModel:
    """A checkpoint's model (eval mode) with its chat encoder, the context it was trained on, and its run."""

    model: Transformer
    encoder: ChatEncoder
    context: int
    run_dir: Path
    step: int
    role: str | None


def load_chat_model(ref: str, device: str = "cpu") -> ChatModel:
    """The model at ``RUN_DIR@STEP`` (or the newest intact checkpoint of ``RUN_DIR``)."""
    from glasslab.train.run import checkpoint_config

    run_dir, step, path = resolve_base(ref)
    run_cfg = configs.from_dict(RunConfig, checkpoint_config(path))
    model = Transformer(run_cfg.model)
    model.load_state_dict(torch.load(path / MODEL_STATE, map_location="cpu", weights_only=True))
    try:
        encoder = ChatEncoder(load_tokenizer(run_cfg.data.path))
    except ValueError as exc:  # a tokenizer without the chat tokens
        raise UserError(f"{run_dir}: {exc}") from None
    record = read_record(run_dir) or {}
    return ChatModel(model.to(device).eval(), encoder, run_cfg.train.seq_len, run_dir, step, record.get("role"))


class ChatSession:
    """One conversation with a :class:`ChatModel`: ``reply(text)`` streams the assistant's answer."""

    def __init__(self, chat: ChatModel, sampling: Sampling, system: str = "") -> None:
        self.chat, self.sampling, self.system = chat, sampling, system
        self.messages: list[dict[str, str]] = []
        self._stop = {chat.encoder.im_end_id, chat.encoder.tokenizer.token_to_id(EOT)}
        self._turn = 0

    def reset(self) -> None:
        """Forget the conversation (the system message stays)."""
        self.messages = []

    def prompt_ids(self, text: str) -> list[int]:
        """The ids the model continues for a reply to ``text``, oldest exchanges dropped to fit the context."""
        history = self.messages + [{"role": "user", "content": text}]
        while True:
            system = [{"role": "system", "content": self.system}] if self.system else []
            ids = self.chat.encoder.prompt_ids(system + history)
            if len(ids) + self.sampling.max_new_tokens <= self.chat.context or len(history) <= 1:
                return ids
            history = history[2:]

    def reply(self, text: str) -> Iterator[str]:
        """Stream the reply to the user's ``text`` as pieces of text; the exchange joins the history."""
        s = self.sampling
        ids: list[int] = []
        shown = ""
        tokens = stream(self.chat.model, self.prompt_ids(text), s.max_new_tokens, s.temperature, s.top_p,
                        seed=s.seed + self._turn, eos_id=self._stop, top_k=s.top_k)
        for token in tokens:
            if token in self._stop:
                break
            ids.append(token)
            decoded = self.chat.encoder.decode_reply(ids)
            if not decoded.endswith("\ufffd"):  # wait for the rest of a character split over tokens
                yield decoded[len(shown):]
                shown = decoded
        final = self.chat.encoder.decode_reply(ids)
        if final != shown:
            yield final[len(shown):]
        self._turn += 1
        self.messages += [{"role": "user", "content": text}, {"role": "assistant", "content": final}]
