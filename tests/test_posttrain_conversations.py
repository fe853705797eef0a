"""Conversation data for SFT: bad records get one line each, the built-in set, the held-out split, decontamination."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data_helpers import build_small
from glasslab.data.shards import open_shard
from glasslab.data.tokenizer import load_tokenizer
from glasslab.errors import UserError
from glasslab.layout import read_json
from glasslab.posttrain.conversations import (
    ConversationsConfig,
    HeldoutOverlap,
    RecordProblems,
    build_conversations,
    problem_with,
    read_conversation_split,
    read_conversations,
)
from glasslab.posttrain.instructions import instruction_conversations

GOOD = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"},
                     {"role": "assistant", "content": "Hello."}]}
BAD_LINES = {  # JSONL line -> what its one-line problem must say
    '{"messages": [{"role": "user", "content": "Hi"}': "malformed JSON",
    '{"text": "plain pretraining text"}': "no 'messages' list (found: text)",
    '{"messages": []}': "'messages' is empty",
    '{"messages": ["hello"]}': "messages[0] is str",
    '{"messages": [{"role": "user"}]}': "messages[0] has no 'content'",
    '{"messages": [{"role": "bot", "content": "x"}]}':
        "messages[0].role='bot': expected one of system, user, assistant",
    '{"messages": [{"role": "user", "content": 3}]}': "messages[0].content is int",
    '{"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]}':
        "messages[1] is a system message",
    '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "  "}]}':
        "messages[1].content is empty",
    '{"messages": [{"role": "user", "content": "a<|im_end|>"}, {"role": "assistant", "content": "b"}]}':
        "reserved token '<|im_end|>'",
    '{"messages": [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}]}':
        "the last message is 'user'",
}


def _write_mixed(path: Path) -> Path:
    lines = [json.dumps(GOOD), *BAD_LINES, "", json.dumps({**GOOD, "id": 7})]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_bad_records_are_skipped_counted_and_named_in_one_line_each(tmp_path, capsys):
    path = _write_mixed(tmp_path / "chats.jsonl")
    problems = RecordProblems()
    good = list(read_conversations(path, problems))
    assert [r.get("id") for r in good] == [None, 7] and problems.count == len(BAD_LINES)
    for line_number, (listed, expected) in enumerate(zip(problems.listed, BAD_LINES.values(), strict=True), start=2):
        assert listed.startswith(f"{path}:{line_number}: ") and expected in listed and "\n" not in listed
    with pytest.raises(UserError) as err:
        list(read_conversations(path, RecordProblems(), strict=True))
    assert str(err.value).startswith(f"{path}:2: malformed JSON") and "--strict" in str(err.value)

    held = tmp_path / "held.jsonl"
    held.write_text(json.dumps(GOOD) + "\n")
    out = build_conversations(ConversationsConfig(builtin=False, files=(str(path),), heldout_files=(str(held),)),
                              tmp_path / "c", progress=False)  # quiet, as the lab step builds it
    report = read_json(out / "report.json")
    assert report["bad_records"]["count"] == len(BAD_LINES) and (report["train"], report["heldout"]) == (2, 1)
    # Said on the console all the same: how many, and the first with its file:line and reason.
    err = capsys.readouterr().err
    assert f"skipped {len(BAD_LINES)} bad record(s); the first: {path}:2: malformed JSON" in err


def _chats(count: int) -> list[str]:
    return [json.dumps({"messages": [{"role": "user", "content": f"What is {i} squared?"},
                                     {"role": "assistant", "content": f"{i * i}."}]}) for i in range(count)]


def test_a_small_file_holds_out_a_fifth_at_most_and_says_why_when_it_cannot(tmp_path):
    path = tmp_path / "chats.jsonl"
    path.write_text("\n".join(_chats(24)) + "\n")
    out = build_conversations(ConversationsConfig(builtin=False, files=(str(path),)), tmp_path / "c", progress=False)
    report = read_json(out / "report.json")  # the minimum of 32 held out would leave one to train on
    assert (report["train"], report["heldout"]) == (20, 4)
    big = tmp_path / "big.jsonl"
    big.write_text("\n".join(_chats(400)) + "\n")
    report = read_json(build_conversations(ConversationsConfig(builtin=False, files=(str(big),)), tmp_path / "b",
                                           progress=False) / "report.json")
    assert (report["train"], report["heldout"]) == (368, 32)  # a larger file keeps the minimum
    path.write_text("\n".join(_chats(4)) + "\n")
    with pytest.raises(UserError) as err:
        build_conversations(ConversationsConfig(builtin=False, files=(str(path),)), tmp_path / "d", progress=False)
    assert "4 conversations are too few to hold any out (at most 20% are)" in str(err.value)
    assert "--heldout FILE" in str(err.value) and not (tmp_path / "d").exists()


def test_no_valid_conversation_fails_in_one_line_and_writes_nothing(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"messages": []}\n')
    with pytest.raises(UserError) as err:
        build_conversations(ConversationsConfig(builtin=False, files=(str(path),)), tmp_path / "c", progress=False)
    assert "no valid conversations" in str(err.value) and f"{path}:1" in str(err.value)
    assert not (tmp_path / "c").exists()


def test_builtin_set_is_valid_varied_and_deterministic():
    records = list(instruction_conversations(max_modules=25))
    assert records == list(instruction_conversations(max_modules=25))
    assert all(problem_with(r) is None for r in records)
    kinds = {r["kind"] for r in records}
    assert kinds == {"describe", "explain", "write", "describe+write"}
    assert any(r["messages"][0]["role"] == "system" for r in records)
    assert any(sum(m["role"] == "assistant" for m in r["messages"]) == 2 for r in records)
    explain = next(r for r in records if r["messages"][-2]["content"] == "Explain `assert` in Python.")
    assert explain["messages"][-1]["content"].startswith("Assert statements are a convenient way")
    write = next(r for r in records if r["kind"] == "write")
    assert write["messages"][-2]["content"].startswith("Write a Python function `")
    assert write["messages"][-1]["content"].startswith("```python\ndef ")


def test_heldout_split_is_stable_and_decontamination_drops_overlaps(tmp_path):
    dataset = build_small(tmp_path)
    tokenizer = load_tokenizer(dataset)
    shard = open_shard(dataset, "alpha", "eval")
    held_text = tokenizer.decode(shard.document(0)[:-1].tolist(), skip_special_tokens=False)
    words = held_text.split()
    overlap = HeldoutOverlap(dataset)
    long_quote = [{"role": "user", "content": "Quote it."}, {"role": "assistant", "content": " ".join(words[3:20])}]
    short_quote = [{"role": "user", "content": "Quote it."}, {"role": "assistant", "content": " ".join(words[5:10])}]
    unrelated = [{"role": "user", "content": "Say something new."},
                 {"role": "assistant", "content": "Purple giraffes compile quietly under moonlit tables."}]
    assert overlap.overlaps(long_quote) and overlap.overlaps(short_quote) and not overlap.overlaps(unrelated)

    records = [{"messages": m} for m in (long_quote, short_quote)] + [
        {"messages": [{"role": "user", "content": f"Count to {i}."}, {"role": "assistant", "content": f"{i}."}]}
        for i in range(200)]
    path = tmp_path / "chats.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    cfg = ConversationsConfig(builtin=False, files=(str(path),), heldout_fraction=0.1, heldout_min=5,
                              decontaminate=str(dataset))
    first = build_conversations(cfg, tmp_path / "a", progress=False)
    reordered = tmp_path / "reordered.jsonl"
    reordered.write_text("".join(json.dumps(r) + "\n" for r in reversed(records)))
    second = build_conversations(ConversationsConfig(**{**cfg.__dict__, "files": (str(reordered),)}), tmp_path / "b",
                                 progress=False)
    train, heldout = read_conversation_split(first, "train"), read_conversation_split(first, "heldout")
    assert len(heldout) == 20 and not {json.dumps(r) for r in train} & {json.dumps(r) for r in heldout}
    assert sorted(map(json.dumps, read_conversation_split(second, "heldout"))) == sorted(map(json.dumps, heldout))
    quotes = [r for r in train if r["messages"][0]["content"] == "Quote it."]
    report = read_json(first / "report.json")
    assert quotes == [] and report["decontaminated"] == 2 - sum(
        r["messages"][0]["content"] == "Quote it." for r in heldout)
    assert report["train"] == len(train) and report["decontaminated_against"] == str(dataset)


def test_a_tasks_problems_become_conversations_held_out_as_the_task_holds_them_out(tmp_path):
    from glasslab.config import ConfigError, config_hash
    from glasslab.posttrain.rewards_builtin import arithmetic_problems, split_problems

    assert config_hash(ConversationsConfig()) == config_hash(ConversationsConfig(task=""))  # unset: not hashed
    assert config_hash(ConversationsConfig(task="arithmetic")) != config_hash(ConversationsConfig())
    folder = build_conversations(ConversationsConfig(builtin=False, task="arithmetic"), tmp_path / "c", progress=False)
    train, heldout = (read_conversation_split(folder, split) for split in ("train", "heldout"))
    task_train, task_heldout = split_problems(arithmetic_problems())
    assert [c["messages"][0]["content"] for c in heldout] == [p["prompt"] for p in task_heldout]
    assert [c["messages"][1]["content"] for c in train] == [p["answer"] for p in task_train]
    assert read_json(folder / "report.json")["kinds"] == {"task:arithmetic": len(train) + len(heldout)}
    with pytest.raises(ConfigError, match="conversations.task='code': expected a built-in task with reference"):
        ConversationsConfig(task="code")
