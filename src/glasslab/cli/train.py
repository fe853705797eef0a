"""``glasslab train CONFIG [KEY=VALUE ...]``: train a model into a run folder (resume, fork, torchrun).

    glasslab train run.yaml train.max_steps=200 --lab lab          # lab/run-<hash8>/
    glasslab train run.yaml --run-dir lab/my-run --resume           # after a crash or preemption
    glasslab train --fork my-run@200 data.mixture.weights.code=0.5  # a new run from my-run's step 200
    torchrun --nproc_per_node=2 -m glasslab train run.yaml --run-dir lab/ddp
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from glasslab.cli.options import add_lab_option
from glasslab.errors import UserError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train", help="train a model from a run config",
        description="Train a dense or MoE model from a run config ({model, data, train}) plus dotted "
        "overrides. The run folder gets run.json, metrics.db, checkpoints/ and result.json. Under torchrun "
        "every rank runs this command.",
    )
    p.add_argument("items", nargs="*", metavar="CONFIG|KEY=VALUE",
                   help="a run config file (YAML or JSON), then overrides such as train.optimizer.lr=3e-3")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--run-dir", help="the run folder (default: <lab>/<config name>-<config hash>)")
    add_lab_option(where, "lab root for the default run folder")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true", help="continue the run from its latest intact checkpoint")
    mode.add_argument("--fork", metavar="RUN@STEP",
                      help="start a new run from RUN's checkpoint at STEP with the given changes")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where to train (default cpu)")
    p.add_argument("--example", choices=("dense", "moe"), default=None,
                   help="print a complete, commented run config to start from (it trains as written on the "
                   "built-in data), e.g. glasslab train --example moe > run.yaml")
    p.set_defaults(func=run)


def split_items(items: list[str]) -> tuple[Path | None, list[str]]:
    """(config file or None, overrides): the config is the first item that is not KEY=VALUE."""
    if items and "=" not in items[0]:
        return Path(items[0]), items[1:]
    stray = [i for i in items if "=" not in i]
    if stray:
        raise UserError(f"{stray[0]!r}: expected KEY=VALUE after the config file")
    return None, items


def run(args: argparse.Namespace) -> int:
    from glasslab import config as configs
    from glasslab.cli.note import resolve_run_dir
    from glasslab.layout import TRAINER_STATE
    from glasslab.train import RunConfig, train
    from glasslab.train.checkpoint import checkpoint_path, latest_valid
    from glasslab.train.run import checkpoint_config

    if args.example:
        from glasslab.train.example import example_yaml

        if args.items:
            raise UserError("--example prints a config and takes no CONFIG or KEY=VALUE")
        print(example_yaml(args.example), end="")
        return 0
    config_path, overrides = split_items(args.items)
    lab = Path(args.lab)
    run_dir = Path(args.run_dir) if args.run_dir else None
    fork = None
    if args.fork:
        parent_ref, sep, step = args.fork.rpartition("@")
        if not sep or not step.isdigit():
            raise UserError(f"--fork {args.fork!r}: expected RUN@STEP, e.g. my-run@200")
        parent_dir = resolve_run_dir(str(lab), parent_ref)
        fork = f"{parent_dir}@{step}"
        parent_ckpt = checkpoint_path(parent_dir, int(step))
        if config_path is None and not (parent_ckpt / TRAINER_STATE).is_file():
            raise UserError(f"--fork {args.fork!r}: no checkpoint at step {step} in {parent_dir}")
        base = configs.read_file(config_path) if config_path else checkpoint_config(parent_ckpt)
        name = f"{parent_dir.name}-fork{step}"
    elif config_path is not None:
        base, name = configs.read_file(config_path), config_path.stem
    elif args.resume and run_dir is not None:
        found = latest_valid(run_dir)
        if found is None:
            raise UserError(f"{run_dir}: no intact checkpoint to take the config from; pass CONFIG too")
        base, name = checkpoint_config(found[1]), run_dir.name
    else:
        raise UserError("expected a run config file (glasslab train CONFIG [KEY=VALUE ...])")
    run_cfg = configs.from_dict(RunConfig, configs.apply_overrides(base, overrides))
    if run_dir is None:
        run_dir = lab / f"{name}-{configs.config_hash(run_cfg)[:8]}"
    with training_progress(run_dir.name, enabled=int(os.environ.get("RANK", "0")) == 0) as progress:
        result = train(run_cfg, run_dir, resume=args.resume, fork=fork, device=args.device, progress=progress)
    if int(os.environ.get("RANK", "0")) == 0:
        loss = result.get("eval/macro/loss")
        print(f"{run_dir}: {result['status']} at step {result['step']}"
              + (f", eval/macro/loss {loss:.4f}" if loss is not None else ""))
    return 0


@contextlib.contextmanager
def training_progress(name: str, enabled: bool) -> Iterator[Callable[[int, int, dict[str, float]], None]]:
    """A rich progress bar (steps, loss, time left) fed by the trainer's per-step callback."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("loss {task.fields[loss]}"), TimeRemainingColumn())
    with Progress(*columns, disable=not enabled) as bar:
        task = bar.add_task(name, total=None, loss="-")

        def update(step: int, total: int, metrics: dict[str, float]) -> None:
            loss = metrics.get("train/loss")
            bar.update(task, completed=step, total=total, loss="-" if loss is None else f"{loss:.4f}")

        yield update
