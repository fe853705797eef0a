"""Chatting with a run's checkpoint or an export: load the model and its tokenizer, keep the history,
stream replies.

``glasslab chat`` is a thin terminal around :class:`ChatSession`, and the chat panel of ``glasslab serve``
(``observatory/chat.py``) streams the same replies to the page. Either model — a checkpoint, or an export
(``glasslab export``) mapped back to our weights — runs as our own :class:`~glasslab.model.Transformer` with
its KV cache (:func:`~glasslab.model.generate.stream`).

A reply is the continuation of the whole conversation so far in the chat format, sampled until
``<|im_end|>`` (or ``<|endoftext|>``); text streams out as soon as it decodes to whole characters.
When the conversation grows past the context the model was trained with, the oldest exchanges are
dropped (the system message stays).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from glasslab import config as configs
from glasslab.data.chat import ChatEncoder
from glasslab.data.handle import dataset_trained_on
from glasslab.data.tokenizer import EOT
from glasslab.layout import EXPORT_MANIFEST, RUN_RECORD, read_json
from glasslab.model import Transformer
from glasslab.model.generate import stream
from glasslab.model.load import find_model, load_model
from glasslab.posttrain.base import chat_encoder


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


TokenStream = Callable[[list[int], int, float, float, int, set[int], int], Iterator[int]]
"""``(prompt_ids, max_new_tokens, temperature, top_p, seed, stop_ids, top_k)`` -> new token ids as drawn."""


@dataclass
class ChatModel:
    """A model to chat with: how it draws tokens, its chat encoder, the context it was trained on, and what it
    is (``name``: ``RUN@STEP`` or the export's folder name, ``step``, ``role`` of its run, the ``dataset`` it
    was trained on when that is at hand: ``glasslab chat --trace`` traces replies to it)."""

    tokens: TokenStream
    encoder: ChatEncoder
    context: int
    name: str
    step: int
    role: str | None
    model: Transformer
    dataset: Path | None = None


def load_chat_model(ref: str, lab: str | Path | None = None, device: str = "cpu") -> ChatModel:
    """The model ``ref`` names (``RUN[@STEP]`` — a run id under ``lab`` or a folder — or an export), on ``device``."""
    source = find_model(ref, lab)
    encoder = chat_encoder(source.tokenizer, source.folder)
    model = load_model(source, device)

    def tokens(prompt, max_new, temperature, top_p, seed, stop, top_k):
        return stream(model, prompt, max_new, temperature, top_p, seed=seed, eos_id=stop, top_k=top_k)

    return ChatModel(tokens, encoder, source.context, source.name, source.step, _role(source.folder, source.run),
                     model, dataset_trained_on(source))


def _role(folder: Path, run: str) -> str | None:
    """The role of the run behind ``folder`` (its run.json; an export's manifest, or its run beside it)."""
    record = read_json(folder / RUN_RECORD)
    if record is None:
        manifest = read_json(folder / EXPORT_MANIFEST) or {}
        if manifest.get("role"):
            return manifest["role"]
        record = read_json(folder.resolve().parent / run / RUN_RECORD) if run else None
    return (record or {}).get("role")


class ChatSession:
    """One conversation with a :class:`ChatModel`: ``reply(text)`` streams the assistant's answer."""

    def __init__(self, chat: ChatModel, sampling: Sampling, system: str = "",
                 messages: list[dict[str, str]] | None = None) -> None:
        self.chat, self.sampling, self.system = chat, sampling, system
        self.messages: list[dict[str, str]] = list(messages or [])
        """The exchanges so far (user, assistant, …): a page that keeps the history hands it back each time."""
        self._stop = {chat.encoder.im_end_id, chat.encoder.tokenizer.token_to_id(EOT)}
        self._turn = len(self.messages) // 2  # each reply draws with the seed of its turn
        self.last_reply_tokens = 0
        """Tokens the last reply drew (its end-of-turn token not counted)."""

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
        tokens = self.chat.tokens(self.prompt_ids(text), s.max_new_tokens, s.temperature, s.top_p,
                                  s.seed + self._turn, self._stop, s.top_k)
        for token in tokens:
            if token in self._stop:
                break
            ids.append(token)
            decoded = self.chat.encoder.decode_reply(ids)
            if not decoded.endswith("\ufffd"):  # wait for the rest of a character split over tokens
                yield decoded[len(shown):]
                shown = decoded
        self.last_reply_tokens = len(ids)
        final = self.chat.encoder.decode_reply(ids)
        if final != shown:
            yield final[len(shown):]
        self._turn += 1
        self.messages += [{"role": "user", "content": text}, {"role": "assistant", "content": final}]
