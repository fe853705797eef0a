"""The chat format: our encoder and transformers' apply_chat_template give the same ids and assistant masks."""

from __future__ import annotations

import random

import pytest
import transformers

from data_helpers import topic_texts
from glasslab.data.chat import ChatEncoder
from glasslab.data.tokenizer import IM_END, save_tokenizer, train_tokenizer

CONVERSATIONS = [
    [{"role": "user", "content": "What does `json.dumps` do?"},
     {"role": "assistant", "content": "Serialize ``obj`` to a JSON formatted ``str``."}],
    [{"role": "system", "content": "You are terse."},
     {"role": "user", "content": "Explain `assert`."},
     {"role": "assistant", "content": "Assert statements are a convenient way to insert debugging assertions."},
     {"role": "user", "content": "And its code?\n\n"},
     {"role": "assistant", "content": "\n\n  ```python\nassert x, 'msg'\n```\n"}],
    [{"role": "user", "content": "日本語 🌍 e\u0301 <|im_end|> <|endoftext|> literal specials"},
     {"role": "assistant", "content": " leading space, trailing newline\n"}],
]


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    tokenizer = train_tokenizer(topic_texts()[:30], vocab_size=600)
    folder = save_tokenizer(tokenizer, tmp_path_factory.mktemp("tok") / "tokenizer")
    return tokenizer, folder


def _random_conversation(rng: random.Random) -> list[dict]:
    pieces = ["def f(x):", "\n", "  ", "return", " the", "é", "🌍", "\t", "<|im_start|>", "x" * 7, ".", "\n\n"]
    messages = [{"role": "system", "content": "".join(rng.choices(pieces, k=3))}] if rng.random() < 0.3 else []
    for _ in range(rng.randrange(1, 4)):
        messages.append({"role": "user", "content": "".join(rng.choices(pieces, k=rng.randrange(1, 9)))})
        messages.append({"role": "assistant", "content": "".join(rng.choices(pieces, k=rng.randrange(1, 9)))})
    return messages


def test_template_round_trip_with_transformers(tokenizers, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tokenizer, folder = tokenizers
    hf = transformers.AutoTokenizer.from_pretrained(str(folder))
    encoder = ChatEncoder(tokenizer)
    rng = random.Random(0)
    conversations = CONVERSATIONS + [_random_conversation(rng) for _ in range(60)]
    for messages, ours in zip(conversations, encoder.encode_many(conversations), strict=True):
        theirs = hf.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
                                        sanitize_control_tokens=False)
        # Records with control-token text are rejected before training; the ids agree wherever text does.
        if not any("<|" in m["content"] for m in messages):
            assert ours.ids.tolist() == theirs["input_ids"], messages
            assert ours.assistant_mask.astype(int).tolist() == theirs["assistant_masks"], messages
        sanitized = hf.apply_chat_template(messages, tokenize=True, sanitize_control_tokens=True, return_dict=False)
        assert ours.ids.tolist() == sanitized, messages
        prompt = hf.apply_chat_template(messages[:-1], add_generation_prompt=True, sanitize_control_tokens=True,
                                        return_dict=False)
        assert encoder.prompt_ids(messages[:-1]) == prompt


def test_mask_covers_reply_content_and_its_end_only(tokenizers):
    tokenizer, _ = tokenizers
    encoder = ChatEncoder(tokenizer)
    encoded = encoder.encode(CONVERSATIONS[1])
    trained = tokenizer.decode(encoded.ids[encoded.assistant_mask].tolist(), skip_special_tokens=False)
    first, second = CONVERSATIONS[1][2]["content"] + IM_END, CONVERSATIONS[1][4]["content"] + IM_END
    # The second reply starts with whitespace; where BPE merges it with the header's newline, that token is trained.
    assert trained in (first + second, first + "\n" + second)
    assert encoded.num_assistant_tokens == int(encoded.assistant_mask.sum()) > 10
    assert not encoded.assistant_mask[0] and encoded.ids[0] == encoder.im_start_id
    assert encoder.decode_reply(encoded.ids[encoded.assistant_mask].tolist()) == CONVERSATIONS[1][2]["content"]
