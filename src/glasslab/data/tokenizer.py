"""The byte-level BPE tokenizer: trained here with HF ``tokenizers``, saved so ``transformers`` loads it.

Byte-level means every UTF-8 byte sequence has an encoding, so ``decode(encode(text)) == text`` for
any text (no normaliser, no prefix space, no unknown token). ``<|endoftext|>`` separates documents
in the shards; a few more specials are reserved (padding, fill-in-the-middle, chat) so using them
later does not renumber the vocabulary. When a document itself contains the text ``<|endoftext|>``,
shards encode it as ordinary text (``encode_special_tokens``) so it can never fake a document boundary.

The chat format is ChatML on the reserved ``<|im_start|>``/``<|im_end|>``: every message is
``<|im_start|>{role}\\n{content}<|im_end|>\\n``, and a reply is prompted by ``<|im_start|>assistant\\n``.
It is saved as ``chat_template`` in ``tokenizer_config.json`` (the Jinja template ``transformers``
renders in ``apply_chat_template``); :mod:`glasslab.data.chat` encodes the same format directly, and a
test holds the two to the same token ids and assistant masks.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from glasslab.errors import UserError
from glasslab.layout import TOKENIZER_DIR

EOT = "<|endoftext|>"
PAD = "<|pad|>"
SPECIAL_TOKENS = (
    EOT,
    PAD,
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|im_start|>",
    "<|im_end|>",
)
"""Specials take ids 0.. in this order; ``<|endoftext|>`` is id 0."""
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
CHAT_ROLES = ("system", "user", "assistant")
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['role'] == 'assistant' -%}"
    "{%- generation -%}{{- message['content'] + '<|im_end|>' -}}{%- endgeneration -%}"
    "{%- else -%}{{- message['content'] + '<|im_end|>' -}}{%- endif -%}"
    "{{- '\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
"""ChatML as ``transformers`` renders it. ``{% generation %}`` marks what an assistant writes (its
content and ``<|im_end|>``), so ``apply_chat_template(..., return_assistant_tokens_mask=True)`` gives
the same loss mask as our encoder."""


def train_tokenizer(texts: Iterable[str], vocab_size: int, min_frequency: int = 2) -> Tokenizer:
    """A byte-level BPE of ``vocab_size`` entries (bytes, merges and specials) trained on ``texts``."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def save_tokenizer(tokenizer: Tokenizer, out_dir: Path, model_max_length: int = 1 << 20) -> Path:
    """Write ``tokenizer.json`` plus the two small files ``transformers.AutoTokenizer`` reads offline."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    added = {
        str(tokenizer.token_to_id(tok)): {
            "content": tok,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "single_word": False,
            "special": True,
        }
        for tok in SPECIAL_TOKENS
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": EOT,
        "eos_token": EOT,
        "unk_token": EOT,
        "pad_token": PAD,
        "model_max_length": model_max_length,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": added,
        "chat_template": CHAT_TEMPLATE,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    special_map = {
        "bos_token": EOT,
        "eos_token": EOT,
        "unk_token": EOT,
        "pad_token": PAD,
        "additional_special_tokens": list(SPECIAL_TOKENS[2:]),
    }
    (out_dir / "special_tokens_map.json").write_text(json.dumps(special_map, indent=2) + "\n")
    return out_dir


def load_tokenizer(dataset_dir: str | Path) -> Tokenizer:
    """The dataset's tokenizer (``<dataset>/tokenizer/tokenizer.json``, or a tokenizer folder itself)."""
    path = Path(dataset_dir)
    for candidate in (path / TOKENIZER_DIR / "tokenizer.json", path / "tokenizer.json"):
        if candidate.is_file():
            return Tokenizer.from_file(str(candidate))
    raise UserError(f"{path}: no tokenizer (expected {path / TOKENIZER_DIR / 'tokenizer.json'})")


def shard_encoder(tokenizer: Tokenizer) -> Tokenizer:
    """The tokenizer set up for writing shards: special-token text inside documents stays plain text."""
    tokenizer.encode_special_tokens = True
    return tokenizer
