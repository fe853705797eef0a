"""``glasslab eval MODEL[@STEP] --tasks ...``: score downstream tasks on a run or a model folder.

    glasslab eval demo-hero-1a2b3c4d --tasks next_word:code continuation:prose   # a run's newest checkpoint
    glasslab eval lab/my-run@200 --tasks my_task.jsonl --fewshot 5                # a checkpoint of a run
    glasslab eval lab/export-1a2b3c4d --tasks next_word:code                      # an export (glasslab export)
    glasslab eval ~/models/pythia-70m --tasks items.jsonl                         # any HF model folder

A one-step experiment: the result is ``<lab>/eval-<model>-<hash8>/result.json``.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from glasslab.cli.options import add_lab_option
from glasslab.errors import UserError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval", help="score downstream tasks on a run's checkpoint or a model folder",
        description="Score multiple-choice tasks by log-likelihood (acc, acc_norm, bits per byte of the right "
        "answer), as lm-eval-harness does. MODEL is a run id under the lab, a run folder (optionally @STEP), "
        "an export (glasslab export; built-in tasks from its run's dataset), or any folder transformers loads "
        "(a causal LM on disk as a baseline; built-in tasks then need --data).",
    )
    p.add_argument("model", metavar="MODEL[@STEP]", help="run id, run folder, export folder, or model folder")
    p.add_argument("--tasks", nargs="+", required=True, metavar="TASK",
                   help="built-in NAME:DOMAIN (next_word, continuation, docstring), a JSONL file of items, "
                   "or a YAML/JSON task config")
    p.add_argument("--data", default="", help="dataset folder for built-in tasks (default: the run's or the export's)")
    p.add_argument("--fewshot", type=int, default=None, help="solved examples before each question")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where to run the model")
    add_lab_option(p)
    p.set_defaults(func=run)


def task_config(spec: str, fewshot: int | None):
    """A TaskConfig from ``NAME[:DOMAIN]``, a ``.jsonl`` file, or a YAML/JSON task config file."""
    from glasslab import config as configs
    from glasslab.evals.task import TaskConfig

    overrides = {} if fewshot is None else {"num_fewshot": fewshot}
    suffix = Path(spec).suffix
    if suffix in (".yaml", ".yml", ".json"):
        return configs.from_dict(TaskConfig, {**configs.read_file(spec), **overrides}, "task")
    if suffix == ".jsonl":
        return TaskConfig(path=spec, **overrides)
    name, _, domain = spec.partition(":")
    return TaskConfig(builtin=name, domain=domain, **overrides)


def split_model(lab: str, text: str) -> tuple[Path, int]:
    """(folder, step or -1) from ``MODEL[@STEP]``; MODEL is a folder or a run id under ``lab``."""
    model, sep, step = text.rpartition("@")
    if not (sep and step.isdigit()):
        model, step = text, ""
    for candidate in (Path(model), Path(lab) / model):
        if candidate.is_dir():
            return candidate, int(step) if step else -1
    raise UserError(f"model {text!r}: no folder at {model} or {Path(lab) / model}")


def run(args: argparse.Namespace) -> int:
    from glasslab.evals.load import check_task
    from glasslab.evals.step import EvalStepConfig, eval_step, model_kind
    from glasslab.lab import Step, run_one_step
    from glasslab.layout import RESULT_FILE, RUN_RECORD, read_json

    folder, step = split_model(args.lab, args.model)
    kind = model_kind(folder)
    tasks = tuple(task_config(spec, args.fewshot) for spec in args.tasks)
    # Built-in tasks come from the dataset the model trained on: a run's data.path, an export's manifest.
    if args.data:
        dataset = str(Path(args.data).resolve())
    elif kind == "export":
        from glasslab.data.handle import dataset_trained_on
        from glasslab.model.load import find_model

        source = find_model(str(folder), args.lab)
        dataset = str(dataset_trained_on(source) or "")
    else:
        dataset = ""
    record = read_json(folder / RUN_RECORD) if kind == "run" else None
    # Bad tasks fail here with one line, before a step folder exists.
    for task in tasks:
        check_task(task, dataset or (record or {}).get("config", {}).get("data", {}).get("path") or None)
    cfg = EvalStepConfig(model=str(folder.resolve()), tasks=tasks, step=step, data=dataset, device=args.device)
    name = "eval-" + (re.sub(r"[^A-Za-z0-9_.]+", "-", folder.resolve().name).strip("-") or "model")
    done = run_one_step(Step(name, eval_step, cfg), args.lab)
    result = read_json(done.folder / RESULT_FILE)
    print(f"{'task':<28} {'items':>6} {'chance':>7} {'acc':>7} {'acc_norm':>9} {'bpb':>7}")
    for task, r in result["tasks"].items():
        print(f"{task:<28} {r['items']:>6} {r['chance']:>7.3f} {r['acc']:>7.3f} {r['acc_norm']:>9.3f} {r['bpb']:>7.3f}")
    print(f"macro acc {result['macro_acc']:.3f}  ({result['items_per_second']:.0f} items/s"
          + (", cached" if done.status == "cached" else "") + f")  {done.folder / RESULT_FILE}")
    return 0
