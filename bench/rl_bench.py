"""RL with verifiable rewards in numbers: what GRPO buys on the built-in arithmetic task, and what it costs.

A base (``--base RUN[@STEP]`` in ``--lab``, else a small dense model trained here on the demo's data) is first tuned
briefly on the arithmetic task's training problems as conversations (question -> answer; ``glasslab sft BASE
builtin:arithmetic``): a *task SFT*, so
that the RL run starts where the issue fixes it, between 10% and 50% held-out pass@1 (the SFT steps,
``--sft-steps``, set that start; the line ``rl_start_pass_at_1`` says where it landed). Then
``glasslab rl SFT builtin --reward builtin:arithmetic`` runs as steps in the lab (found cached when they are
there), and the RL run's held-out pass@1 (greedy, held-out problems none of the training prompts ask) before
and after is the headline, in points.

``rl_minutes_demo`` is the wall time of the RL step (the demo would add it). ``rl_rollout_tokens_per_s_vs_trl``
is ours over TRL's: completion tokens per second of whole GRPO steps after the first (rollouts, rewards and the
update; ours from each step's ``throughput/tokens_per_second``, which times the loader's rollouts too, TRL's
from a callback's clock around each step) when TRL's
``GRPOTrainer`` (the ``bench`` extra: ``pip install -e ".[bench]"``) runs the same number of steps on the
task-SFT model's export, with the same task, batch (8 prompts × G), answer length, temperature, LR and β:
each round a fresh RL run of ours (a new seed) then TRL's, ``--trl-steps`` steps a side, interleaved over
``--trl-rounds`` rounds (median and spread of the per-round ratios); without TRL the line says so.

    python bench/rl_bench.py [--smoke] [--lab LAB] [--base RUN] [--base-steps 150] [--sft-steps 300]
                              [--rl-steps 60] [--rl-lr 1e-4] [--rl-temperature 1.0]
                              [--group-size 8] [--trl-steps 10] [--trl-rounds 5] [--threads 0]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import itertools
import statistics
import tempfile
import time
from pathlib import Path

import torch
from interleave import LoadWatch, headline, interleaved, paired_ratios

from glasslab.data.reference import DatasetRef
from glasslab.experiments.demo import QUICK, VOCAB_SIZE, data_step
from glasslab.lab import Step, run_one_step
from glasslab.posttrain.outcome import outcome
from glasslab.posttrain.plans import sft_steps
from glasslab.posttrain.rewards_builtin import arithmetic_problems, split_problems
from glasslab.posttrain.rl_plans import rl_steps
from glasslab.posttrain.rl_step import RLStepConfig
from glasslab.posttrain.sft import SFTStepConfig
from glasslab.track import RunReader


def base_step(smoke: bool, steps: int) -> Step:
    """A dense base trained here on the demo's quick data: 2 layers of width 32 for ``--smoke``, else 4 of 64
    (dense: on a shared 2-core machine a tiny MoE's grouped matmuls cost most of its time)."""
    from glasslab.config import from_dict
    from glasslab.train.run_config import RunConfig
    from glasslab.train.steps import TrainStepConfig, train_step

    data = data_step(QUICK)
    width, layers = (32, 2) if smoke else (64, 4)
    model = {"vocab_size": VOCAB_SIZE, "d_model": width, "n_layers": layers, "n_heads": 4, "n_kv_heads": 4,
             "d_ff": 2 * width}
    run = from_dict(RunConfig, {
        "model": model,
        "data": {"mixture": {"weights": {"code": 0.75, "prose": 0.18, "reference": 0.07}}},
        "train": {"seq_len": 128, "global_batch_tokens": 128 * 16, "max_steps": steps, "checkpoint_interval": steps,
                  "sample_prompts": [], "eval_max_tokens": 256 if smoke else 1024, "optimizer": {"lr": 3e-3}}})
    return Step("rl-bench-base", train_step, TrainStepConfig(run=run, data=DatasetRef.of_build(data)))


def task_sft(lab: Path, base: str, steps: int, threads: int, smoke: bool) -> list[Step]:
    cfg = SFTStepConfig(threads=threads)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, seq_len=32, global_batch_tokens=32 * 32,
                                                             max_steps=steps, checkpoint_interval=steps,
                                                             eval_max_tokens=256, sample_max_new_tokens=8),
                              sft=dataclasses.replace(cfg.sft, eval_max_conversations=32 if smoke else 256))
    return sft_steps(base, ["builtin:arithmetic"], lab, cfg=cfg)[1:]


def rl_run(lab: Path, sft: Path, steps: int, lr: float, threads: int, smoke: bool, temperature: float = 1.0,
           group: int = 8, seed: int = 0) -> tuple[Path, float]:
    cfg = RLStepConfig(threads=threads)
    train = dataclasses.replace(cfg.train, seq_len=40, max_steps=steps, checkpoint_interval=steps, seed=seed,
                                optimizer=dataclasses.replace(cfg.train.optimizer, lr=lr),
                                eval_interval=max(1, steps // 3), global_batch_tokens=40 * (16 if smoke else 8 * group),
                                eval_max_tokens=256)
    rl = dataclasses.replace(cfg.rl, group_size=4 if smoke else group, max_new_tokens=5, temperature=temperature,
                             eval_max_prompts=8 if smoke else 200)
    plan = rl_steps(str(sft), ["builtin"], lab, cfg=dataclasses.replace(cfg, train=train, rl=rl))
    started = time.perf_counter()
    done = run_one_step(plan[1], lab)
    return done.folder, time.perf_counter() - started


def ours_tokens_per_s(run_dir: Path, rollouts: int, step_tokens: int) -> float:
    """Completion tokens per second over the RL run's steps after its first (a warm-up, as on TRL's side): each
    step's ``rollouts`` × mean answer length over its time (``step_tokens`` / its ``throughput/tokens_per_second``)."""
    with RunReader(run_dir) as reader:
        lengths, speeds = reader.scalars("rl/completion_tokens")[1], reader.scalars("throughput/tokens_per_second")[1]
    return rollouts * sum(lengths[1:]) / sum(step_tokens / v for v in speeds[1:])


def trl_tokens_per_s(export: Path, steps: int, args: argparse.Namespace, rows: int, group: int) -> float:
    """Completion tokens per second of TRL's ``GRPOTrainer`` over ``steps`` steps on ``export``, the first left
    out as a warm-up: each step timed from its start to its end (its rollouts, rewards and update) by a
    trainer callback."""
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    class StepClock(TrainerCallback):
        def __init__(self):
            self.seconds: list[float] = []

        def on_step_begin(self, *_, **__):
            self.started = time.perf_counter()

        def on_step_end(self, *_, **__):
            self.seconds.append(time.perf_counter() - self.started)

    train_set, _ = split_problems(arithmetic_problems())
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": p["prompt"]}], "answer": p["answer"]}
                              for p in train_set])

    def reward(completions, answer, **_):
        return [float(c[0]["content"].strip() == a) for c, a in zip(completions, answer, strict=True)]

    with tempfile.TemporaryDirectory() as out:
        cfg = GRPOConfig(output_dir=out, per_device_train_batch_size=rows, num_generations=group,
                         max_completion_length=5, max_steps=steps, use_cpu=True, logging_steps=1, report_to=[],
                         learning_rate=args.rl_lr, beta=0.02, temperature=args.rl_temperature, save_strategy="no")
        clock = StepClock()
        trainer = GRPOTrainer(model=str(export), reward_funcs=reward, args=cfg, train_dataset=data,
                              processing_class=AutoTokenizer.from_pretrained(export), callbacks=[clock])
        trainer.train()
    lengths = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
    return rows * sum(lengths[1:]) / sum(clock.seconds[1:])


def trl_line(lab: Path, sft_plan: list[Step], sft: Path, args: argparse.Namespace) -> str:
    """The ``rl_rollout_tokens_per_s_vs_trl`` line: ours over TRL's, each round a fresh RL run of ours (a new
    seed, so a new step) and then TRL's, both ``--trl-steps`` steps, over ``--trl-rounds`` rounds; or why it
    is not measured."""
    if importlib.util.find_spec("trl") is None:
        return "not measured  (TRL not installed: pip install -e \".[bench]\")"
    if len(sft_plan) < 2:
        return "not measured  (the base has no transformers export for TRL to load)"
    export = run_one_step(sft_plan[-1], lab).folder
    rows, group = (16, 4) if args.smoke else (8 * args.group_size, args.group_size)
    steps, seeds = 2 if args.smoke else args.trl_steps, itertools.count(1000)

    def ours() -> float:
        run_dir, _ = rl_run(lab, sft, steps, args.rl_lr, args.threads, args.smoke, args.rl_temperature,
                            args.group_size, seed=next(seeds))
        return ours_tokens_per_s(run_dir, rows, 40 * rows)

    rounds = interleaved({"ours": ours, "trl": lambda: trl_tokens_per_s(export, steps, args, rows, group)},
                         1 if args.smoke else args.trl_rounds)
    note = (f"ours {statistics.median(rounds['ours']):,.0f}, TRL {statistics.median(rounds['trl']):,.0f} completion "
            f"tokens/s of whole GRPO steps, {steps} steps a side a round; target >= 1")
    return headline(paired_ratios(rounds["ours"], rounds["trl"]), note)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a tiny base and a few steps: checks the bench runs")
    parser.add_argument("--lab", default=None, help="the lab (default: a temp folder)")
    parser.add_argument("--base", default=None, help="a run in the lab to start from (default: train one here)")
    parser.add_argument("--base-steps", type=int, default=150, help="pretraining steps of the base trained here")
    parser.add_argument("--sft-steps", type=int, default=300, help="task SFT steps before RL")
    parser.add_argument("--rl-steps", type=int, default=60, help="GRPO steps")
    parser.add_argument("--rl-lr", type=float, default=1e-4, help="GRPO's peak learning rate")
    parser.add_argument("--rl-temperature", type=float, default=1.0, help="the rollouts' sampling temperature")
    parser.add_argument("--group-size", type=int, default=8, help="rollouts per prompt (8 prompts per step)")
    parser.add_argument("--trl-steps", type=int, default=10, help="GRPO steps a side in each round against TRL")
    parser.add_argument("--trl-rounds", type=int, default=5, help="rounds of ours then TRL's (interleaved)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    base_count, sft_count, rl_count = (20, 4, 3) if args.smoke else (args.base_steps, args.sft_steps, args.rl_steps)
    with contextlib.ExitStack() as stack:
        lab = Path(args.lab) if args.lab else Path(stack.enter_context(tempfile.TemporaryDirectory())) / "lab"
        base = args.base or run_one_step(base_step(args.smoke, base_count), lab).folder.name
        sft_plan = task_sft(lab, base, sft_count, args.threads, args.smoke)
        sft = run_one_step(sft_plan[0], lab).folder
        run_dir, seconds = rl_run(lab, sft, rl_count, args.rl_lr, args.threads, args.smoke, args.rl_temperature,
                                  args.group_size)
        out = outcome(run_dir)
        print(f"RL run {run_dir.name}: {out['key']} {out['before']:.3f} -> {out['after']:.3f} in {rl_count} steps")
        trl = trl_line(lab, sft_plan, sft, args)
    print(f"rl_start_pass_at_1: {100 * out['before']:.1f}  (after the task SFT; target 10-50)")
    print(f"rl_heldout_pass_at_1_gain_points: {100 * (out['after'] - out['before']):+.1f}  (builtin:arithmetic, "
          "held-out problems, greedy; target >= +20)")
    print(f"rl_rollout_tokens_per_s_vs_trl: {trl}")
    print(f"rl_minutes_demo: {seconds / 60:.2f}  (the RL step's wall time; 0 when found cached; target <= 2)")


if __name__ == "__main__":
    with LoadWatch():
        main()
