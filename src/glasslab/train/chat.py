"""Chatting with a run's checkpoint or an export: load the model and its tokenizer, keep the history,
stream replies.

``glasslab chat`` is a thin terminal around :class:`ChatSession`. A checkpoint runs as our own
:class:`~glasslab.model.Transformer`; an export folder (``glasslab export``) runs as what it is, a
``transformers`` model, through the same sampler (:func:`~glasslab.model.generate.draw`).

A reply is the continuation of the whole conversation so far in the chat format, sampled until
``<|im_end|>`` (or ``<|endoftext|>``); text streams out as soon as it decodes to whole characters.
When the conversation grows past the context the model was trained with, the oldest exchanges are
dropped (the system message stays).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from glasslab import config as configs
from glasslab.data.chat import ChatEncoder
from glasslab.data.tokenizer import EOT, load_tokenizer
from glasslab.errors import UserError
from glasslab.layout import EXPORT_MANIFEST, read_json
from glasslab.model import Transformer
from glasslab.model.generate import draw, stream
from glasslab.track import read_record
from glasslab.train import checkpoint as ckpt
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


TokenStream = Callable[[list[int], int, float, float, int, set[int], int], Iterator[int]]
"""``(prompt_ids, max_new_tokens, temperature, top_p, seed, stop_ids, top_k)`` -> new token ids as drawn."""


@dataclass
class ChatModel:
    """A model to chat with: how it draws tokens, its chat encoder, the context it was trained on, and what it
    is (``name``: run id or export folder name, ``step``, ``role`` of its run)."""

    tokens: TokenStream
    encoder: ChatEncoder
    context: int
    name: str
    step: int
    role: str | None
    model: Transformer | None = None
    """Our model when chatting with a checkpoint (None for an export)."""


def load_chat_model(ref: str, device: str = "cpu") -> ChatModel:
    """The model at ``RUN_DIR@STEP`` (or the newest intact checkpoint of ``RUN_DIR``)."""
    run_dir, step, path = resolve_base(ref)
    run_cfg = configs.from_dict(RunConfig, ckpt.checkpoint_config(path))
    model = Transformer(run_cfg.model)
    ckpt.load_model_weights(model, path)
    model = model.to(device).eval()
    record = read_record(run_dir) or {}

    def tokens(prompt, max_new, temperature, top_p, seed, stop, top_k):
        return stream(model, prompt, max_new, temperature, top_p, seed=seed, eos_id=stop, top_k=top_k)

    return ChatModel(tokens, _encoder(run_cfg.data.path, run_dir), run_cfg.train.seq_len, run_dir.name, step,
                     record.get("role"), model)


def load_export_chat_model(folder: Path, device: str = "cpu") -> ChatModel:
    """The ``transformers`` model of the export in ``folder`` (loaded offline); its run's role when the run is
    beside it in the lab."""
    import transformers

    folder = Path(folder)
    manifest = read_json(folder / EXPORT_MANIFEST) or {}
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True)
    hf = hf.to(device).eval()
    record = read_record(folder.parent / str(manifest.get("run", ""))) if manifest.get("run") else None

    @torch.no_grad()
    def tokens(prompt, max_new, temperature, top_p, seed, stop, top_k):
        generator = torch.Generator(device=device).manual_seed(seed)
        ids_BT, past = torch.tensor([prompt], device=device), None
        for _ in range(max_new):
            out = hf(ids_BT, cache=past, use_cache=True)
            past = out.cache
            next_id = draw(out.logits[0, -1], temperature, top_k, top_p, generator)
            yield next_id
            if next_id in stop:
                return
            ids_BT = torch.tensor([[next_id]], device=device)

    context = int(getattr(hf.config, "max_position_embeddings", 0) or 0)
    if record and record.get("config", {}).get("train", {}).get("seq_len"):
        context = int(record["config"]["train"]["seq_len"])
    return ChatModel(tokens, _encoder(folder, folder), context, folder.name, int(manifest.get("step", 0)),
                     (record or {}).get("role"))


def _encoder(tokenizer_folder: str | Path, owner: Path) -> ChatEncoder:
    try:
        return ChatEncoder(load_tokenizer(tokenizer_folder))
    except ValueError as exc:  # a tokenizer without the chat tokens
        raise UserError(f"{owner}: {exc}") from None


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
        final = self.chat.encoder.decode_reply(ids)
        if final != shown:
            yield final[len(shown):]
        self._turn += 1
        self.messages += [{"role": "user", "content": text}, {"role": "assistant", "content": final}]
