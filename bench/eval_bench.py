"""Task evals: our scorer against lm-eval-harness, their cost in training, and the accuracy back-test.

1. Speed: one exported model (the demo's hero architecture; a tiny one with ``--smoke``) and one
   built-in task, scored in this process by lm-eval (``simple_evaluate`` on the folder) and by
   glasslab (``glasslab eval``'s path: load the folder, tokenize, score), end to end, interleaved over 5
   rounds (1 in a smoke); items per second of each and the median of the rounds' ratios. Our scorer on
   our own model in memory (what the trainer runs) is printed beside it. Every item's answer is compared too.
2. Cost: for every run of the demo (rungs with their seeds, and the hero), the time of one training
   step and of one scoring of the demo's tasks, on the demo's data; at the demo's cadence
   (``DemoSize.task_eval_every``: every 5th of 20 evaluations in the full demo, i.e. every 25% of
   training, and at the end) the task evals' share of training time, summed over the demo's runs; the
   steps and the scorings interleaved over 5 rounds (1 in a smoke), the share the median of the rounds'.
3. Back-test: with ``--lab LAB`` (a lab where ``glasslab demo`` ran), the accuracy prediction's
   leave-last-rung-out error in points, from the ladder's fit.json.

    python bench/eval_bench.py [--smoke] [--lab LAB] [--threads 1]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from interleave import LoadWatch, headline, interleaved, paired_ratios

from glasslab.data.build import build_dataset
from glasslab.data.tokenizer import EOT, load_tokenizer
from glasslab.evals.load import TaskScorer, load_tasks
from glasslab.evals.step import EvalStepConfig, load_model
from glasslab.experiments.demo import FULL, MIXTURE, QUICK, TASKS, DemoSize, build_config, plan, train_recipe
from glasslab.ladder.steps import run_config_for
from glasslab.layout import FIT_FILE
from glasslab.model import export_hf
from glasslab.train.build import build_parts
from glasslab.train.distributed import DistContext
from glasslab.train.evals import tasks_due
from glasslab.train.loop import Trainer


def speed(dataset: Path, work: Path, size: DemoSize, repeats: int, max_items: int) -> dict:
    """Items per second of lm-eval and of glasslab (the export through transformers, and our own model) on the
    same exported model and task (its first ``max_items``, 0 = all), the three interleaved over ``repeats``
    rounds (bench/interleave.py)."""
    from glasslab.evals.harness import lm_eval_items

    hero = plan(size).hero
    run_cfg = run_config_for(hero, 0, MIXTURE, train_recipe(size))
    run_cfg = dataclasses.replace(run_cfg, data=dataclasses.replace(run_cfg.data, path=str(dataset)))
    parts = build_parts(run_cfg, DistContext())
    model = parts.model.eval()
    export = work / "export"
    export_hf(model, model.cfg, dataset / "tokenizer", export)
    (task,) = load_tasks([dataclasses.replace(TASKS[0], max_items=max_items)], dataset)
    tokenizer = load_tokenizer(dataset)

    n = len(task.items)
    scored: dict = {}
    lm_eval_runs = itertools.count()

    def items_per_second(name: str, score: Callable[[], object]) -> Callable[[], float]:
        def rate() -> float:
            started = time.perf_counter()
            scored[name] = score()
            return n / (time.perf_counter() - started)
        return rate

    def score_hf():  # loading the export is part of an eval step's time, as it is of lm-eval's
        hf_model, hf_tokenizer, prefix_id, _, _ = load_model(EvalStepConfig(model=str(export), tasks=(TASKS[0],)))
        return TaskScorer([task], hf_tokenizer, prefix_id)(hf_model)[1][0]

    rounds = interleaved({
        "ours_hf": items_per_second("ours_hf", score_hf),
        "ours_native": items_per_second("ours", lambda: TaskScorer([task], tokenizer, tokenizer.token_to_id(EOT))(
            model)[1][0]),
        "lm_eval": items_per_second("theirs", lambda: lm_eval_items(  # a fresh folder: no datasets cache
            export, task, work / f"lm-eval-{next(lm_eval_runs)}", batch_size=64)),
    }, repeats)
    ours_hf, ours, theirs = scored["ours_hf"], scored["ours"], scored["theirs"]
    agree = sum(int(np.argmax(lls) == item.answer) == t["acc"]
                for item, lls, t in zip(task.items, ours_hf.loglikelihoods, theirs, strict=True))
    return {"items": n, "model": hero.size_name, "rounds_items_per_second": rounds,
            "ours_hf_vs_lm_eval": paired_ratios(rounds["ours_hf"], rounds["lm_eval"]),
            "ours_native_vs_lm_eval": paired_ratios(rounds["ours_native"], rounds["lm_eval"]),
            "items_same_answer": f"{agree}/{n}", "native_acc": ours.acc, "hf_acc": ours_hf.acc,
            "lm_eval_acc": float(np.mean([t["acc"] for t in theirs]))}


def cost(dataset: Path, size: DemoSize, timed_steps: int, repeats: int, smoke: bool) -> dict:
    """Task evals' share of training time over the demo's runs (the first rung and the hero in a smoke) at the
    demo's task cadence: per run, a
    training step's median time and one scoring of the tasks, interleaved over ``repeats`` rounds
    (``timed_steps`` steps in all; bench/interleave.py). Returns each round's share and the last round's
    figures per run."""
    recipe = train_recipe(size)
    demo = plan(size)
    eval_s, train_s = [0.0] * repeats, [0.0] * repeats
    per_run = {}
    for rung in [demo.rungs[0], demo.hero] if smoke else [*demo.rungs, demo.hero]:
        run_cfg = run_config_for(rung, 0, MIXTURE, recipe)
        run_cfg = dataclasses.replace(run_cfg, data=dataclasses.replace(run_cfg.data, path=str(dataset)))
        cfg = run_cfg.train
        parts = build_parts(run_cfg, DistContext())
        with tempfile.TemporaryDirectory() as run_dir:
            trainer = Trainer(cfg, parts, None, Path(run_dir), DistContext(), {}, peak_flops=1e12)
            for _ in range(2):  # warm-up
                trainer.train_step()
            rounds = interleaved({"step_s": functools.partial(step_seconds, trainer, max(1, timed_steps // repeats)),
                                  "task_s": functools.partial(task_seconds, parts, trainer.model, cfg.total_steps)},
                                 repeats)
        eval_steps = range(cfg.eval_interval, cfg.total_steps, cfg.eval_interval)
        task_evals = sum(tasks_due(s, cfg) for s in eval_steps) + 1
        seeds = len(rung.seeds) if rung.role == "rung" else 1
        for r in range(repeats):
            eval_s[r] += seeds * task_evals * rounds["task_s"][r]
            train_s[r] += seeds * cfg.total_steps * rounds["step_s"][r]
        step_s, task_s = rounds["step_s"][-1], rounds["task_s"][-1]
        per_run[rung.name] = {"step_s": step_s, "task_eval_s": task_s, "task_evals": task_evals,
                              "fraction": task_evals * task_s / (cfg.total_steps * step_s)}
    return {"fractions": [e / t for e, t in zip(eval_s, train_s, strict=True)], "per_run": per_run}


def step_seconds(trainer: Trainer, steps: int) -> float:
    """The median seconds of ``steps`` training steps."""
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        trainer.train_step()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def task_seconds(parts, model, last_step: int) -> float:
    """Seconds of one scoring of the tasks: an evaluation with them (due at ``last_step``) less one without."""
    started = time.perf_counter()
    parts.evaluate(model, last_step)  # held-out loss and the tasks (due at the end)
    with_tasks = time.perf_counter() - started
    started = time.perf_counter()
    parts.evaluate(model, 1)  # held-out loss only
    return max(with_tasks - (time.perf_counter() - started), 0.0)


def backtest(lab: Path) -> float | None:
    """The mean over tasks of |leave-last-rung-out error| in points, from the lab's ladder fit."""
    for fit_path in sorted(lab.glob(f"*/{FIT_FILE}")):
        tasks = json.loads(fit_path.read_text()).get("tasks") or {}
        if tasks.get("backtest_mean_abs_error_points") is not None:
            for name, law in tasks["by_task"].items():
                b = law["backtest"]
                print(f"  {name}: held out {b['held_out']}: predicted {b['point']:.3f} [{b['lo']:.3f}, "
                      f"{b['hi']:.3f}], measured {b['measured']:.3f} ({b['error_points']:+.1f} points)")
            return tasks["backtest_mean_abs_error_points"]
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="the quick demo's sizes, a 64-item task, 1 round, "
                        "the cost over the first rung and the hero")
    parser.add_argument("--lab", type=Path, default=None, help="a lab where the demo ran (for the back-test)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--steps", type=int, default=None, help="training steps timed per run, over the rounds")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    size = QUICK if args.smoke else FULL
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        dataset = build_dataset(dataclasses.replace(build_config(size), num_workers=1), work / "data", progress=False)
        repeats = 1 if args.smoke else 5  # a smoke as fast as before
        measured = speed(dataset, work, size, repeats, 64 if args.smoke else 0)
        spent = cost(dataset, size, args.steps or (5 if args.smoke else 20), repeats, args.smoke)
    error = backtest(args.lab) if args.lab else None
    print(json.dumps({"speed": measured, "cost": spent}, indent=1), file=sys.stderr)
    print(f"items_same_answer_as_lm_eval: {measured['items_same_answer']}")
    print(f"ours_native_items_per_second_ratio_vs_lm_eval: {headline(measured['ours_native_vs_lm_eval'], 'context')}")
    print(f"eval_items_per_second_ratio_vs_lm_eval: {headline(measured['ours_hf_vs_lm_eval'], 'target >= 1')}")
    print(f"eval_cost_fraction_of_training: {headline(spent['fractions'], 'target <= 0.1', digits=3)}")
    print("eval_task_backtest_abs_error_points: "
          + (f"{error:.2f}" if error is not None else "not measured (pass --lab LAB, a lab where the demo ran)"))


if __name__ == "__main__":
    with LoadWatch():
        main()
