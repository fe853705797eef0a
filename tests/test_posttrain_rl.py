"""RL with verifiable rewards: group advantages (failed rewards leave their group), reward files that raise,
hang or return no number (named file:line and counted), code answers that crash or hang (scored 0, counted),
and `glasslab rl` with a user's prompts and reward file on a real tiny base, killed with SIGKILL and resumed
to the same numbers bit for bit."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from cli_runner import run_cli, subprocess_env
from glasslab.config import from_dict
from glasslab.posttrain.grpo import GRPO, collate_rollouts, group_advantages
from glasslab.posttrain.rewards import RewardFile
from glasslab.posttrain.rewards_builtin import Arithmetic, arithmetic_problems, split_problems
from glasslab.posttrain.rewards_code import CodeTests
from glasslab.track import RunReader, read_record
from glasslab.train.run import train
from glasslab.train.run_config import RunConfig
from train_data import build_tiny_dataset, tiny_run_config


def test_advantages_are_relative_to_the_group_and_a_failed_reward_leaves_it():
    advantages, no_spread = group_advantages([1.0, 0.0, None, 0.0, 0.5, 0.5, 0.5, None], group_size=4)
    kept = torch.tensor([1.0, 0.0, 0.0])
    expected = ((kept - kept.mean()) / (kept.std(unbiased=False) + 1e-4)).tolist()
    assert advantages[2] is None and advantages[7] is None
    assert advantages[:2] + advantages[3:4] == pytest.approx(expected, rel=1e-6)
    assert advantages[4:7] == [0.0, 0.0, 0.0] and no_spread == 1  # the second group has nothing to compare


def test_a_failed_sample_gets_no_loss_and_the_loss_is_the_policy_gradient():
    prompts, completions = [[1, 2], [1, 2], [3]], [[4, 5], [6], [7, 8]]
    batch = collate_rollouts(prompts, completions, [1.0, None, -0.5], pad_id=0, normalise="token")
    assert batch.loss_units == 4 and (batch.targets_BT[1] == -100).all()  # row 1's reward failed
    table = torch.nn.Parameter(torch.randn(9, 9))

    class Bigram(torch.nn.Module):
        def forward(self, tokens_BT, real_BT=None):
            return table[tokens_BT]

    objective = GRPO(Bigram(), kl_coef=0.0, clip_eps=0.2, normalise="token")
    objective.loss_tokens(batch)
    (objective.nats(Bigram(), batch, contextlib.nullcontext) / batch.loss_units).backward()
    logp = torch.log_softmax(table.detach(), dim=-1)
    assert table.grad[2, 4] < 0 and table.grad[8, 7] == 0  # the good answer's token is pushed up
    assert table.grad[3, 7] > 0 and table.grad[1, 6] == 0  # the bad one's down; the failed one untouched
    grad_up = -(1.0 * (1 - logp[2, 4].exp())) / 4  # d(-A log p)/d logit, averaged over 4 tokens
    assert float(table.grad[2, 4]) == pytest.approx(float(grad_up), rel=1e-5)
    assert objective.metrics(0.0, batch)["rl/kl"] == pytest.approx(0.0, abs=1e-6)


REWARD = '''
import time

def reward(prompt, completion):
    if completion == "raise":
        raise ValueError("no good")
    if completion == "hang":
        time.sleep(60)
    if completion == "text":
        return "high"
    return float(completion == prompt["answer"])
'''


def test_a_reward_file_that_raises_hangs_or_returns_text_is_named_and_counted(tmp_path):
    path = tmp_path / "my_reward.py"
    path.write_text(REWARD)
    task = RewardFile(path, timeout_s=1.0)
    try:
        scores = task.score([{"prompt": "1+1", "answer": "2"}] * 5, ["2", "raise", "hang", "text", "3"])
    finally:
        task.close()
    assert scores.values == [1.0, None, None, None, 0.0]
    raised, hung, text = scores.failures
    assert raised.startswith(f"{path}:6: ") and "ValueError: no good" in raised
    assert hung.startswith(f"{path}:8: ") and "did not return within 1 s" in hung
    assert "returned 'high', expected a finite number" in text


def test_code_answers_that_crash_or_hang_score_zero_and_are_counted():
    record = {"prompt": "f", "tests": "assert f(2) == 4"}
    answers = ["```python\ndef f(x):\n    return x * 2\n```", "def f(x): return x", "def f(x): raise SystemExit(3)",
               "import time\ndef f(x):\n    while True: pass", "def f(x):\n    return len(bytearray(10**9))"]
    scores = CodeTests().score([record] * 5, answers)  # a crash, a hang, over the memory limit: 0, counted
    assert scores.values == [1.0, 0.0, 0.0, 0.0, 0.0] and scores.answer_failures == 3


def test_arithmetic_holds_out_whole_problems_and_checks_the_exact_answer():
    train_set, heldout = split_problems(arithmetic_problems())
    assert not {p["prompt"] for p in train_set} & {p["prompt"] for p in heldout}
    assert len(heldout) == pytest.approx(len(arithmetic_problems()) / 10, abs=1)
    record = {"prompt": "What is 7 * 8?", "answer": "56"}
    assert Arithmetic().score([record] * 3, ["56", "It is 56.", "5 6"]).values == [1.0, 1.0, 0.0]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("rl")
    dataset = build_tiny_dataset(root)
    train(from_dict(RunConfig, tiny_run_config(dataset, max_steps=4, checkpoint_interval=4)), root / "base")
    return root / "base"


MY_REWARD = '''
def reward(prompt, completion):
    return float(completion.strip() == prompt["answer"])
'''


def _user_task(folder: Path) -> tuple[Path, Path]:
    """A user's task as the README writes it: a JSONL of prompts and a reward file."""
    prompts, reward = folder / "prompts.jsonl", folder / "my_reward.py"
    prompts.write_text("".join(json.dumps({"prompt": f"What is {a} + {b}?", "answer": str(a + b)}) + "\n"
                               for a in range(8) for b in range(8)))
    reward.write_text(MY_REWARD)
    return prompts, reward


def _rl_args(base: Path, lab: Path, steps: int = 6) -> list[str]:
    prompts, reward = _user_task(lab.parent)
    return ["rl", str(base), str(prompts), "--reward", str(reward), "--group-size", "4", "--steps", str(steps),
            "--seq-len", "40", "train.global_batch_tokens=320", "rl.max_new_tokens=5", "rl.eval_max_prompts=6",
            "train.checkpoint_interval=2", "train.keep_last=10", "train.eval_interval=3", "train.eval_max_tokens=64",
            "train.optimizer.lr=3e-3", "--lab", str(lab)]


def _series(run_dir: Path) -> dict[str, list[float]]:
    with RunReader(run_dir) as reader:
        return {key: reader.scalars(key)[1] for key in ("rl/loss", "rl/reward_mean", "rl/kl", "rl/entropy",
                                                        "rl/completion_tokens")}


@pytest.mark.slow
def test_glasslab_rl_with_a_users_reward_logs_its_metrics_and_a_sigkill_resumes_bit_for_bit(base, tmp_path):
    done = run_cli(*_rl_args(base, tmp_path / "whole"), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (tmp_path / "whole").glob("rl-*")
    record = read_record(run_dir)
    assert record["role"] == "rl" and record["reward"] == "my_reward.py" and record["group_size"] == 4
    assert record["prompts"] == {"train": {"prompts": 57}, "heldout": {"prompts": 6}}  # 7 of 64 held out, 6 kept
    assert "eval/rl/pass_at_1" in record["base"]["metrics"]
    whole = _series(run_dir)
    assert len(whole["rl/loss"]) == 6 and all(0 < n <= 5 for n in whole["rl/completion_tokens"])
    assert all(k >= -1e-6 for k in whole["rl/kl"]) and whole["rl/kl"][0] == pytest.approx(0.0, abs=1e-5)
    with RunReader(run_dir) as reader:
        assert len(reader.scalars("eval/rl/pass_at_4")[1]) >= 2 and reader.scalars("rl/groups_no_spread")[1]
    assert "eval/rl/pass_at_1: " in done.stdout

    lab = tmp_path / "killed"
    args = [sys.executable, "-m", "glasslab", *_rl_args(base, lab)]
    process = subprocess.Popen(args, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    deadline = time.monotonic() + 300
    while not list(lab.glob("rl-*/checkpoints/step-0000002")) and time.monotonic() < deadline:
        time.sleep(0.05)
    import os

    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    (killed_dir,) = lab.glob("rl-*")
    assert not (killed_dir / "result.json").exists()  # killed before it finished
    resumed = run_cli(*_rl_args(base, lab), timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _series(killed_dir) == whole  # the same rollouts, rewards and losses, bit for bit


def _tiny_base_step(ctx) -> Path:
    """A lab step that trains a tiny base into its folder (stands in for the demo's DPO model)."""
    dataset = build_tiny_dataset(Path(ctx.output_dir) / "data")
    train(from_dict(RunConfig, tiny_run_config(dataset, max_steps=4, checkpoint_interval=4)), ctx.output_dir)
    return Path(ctx.output_dir)


def test_the_demos_rl_stage_tunes_its_base_on_the_arithmetic_task_and_the_table_shows_pass_at_1(tmp_path):
    from glasslab.cli.demo import posttrain_table
    from glasslab.experiments.demo import QUICK, RL_STEP, TASK_SFT_STEP, posttrain_steps, rl_stage
    from glasslab.lab import Step, run_one_step
    from glasslab.posttrain.outcome import outcome

    steps = {s.name: s for s in posttrain_steps(QUICK, Step("data", _tiny_base_step), Step("hero", _tiny_base_step))}
    assert [d.name for d in steps[TASK_SFT_STEP].deps] == ["demo-dpo", "demo-task-conversations"]
    assert [d.name for d in steps[RL_STEP].deps] == [TASK_SFT_STEP, "demo-prompts"]
    assert steps["demo-pairs"].config.describe is False and steps["demo-pairs"].config.arithmetic is True
    stage = rl_stage(dataclasses.replace(QUICK, task_sft_steps=2, rl_steps=2), Step("tiny-base", _tiny_base_step))
    rl = run_one_step(stage[-1], tmp_path / "lab").folder
    task_sft = next((tmp_path / "lab").glob(f"{TASK_SFT_STEP}-*"))
    assert read_record(rl)["parent"]["run"] == task_sft.name
    record, out = read_record(rl), outcome(rl)
    assert record["role"] == "rl" and record["reward"] == "builtin:arithmetic" and record["group_size"] == 8
    assert record["prompts"]["heldout"]["prompts"] == len(split_problems(arithmetic_problems())[1])
    assert out["key"] == "eval/rl/pass_at_1" and out["before"] is not None and out["after"] is not None
    with RunReader(rl) as reader:
        assert len(reader.scalars("rl/reward_mean")[1]) == 2
    # The demo's table: the RL row beside SFT's and DPO's (the tiny base stands in for both here).
    from rich.console import Console

    console = Console(width=300, record=True)
    console.print(posttrain_table({"demo-sft": rl, "demo-dpo": rl, TASK_SFT_STEP: task_sft, RL_STEP: rl}))
    text = console.export_text()
    assert "held-out answer loss (DPO -> task SFT)" in text and "pass@1 (task SFT -> RL)" in text
