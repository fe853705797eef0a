"""SFT: assistant-only loss, packing that equals conversations alone, a real fine-tune of a real base run
through the lab step, and `glasslab sft` on a user's file: every conversation accounted for (cut at a turn
boundary, left out, bad), the same curves after a SIGKILL and a rerun, and an export at the end."""

from __future__ import annotations

import contextlib
import json
import random
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from cli_runner import run_cli, start_cli
from glasslab.config import from_dict, to_dict
from glasslab.data.chat import ChatEncoder
from glasslab.data.tokenizer import PAD, load_tokenizer
from glasslab.lab import StepOutput
from glasslab.lab.step import StepContext
from glasslab.layout import EXPORT_MANIFEST, list_checkpoints
from glasslab.model import ModelConfig, Transformer
from glasslab.posttrain.conversations import ConversationsConfig, build_conversations, read_conversation_split
from glasslab.posttrain.packing import collate, pack_rows
from glasslab.posttrain.samples import CHAT_PROMPTS, turn_text
from glasslab.posttrain.sft import SFTConfig, SFTStepConfig, default_sft_train
from glasslab.posttrain.tuning import tune_step
from glasslab.track import RunReader, read_record
from glasslab.train.objectives import AssistantOnly
from glasslab.train.run import train
from glasslab.train.run_config import RunConfig
from train_data import build_tiny_dataset, tiny_run_config

CHATS = [
    [{"role": "user", "content": "What does `f` do?"}, {"role": "assistant", "content": "It returns the answer."}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Explain `assert`."},
     {"role": "assistant", "content": "Assert checks a condition."}, {"role": "user", "content": "More?"},
     {"role": "assistant", "content": "It raises AssertionError when the condition is false."}],
    [{"role": "user", "content": "Write `g`."}, {"role": "assistant", "content": "```python\ndef g():\n    pass\n```"}],
]


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> dict[str, Path]:
    """A tiny dataset, a 30-step base run on it, and a decontaminated built-in conversations folder."""
    root = tmp_path_factory.mktemp("sft")
    dataset = build_tiny_dataset(root)
    train(from_dict(RunConfig, tiny_run_config(dataset, max_steps=30, checkpoint_interval=30)), root / "base")
    conversations = build_conversations(ConversationsConfig(builtin_max_modules=40, decontaminate=str(dataset)),
                                        root / "conversations", progress=False)
    return {"root": root, "dataset": dataset, "base": root / "base", "conversations": conversations}


@pytest.fixture(scope="module")
def encoder(lab) -> ChatEncoder:
    return ChatEncoder(load_tokenizer(lab["dataset"]))


def _model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelConfig(vocab_size=512, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64))


def _grads(model: Transformer) -> list[torch.Tensor]:
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    return grads


def test_packed_loss_and_gradient_equal_each_conversation_alone(encoder):
    convs = encoder.encode_many(CHATS * 3)
    model = _model()
    alone_nats = 0.0
    for conv in convs:
        ids = torch.from_numpy(conv.ids.astype(np.int64))
        nats = F.cross_entropy(model(ids[None, :-1])[0], ids[1:], reduction="none")
        alone_nats = alone_nats + nats[torch.from_numpy(conv.assistant_mask[1:])].sum()
    alone_nats.backward()
    alone_grads = _grads(model)
    rows = pack_rows([len(c.ids) for c in convs], 128)
    assert len(rows) < len(convs)  # several conversations share a row
    for packed in (True, False):
        batch = collate(convs, rows if packed else [[i] for i in range(len(convs))], 127, encoder_pad(encoder), packed)
        assert batch.loss_tokens == sum(c.num_assistant_tokens for c in convs)
        nats = AssistantOnly().nats(model, batch, contextlib.nullcontext)
        nats.backward()
        torch.testing.assert_close(nats.detach(), alone_nats.detach(), rtol=1e-5, atol=1e-4)
        for g, a in zip(_grads(model), alone_grads, strict=True):
            torch.testing.assert_close(g, a, rtol=1e-4, atol=1e-6)


def encoder_pad(encoder: ChatEncoder) -> int:
    return encoder.tokenizer.token_to_id(PAD)


def test_a_user_turn_token_changes_nothing_in_the_gradient(encoder):
    # A conversation ending in a user turn, packed before another: that turn is nobody's context and no target.
    trailing = CHATS[0] + [{"role": "user", "content": "Thanks, and what about `h`?"}]
    first, second = encoder.encode_many([trailing, CHATS[1]])
    user_positions = np.flatnonzero(~first.assistant_mask)[-4:-2]  # inside the trailing user message
    model = _model()

    def gradient(first_ids: np.ndarray, second_ids: np.ndarray) -> list[torch.Tensor]:
        convs = [type(first)(first_ids, first.assistant_mask), type(second)(second_ids, second.assistant_mask)]
        batch = collate(convs, [[0, 1]], 255, encoder_pad(encoder), True)
        AssistantOnly().nats(model, batch, contextlib.nullcontext).backward()
        return _grads(model)

    reference = gradient(first.ids, second.ids)
    changed_user = first.ids.copy()
    changed_user[user_positions] = (changed_user[user_positions] + 17) % 400 + 20
    for g, r in zip(gradient(changed_user, second.ids), reference, strict=True):
        assert torch.equal(g, r)
    changed_reply = second.ids.copy()
    reply_position = int(np.flatnonzero(second.assistant_mask)[2])
    changed_reply[reply_position] = (changed_reply[reply_position] + 17) % 400 + 20
    assert any(not torch.equal(g, r) for g, r in zip(gradient(first.ids, changed_reply), reference, strict=True))


def _sft_train_config(**train):
    base = default_sft_train()
    values = {**to_dict(base), "seq_len": 128, "global_batch_tokens": 128 * 8, "max_steps": 24, "eval_max_tokens": 512,
              "checkpoint_interval": 12, "sample_max_new_tokens": 16,
              "optimizer": {"lr": 3e-3, "weight_decay": 0.0}, **train}
    return from_dict(type(base), values)


@pytest.mark.slow
def test_sft_step_fine_tunes_the_base_and_records_role_parent_and_base_replies(lab):
    cfg = SFTStepConfig(train=_sft_train_config(), sft=SFTConfig(), base_from=StepOutput("base", str(lab["base"])),
                        conversations_from=StepOutput("conversations", str(lab["conversations"])))
    out = lab["root"] / "sft-step"
    out.mkdir()
    ctx = StepContext("sft", out, cfg, {"base": lab["base"], "conversations": lab["conversations"]}, lab["root"])
    result = tune_step(ctx)
    record = read_record(out)
    assert record["role"] == "sft" and record["parent"] == {"run": "base", "run_dir": str(lab["base"]), "step": 30}
    assert record["config"]["data"] == {"path": str(lab["dataset"].resolve())}  # no mixture: the tokenizer's home
    base_loss = record["base"]["metrics"]["eval/sft/loss"]
    assert [turn_text(s["prompt"]) for s in record["base"]["samples"]] == list(CHAT_PROMPTS)
    assert result["eval/sft/loss"] < 0.95 * base_loss  # held-out assistant tokens, before vs after
    assert {"eval/code/loss", "eval/prose/loss", "eval/macro/loss"} <= set(result)  # forgetting, on the base's data
    counts = record["conversations"]
    assert counts["train"]["conversations"] == len(read_conversation_split(lab["conversations"], "train"))
    assert counts["train"]["kept"] + counts["train"]["left_out"] == counts["train"]["conversations"]
    with RunReader(out) as reader:
        steps, sft_loss = reader.scalars("sft/loss")
        _, counted = reader.scalars("sft/assistant_tokens")
        _, train_loss = reader.scalars("train/loss")
        samples = reader.samples()
    assert steps[-1] == 24 and len(steps) >= 22 and sft_loss == train_loss  # (the spike guard may skip a step)
    assert counted == sorted(counted) and counted[0] > 0
    assert np.mean(sft_loss[-5:]) < np.mean(sft_loss[:5])
    assert [json.loads(s["prompt"]) for s in samples if s["step"] == 24] == [[{"role": "user", "content": p}]
                                                                             for p in CHAT_PROMPTS]
    assert json.loads(samples[-1]["text"])[0]["role"] == "assistant"
    assert record["config"]["sft"]["packing"] == "packed"


def encoder_for(lab) -> ChatEncoder:
    return ChatEncoder(load_tokenizer(lab["dataset"]))


def _user_files(lab, folder: Path, row: int) -> tuple[Path, Path, int]:
    """A user's conversations: built-in ones that fit a row of ``row`` tokens, one to cut, one to leave out
    and a bad line; a held-out file; and how many fit whole."""
    long = []
    for i in range(12):
        long += [{"role": "user", "content": f"And {i}?"}, {"role": "assistant", "content": f"It is {i}."}]
    huge = [{"role": "user", "content": "Tell me everything."}, {"role": "assistant", "content": "word " * 400}]
    encoder = encoder_for(lab)
    fitting = [r for r in read_conversation_split(lab["conversations"], "train")
               if len(encoder.encode(r["messages"]).ids) <= row]
    records = [{"messages": long}, {"messages": huge}] + fitting
    mine = folder / "mine.jsonl"
    mine.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"text": "not a conversation"}\n')
    held = folder / "held.jsonl"
    held.write_text("".join(json.dumps(r) + "\n" for r in read_conversation_split(lab["conversations"], "heldout")))
    return mine, held, len(fitting)


@pytest.mark.slow
def test_glasslab_sft_accounts_for_every_conversation_and_resumes_bit_identical_after_sigkill(lab, tmp_path):
    mine, held, fitting = _user_files(lab, tmp_path, 129)
    args = ["sft", str(lab["base"]), str(mine), "--heldout", str(held), "--steps", "16", "--seq-len", "128",
            "train.checkpoint_interval=4", "train.sample_max_new_tokens=8", "train.eval_max_tokens=256"]
    ref = run_cli(*args, "--lab", str(tmp_path / "ref"), timeout=600)
    assert ref.returncode == 0, ref.stderr[-3000:]
    # Said on the console: the bad line skipped, one conversation cut at a turn boundary, one left out.
    line = f"{fitting + 2} training conversations: {fitting} whole, 1 cut at a turn boundary, 1 left out (the first"
    assert line in ref.stderr
    assert f"skipped 1 bad record(s); the first: {mine.resolve()}:{fitting + 3}: no 'messages' list" in ref.stderr
    (run_dir,) = (tmp_path / "ref").glob("sft-*")
    counts = read_record(run_dir)["conversations"]
    assert counts["train"] == {"conversations": fitting + 2, "whole": fitting, "cut": 1, "left_out_long": 0,
                               "left_out_first_reply": 1, "kept": fitting + 1, "left_out": 1}
    heldout = counts["heldout"]
    assert heldout["conversations"] == len(read_conversation_split(lab["conversations"], "heldout"))
    assert heldout["kept"] + heldout["left_out"] == heldout["conversations"]
    (conversations,) = (tmp_path / "ref").glob("conversations-*")
    assert json.loads((conversations / "report.json").read_text())["bad_records"]["count"] == 1
    assert "cut 1" in ref.stdout and "export:" in ref.stdout
    assert len(encoder_for(lab).encode(json.loads(mine.read_text().splitlines()[0])["messages"]).ids) > 129
    (export,) = (tmp_path / "ref").glob("export-*")
    assert json.loads((export / EXPORT_MANIFEST).read_text())["run"] == run_dir.name

    killed_lab = tmp_path / "killed"
    proc = start_cli(*args, "--lab", str(killed_lab))
    at_least, deadline = random.choice([4, 8, 12]), time.monotonic() + 300
    while not any(step >= at_least for folder in killed_lab.glob("sft-*") for step, _ in list_checkpoints(folder)):
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(random.uniform(0.0, 0.2))  # anywhere: mid-step, mid-checkpoint
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    resumed = run_cli(*args, "--lab", str(killed_lab), timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    (killed_run,) = killed_lab.glob("sft-*")
    assert killed_run.name == run_dir.name  # the same step, by its hash
    with RunReader(run_dir) as a, RunReader(killed_run) as b:
        for key in ("sft/loss", "sft/assistant_tokens", "eval/sft/loss", "mixture/epochs/sft"):
            assert b.scalars(key) == a.scalars(key), key  # bit for bit
        assert b.scalars("sft/loss")[0][-1] == 16 and any(e["kind"] == "resume" for e in b.events())
    assert read_record(killed_run)["base"] == read_record(run_dir)["base"]  # measured once, before step 0


@pytest.mark.slow
def test_sft_from_an_export_with_no_dataset_at_hand_trains_exports_and_chats(lab, tmp_path):
    from glasslab.cli import main as cli_main
    from glasslab.layout import read_json, write_json_atomic
    from glasslab.posttrain.chat import ChatSession, Sampling, load_chat_model
    from glasslab.train.export_step import ExportConfig, export_step

    given = tmp_path / "given"  # an export as someone downloads it: no dataset beside it, none named
    assert cli_main(["export", str(lab["base"]), "--lab", str(tmp_path / "made"), "--out", str(given)]) == 0
    manifest = read_json(given / EXPORT_MANIFEST)
    write_json_atomic(given / EXPORT_MANIFEST, {**manifest, "dataset": None, "dataset_manifest_hash": None})
    cfg = SFTStepConfig(train=_sft_train_config(max_steps=4, checkpoint_interval=4), base=str(given),
                        conversations_from=StepOutput("conversations", str(lab["conversations"])))
    out = tmp_path / "lab" / "sft-from-export"
    out.mkdir(parents=True)
    result = tune_step(StepContext("sft", out, cfg, {"conversations": lab["conversations"]}, tmp_path / "lab"))
    record = read_record(out)
    assert record["parent"]["export"] == "given" and record["parent"]["run"] == "base"
    assert record["config"]["data"] == {"path": str(given.resolve())} and "dataset" not in record
    assert "eval/sft/loss" in result and not any(k.endswith("/bpb") for k in result)  # no forgetting to measure
    done = export_step(StepContext("export", tmp_path / "lab" / "export-x", ExportConfig(run=str(out), step=4), {},
                                   tmp_path / "lab"))
    assert done["max_logit_diff"] < 1e-3 and (tmp_path / "lab" / "export-x" / "tokenizer.json").is_file()
    reply = "".join(ChatSession(load_chat_model(str(out)), Sampling(temperature=0, max_new_tokens=4)).reply("Hi?"))
    assert isinstance(reply, str)
