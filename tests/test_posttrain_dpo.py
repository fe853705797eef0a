"""DPO: the loss and its gradients against values worked out by hand for a tiny bigram model, pairs validated
and counted, the built-in pairs, and `glasslab dpo` on a real SFT'd base: the first step's loss is ln 2
(the model is its reference), the margin grows, the run records its base's preference accuracy and replies."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from cli_runner import run_cli
from glasslab.config import from_dict
from glasslab.errors import UserError
from glasslab.model import ModelConfig
from glasslab.posttrain.base import BaseData
from glasslab.posttrain.conversations import ConversationsConfig, build_conversations, read_conversation_split
from glasslab.posttrain.dpo import DPOConfig, DPORecipe, DPORunConfig, default_dpo_train
from glasslab.posttrain.pairs import PairsConfig, build_pairs, builtin_pairs, problem_with, read_pair_split
from glasslab.posttrain.preference import IGNORE_INDEX, PairBatch, Preference
from glasslab.posttrain.rewards_builtin import arithmetic_problems, split_problems
from glasslab.track import RunReader, read_record
from glasslab.train.run import train
from glasslab.train.run_config import RunConfig
from train_data import build_tiny_dataset, tiny_run_config

V = 4
BETA = 0.5


class Bigram(nn.Module):
    """logits of the next token = a row of a (V, V) table picked by the current token."""

    def __init__(self, table: list[list[float]]) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.tensor(table))

    def forward(self, tokens_BT: torch.Tensor, doc_ids_BT=None) -> torch.Tensor:
        return self.table[tokens_BT]


POLICY = [[0.1, 0.5, -0.3, 0.0], [0.2, -0.1, 0.4, 0.3], [-0.5, 0.2, 0.1, 0.6], [0.3, 0.3, -0.2, -0.4]]
REFERENCE = [[0.0, 0.2, 0.1, -0.1], [0.5, 0.0, -0.2, 0.1], [0.1, 0.1, 0.3, -0.3], [-0.2, 0.4, 0.0, 0.2]]
# Two pairs; each side is (tokens, index where its response starts): a shared prompt, then the response.
PAIRS = [(([0, 1, 2, 3], 2), ([0, 1, 3, 3], 2)),
         (([2, 0, 1], 1), ([2, 3, 0], 1))]


def _batch() -> PairBatch:
    tokens = torch.zeros(len(PAIRS), 2, 3, dtype=torch.long)
    targets = torch.full((len(PAIRS), 2, 3), IGNORE_INDEX, dtype=torch.long)
    for i, pair in enumerate(PAIRS):
        for j, (ids, start) in enumerate(pair):
            padded = ids + [0] * (4 - len(ids))
            tokens[i, j] = torch.tensor(padded[:-1])
            for t in range(start, len(ids)):  # target t predicts ids[t] from ids[t - 1]
                targets[i, j, t - 1] = ids[t]
    return PairBatch(tokens, targets, num_pairs=len(PAIRS))


def _softmax(row: list[float]) -> list[float]:
    exps = [math.exp(x) for x in row]
    return [e / sum(exps) for e in exps]


def _logp(table: list[list[float]], ids: list[int], start: int) -> float:
    """log π(response | prompt), summed over the response's tokens, by hand."""
    return sum(math.log(_softmax(table[ids[t - 1]])[ids[t]]) for t in range(start, len(ids)))


def test_dpo_loss_and_gradients_equal_values_worked_out_by_hand():
    policy, reference = Bigram(POLICY), Bigram(REFERENCE)
    objective = Preference(reference, BETA)
    batch = _batch()
    assert objective.loss_tokens(batch) == 2
    loss = objective.nats(policy, batch, contextlib.nullcontext) / batch.num_pairs
    loss.backward()
    metrics = objective.metrics(loss.item(), batch)

    margins, hand_loss = [], 0.0
    hand_grad = [[0.0] * V for _ in range(V)]
    for (chosen, rejected) in PAIRS:
        z = BETA * ((_logp(POLICY, *chosen) - _logp(REFERENCE, *chosen))
                    - (_logp(POLICY, *rejected) - _logp(REFERENCE, *rejected)))
        margins.append(z)
        hand_loss += math.log1p(math.exp(-z)) / len(PAIRS)  # −log σ(z)
        weight = BETA / (1 + math.exp(z)) / len(PAIRS)      # −∂loss/∂log π(chosen) = ∂loss/∂log π(rejected)
        for sign, (ids, start) in ((-1.0, chosen), (1.0, rejected)):
            for t in range(start, len(ids)):  # ∂log softmax(row)[y]/∂row[k] = 1[k = y] − softmax(row)[k]
                probs = _softmax(POLICY[ids[t - 1]])
                for k in range(V):
                    hand_grad[ids[t - 1]][k] += sign * weight * ((k == ids[t]) - probs[k])
    assert loss.item() == pytest.approx(hand_loss, rel=1e-6)  # float32 against float64 by hand
    torch.testing.assert_close(policy.table.grad, torch.tensor(hand_grad), rtol=1e-5, atol=1e-7)
    assert any(abs(g) > 1e-2 for row in hand_grad for g in row)
    assert reference.table.grad is None  # the reference is frozen
    assert metrics["dpo/loss"] == loss.item()
    assert metrics["dpo/reward_margin"] == pytest.approx(sum(margins) / 2, rel=1e-5)
    assert metrics["dpo/accuracy"] == sum(z > 0 for z in margins) / 2 and 0 < metrics["dpo/accuracy"] < 1
    # The model as its own reference: every margin is 0 and the loss is ln 2.
    same = Preference(Bigram(POLICY), BETA)
    same.loss_tokens(batch)
    assert (same.nats(policy, batch, contextlib.nullcontext) / 2).item() == pytest.approx(math.log(2), rel=1e-6)


PAIR = {"prompt": [{"role": "user", "content": "What does `f` do?"}],
        "chosen": {"role": "assistant", "content": "It returns one."},
        "rejected": {"role": "assistant", "content": "No."}}


@pytest.mark.parametrize(("record", "problem"), [
    ({"prompt": PAIR["prompt"], "chosen": PAIR["chosen"]}, "expected 'prompt', 'chosen' and 'rejected'"),
    ({**PAIR, "prompt": []}, "'prompt' is empty"),
    ({**PAIR, "prompt": PAIR["prompt"] + [PAIR["chosen"]]}, "expected 'prompt' to end with a user message"),
    ({**PAIR, "chosen": "It returns one."}, "chosen is str"),
    ({**PAIR, "rejected": {"role": "user", "content": "x"}}, "rejected.role='user': expected 'assistant'"),
    ({**PAIR, "rejected": PAIR["chosen"]}, "chosen and rejected are the same reply"),
    ({**PAIR, "chosen": {"role": "assistant", "content": "a <|im_end|>"}}, "reserved token"),
])
def test_bad_pairs_are_named_in_one_line(record, problem):
    assert problem_with(PAIR) is None
    found = problem_with(record)
    assert found is not None and problem in found and "\n" not in found


def test_pair_files_skip_and_count_bad_records_and_hold_out_the_given_file(tmp_path):
    mine, held = tmp_path / "pairs.jsonl", tmp_path / "held.jsonl"
    mine.write_text(json.dumps(PAIR) + "\n{oops\n" + json.dumps({**PAIR, "rejected": PAIR["chosen"]}) + "\n")
    held.write_text(json.dumps(PAIR) + "\n")
    out = build_pairs(PairsConfig(builtin=False, files=(str(mine),), heldout_files=(str(held),)), tmp_path / "p",
                      progress=False)
    report = json.loads((out / "report.json").read_text())
    assert (report["train"], report["heldout"], report["bad_records"]["count"]) == (1, 1, 2)
    assert report["bad_records"]["listed"][0].startswith(f"{mine}:2: malformed JSON")
    assert read_pair_split(out, "train") == [PAIR]


def test_thirty_pairs_six_too_long_train_on_those_that_fit_and_the_error_names_the_cause(tmp_path, capsys):
    long_prompt = "Read this and say what it does: " + "value = value + 1; " * 60
    records = [{**PAIR, "prompt": [{"role": "user", "content": (long_prompt if i < 6 else "") + f"What is {i}?"}],
                "chosen": {"role": "assistant", "content": f"It is {i}."}} for i in range(30)]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + json.dumps({**PAIR, "rejected": PAIR["chosen"]})
                    + "\n")
    folder = build_pairs(PairsConfig(builtin=False, files=(str(path),)), tmp_path / "p", progress=False)
    report = json.loads((folder / "report.json").read_text())
    assert (report["train"], report["heldout"]) == (24, 6)  # not 1 and 29: a fifth of a small file at most
    assert f"skipped 1 bad record(s); the first: {path}:31: chosen and rejected are the same reply" in (
        capsys.readouterr().err)
    dataset = build_tiny_dataset(tmp_path)

    def recipe(seq_len: int) -> DPORecipe:
        train_cfg = dataclasses.replace(default_dpo_train(), seq_len=seq_len)
        config = DPORunConfig(model=ModelConfig(vocab_size=512, d_model=32, n_layers=2, n_heads=2, d_ff=64),
                              data=BaseData(path=str(dataset)), train=train_cfg, dpo=DPOConfig(pairs=str(folder)))
        return DPORecipe(config, base=None)  # the pairs are read, encoded and fitted before any model is needed

    fitted = recipe(128)
    assert fitted.train_counts["pairs"] == 24 and fitted.train_counts["kept"] >= 18
    assert fitted.train_counts["kept"] + fitted.heldout_counts["kept"] == 24  # the six long ones, left out
    with pytest.raises(UserError) as err:
        recipe(8)
    assert str(err.value).startswith("no training preference pair fits a row of train.seq_len + 1 = 9 tokens "
                                     "(24 training pairs: 0 kept, 24 left out")


def test_builtin_pairs_prefer_the_right_summary_over_another_modules(tmp_path):
    folder = build_conversations(ConversationsConfig(builtin_max_modules=40), tmp_path / "c", progress=False)
    train = read_conversation_split(folder, "train")
    pairs, unpaired = builtin_pairs(train, seed=0)
    describe = [r for r in train if r.get("kind") == "describe" and len(r["messages"]) <= 3]
    assert len(pairs) + unpaired == len(describe) and len(pairs) > 100
    module = lambda text: text.split("`")[1].split(".")[0]  # noqa: E731
    summaries = {r["messages"][-1]["content"]: module(r["messages"][-2]["content"]) for r in describe}
    for pair in pairs:
        question = pair["prompt"][-1]["content"]
        assert summaries[pair["chosen"]["content"]] == module(question) != summaries[pair["rejected"]["content"]]
        assert problem_with(pair) is None
    # Made from a conversations folder, the held-out pairs are its held-out conversations' (unseen in SFT).
    out = build_pairs(PairsConfig(arithmetic=False), tmp_path / "p", conversations=folder, progress=False)
    held_prompts = {json.dumps(r["messages"][:-1]) for r in read_conversation_split(folder, "heldout")}
    assert all(json.dumps(p["prompt"]) in held_prompts for p in read_pair_split(out, "heldout"))


def test_arithmetic_pairs_prefer_the_right_answer_and_keep_the_tasks_held_out_problems(tmp_path):
    folder = build_pairs(PairsConfig(builtin_max_modules=3), tmp_path / "p", progress=False)
    split = {part: [p for p in read_pair_split(folder, part) if p["kind"] == "arithmetic"]
             for part in ("train", "heldout")}
    train_problems, heldout_problems = split_problems(arithmetic_problems())
    for part, problems in (("train", train_problems), ("heldout", heldout_problems)):
        answers = {p["prompt"]: p["answer"] for p in problems}
        assert [p["prompt"][0]["content"] for p in split[part]] == list(answers)
        for pair in split[part]:
            question = pair["prompt"][0]["content"]
            assert pair["chosen"]["content"] == answers[question] != pair["rejected"]["content"]
            assert problem_with(pair) is None
    # The rejected answer is another problem's of the same operator, not always the same one.
    rejected = {p["rejected"]["content"] for p in split["train"] if " + " in p["prompt"][0]["content"]}
    assert len(rejected) > 20 and all(0 <= int(a) <= 48 for a in rejected)
    report = json.loads((folder / "report.json").read_text())
    assert "builtin:arithmetic" in report["sources"] and report["heldout"] >= len(heldout_problems)


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("dpo")
    dataset = build_tiny_dataset(root)
    train(from_dict(RunConfig, tiny_run_config(dataset, max_steps=30, checkpoint_interval=30)), root / "base")
    conversations = build_conversations(ConversationsConfig(builtin_max_modules=40), root / "conversations",
                                        progress=False)
    return {"root": root, "base": root / "base", "conversations": conversations}


@pytest.mark.slow
def test_glasslab_dpo_starts_at_ln2_widens_the_margin_and_records_the_bases_preference(lab, tmp_path):
    pairs = {split: builtin_pairs(read_conversation_split(lab["conversations"], split), seed=0)[0]
             for split in ("train", "heldout")}
    files = {}
    for split, records in pairs.items():
        files[split] = tmp_path / f"{split}.jsonl"
        files[split].write_text("".join(json.dumps(r) + "\n" for r in records))
    done = run_cli("dpo", str(lab["base"]), str(files["train"]), "--heldout", str(files["heldout"]), "--steps", "12",
                   "--seq-len", "96", "train.optimizer.lr=3e-3", "train.checkpoint_interval=12",
                   "train.sample_max_new_tokens=8", "train.eval_max_tokens=256", "--lab", str(tmp_path / "lab"),
                   timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (tmp_path / "lab").glob("dpo-*")
    record = read_record(run_dir)
    assert record["role"] == "dpo" and record["parent"]["run"] == "base" and record["beta"] == 0.1
    assert record["command"].startswith(f"glasslab dpo {lab['base']} ")  # the run page's Reproduce box
    counts = record["pairs"]
    assert counts["train"]["pairs"] == len(pairs["train"]) and counts["heldout"]["pairs"] == len(pairs["heldout"])
    assert f"{len(pairs['train']):,} training pairs: " in done.stderr
    before = record["base"]["metrics"]
    assert before["eval/dpo/loss"] == pytest.approx(math.log(2)) and before["eval/dpo/reward_margin"] == 0
    assert 0 < before["eval/dpo/pref_accuracy"] < 1 and "eval/macro/loss" in before  # forgetting, measured
    with RunReader(run_dir) as reader:
        steps, losses = reader.scalars("dpo/loss")
        _, margins = reader.scalars("dpo/reward_margin")
        _, accuracy = reader.scalars("dpo/accuracy")
        assert reader.scalars("train/loss")[1] == losses
        _, heldout = reader.scalars("eval/dpo/pref_accuracy")
    assert losses[0] == pytest.approx(math.log(2), abs=1e-6)  # step 1: the model is still its reference
    assert steps[-1] == 12 and sum(margins[-3:]) / 3 > 0.05 and sum(accuracy[-3:]) / 3 > 0.6
    assert sum(losses[-3:]) / 3 < math.log(2) - 0.02
    assert len(heldout) >= 1 and "eval/dpo/pref_accuracy: " in done.stdout and "export:" in done.stdout
