"""``glasslab train CONFIG [KEY=VALUE ...]``: train a model as a one-step experiment (resume, fork, torchrun).

    glasslab train run.yaml train.max_steps=200 --lab lab          # lab/run-<hash8>/ (a step folder)
    glasslab train run.yaml --run-dir lab/my-run --resume           # a fixed folder, after a crash
    glasslab train --fork my-run@200 data.mixture.weights.code=0.5  # a new run from my-run's step 200
    torchrun --nproc_per_node=2 -m glasslab train run.yaml --run-dir lab/ddp
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
from pathlib import Path

from glasslab.cli.options import add_lab_option, split_config_items, step_lab
from glasslab.errors import UserError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train", help="train a model from a run config",
        description="Train a dense or MoE model from a run config ({model, data, train}) plus dotted "
        "overrides, as a one-step experiment: the run folder <lab>/<name>-<hash8> gets step.json, run.json, "
        "metrics.db, checkpoints/ and result.json, and the lab's event log says when it started and ended. "
        "The same command again finds the finished run (cached) or resumes an interrupted one. Under "
        "torchrun every rank runs this command; rank 0 keeps the step's record.",
    )
    p.add_argument("items", nargs="*", metavar="CONFIG|KEY=VALUE",
                   help="a run config file (YAML or JSON), then overrides such as train.optimizer.lr=3e-3")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--run-dir", help="a fixed run folder instead of <lab>/<name>-<hash8> (its parent is then the "
                       "lab); one that already holds a run needs --resume")
    add_lab_option(where, "lab root (step folders, event log)", urls=True)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true",
                      help="continue the run from its latest intact checkpoint (CONFIG may be left out with --run-dir)")
    mode.add_argument("--fork", metavar="RUN@STEP",
                      help="start a new run from RUN's checkpoint at STEP with the given changes")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where to train (default cpu)")
    p.add_argument("--example", choices=("dense", "moe"), default=None,
                   help="print a complete, commented run config to start from (it trains as written on the "
                   "built-in data), e.g. glasslab train --example moe > run.yaml")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Train in the lab ``--lab`` names: a folder, or on an object-store lab this node's working copy of it
    (pulled first; the run goes to the root at every checkpoint and when it ends)."""
    from glasslab.store.mirror import lab_workspace

    with lab_workspace(args.lab) as lab:
        args.lab = str(lab)
        return _train(args)


def _train(args: argparse.Namespace) -> int:
    from glasslab import config as configs
    from glasslab.cli.progress import CALLBACK
    from glasslab.lab import Step, make_plan, run_one_step
    from glasslab.train.run import check_fresh
    from glasslab.train.run_config import RunConfig
    from glasslab.train.steps import TrainingPreempted, TrainStepConfig, has_started, train_step

    if args.example:
        from glasslab.train.example import example_yaml

        if args.items:
            raise UserError("--example prints a config and takes no CONFIG or KEY=VALUE")
        print(example_yaml(args.example), end="")
        return 0
    config_path, overrides = split_config_items(args.items, "run config")
    run_dir = Path(args.run_dir) if args.run_dir else None
    lab = step_lab(args.lab, run_dir)
    base, name, fork, record_extra, recorded_data = _starting_config(args, config_path, run_dir, lab)
    run_cfg = configs.from_dict(RunConfig, configs.apply_overrides(base, overrides))
    # The dataset is named by what it is, a reference the step's config holds (a resumed run's as recorded);
    # the run config's data.build or data.path only say where to take it from. Everything else about the
    # run (sinks, dataset, mixture, vocabulary, a resume's config) the step checks, once, before its first
    # folder write or bar: a folder the refusal leaves with only the step's record is removed again.
    data = _dataset_named(run_cfg, config_path, lab) or recorded_data
    unplaced = dataclasses.replace(run_cfg, data=dataclasses.replace(run_cfg.data, build="", path=""))
    config = TrainStepConfig(run=unplaced, record_extra=record_extra, data=data, fork=fork, device=args.device,
                             hooks=(CALLBACK,))
    step = Step(name, train_step, config, folder=run_dir)
    folder = make_plan([step], lab).steps[-1].folder
    if args.resume and not has_started(folder):
        raise UserError(f"{folder}: nothing to resume (no run.json); start it without --resume")
    if not args.resume and run_dir is not None:
        check_fresh(folder)
    main_rank = int(os.environ.get("RANK", "0")) == 0
    try:
        done = run_one_step(step, lab)
    except TrainingPreempted as stopped:
        if main_rank:
            print(f"{folder}: preempted at step {stopped.result['step']}; checkpoint written, the same command "
                  "resumes it" + ("" if run_dir is None else " with --resume"))
        return 0
    if main_rank:
        _print_outcome(done)
    return 0


def _starting_config(args: argparse.Namespace, config_path: Path | None, run_dir: Path | None, lab: Path):
    """The run config to start from, as plain data, and the step's name, fork point and extra ``run.json``
    fields: from the config file, the forked run's checkpoint, or the run being resumed."""
    from glasslab import config as configs
    from glasslab.cli.note import resolve_run_dir
    from glasslab.data.reference import NO_DATASET
    from glasslab.train.checkpoint import checkpoint_config
    from glasslab.train.fork import ForkPoint

    fork, record_extra, data = None, {}, NO_DATASET
    if args.fork:
        parent_ref, sep, step = args.fork.rpartition("@")
        if not sep or not step.isdigit():
            raise UserError(f"--fork {args.fork!r}: expected RUN@STEP, e.g. my-run@200")
        fork = ForkPoint.at(resolve_run_dir(str(lab), parent_ref), int(step))
        if config_path is None and not fork.checkpoint.is_dir():
            raise UserError(f"--fork {args.fork!r}: no checkpoint at step {step} in {fork.run_dir}")
        base = configs.read_file(config_path) if config_path else checkpoint_config(fork.checkpoint)
        name = f"{fork.run}-fork{fork.step}"
    elif config_path is not None:
        base, name = configs.read_file(config_path), step_name(config_path.stem)
    elif args.resume and run_dir is not None:
        recorded = _recorded_step_config(run_dir)
        base, fork, record_extra, data = (configs.to_dict(recorded.run), recorded.fork,
                                          dict(recorded.record_extra), recorded.data)
        name = _recorded_name(run_dir)
    else:
        raise UserError("expected a run config file (glasslab train CONFIG [KEY=VALUE ...])")
    if "sft" in base:  # run configs had an sft: section before post-training became its own command
        raise UserError(f"{config_path or args.run_dir}: an sft: section is not a training run's; fine-tune with "
                        "`glasslab sft BASE CONVERSATIONS...` (no data mixture asked for)")
    return base, name, fork, record_extra, data


def _dataset_named(run_cfg, config_path: Path | None, lab: Path):
    """The reference to the dataset the run config names: its data build (a dependency step the executor runs
    first) or the folder at its path, by manifest hash (its mixture checked against its domains: the commonest
    slip, said before the lab is made); empty when it names none."""
    from glasslab.cli.data_build import data_build_step
    from glasslab.data.handle import open_dataset
    from glasslab.data.mixture import check_mixture
    from glasslab.data.reference import NO_DATASET, DatasetRef

    if run_cfg.data.build:
        data = data_build_step(run_cfg.data.build, relative_to=config_path.parent if config_path else None)
        _check_built_under_torchrun(data, lab)
        return DatasetRef.of_build(data)
    if run_cfg.data.path:
        dataset = open_dataset(run_cfg.data.path)
        check_mixture(run_cfg.data.mixture, dataset.domains)
        return DatasetRef.of_folder(run_cfg.data.path, dataset)
    return NO_DATASET


def _print_outcome(done) -> None:
    """One line: the run's folder, how it ended (or that it had finished before) and its last eval loss."""
    result = done.value or {}
    loss = result.get("eval/macro/loss")
    status = result.get("status", "finished") + (" before (cached)" if done.status == "cached" else "")
    print(f"{done.folder}: {status} at step {result.get('step')}"
          + (f", eval/macro/loss {loss:.4f}" if loss is not None else ""))


def _check_built_under_torchrun(data_step, lab: Path) -> None:
    """Under torchrun every rank would build the data at once (and ranks other than 0 do not run a step's
    dependencies), so there the data build ``data_step`` must have succeeded before."""
    from glasslab.lab import make_plan

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        node = make_plan([data_step], lab).steps[-1]
        if node.action != "cached":
            raise UserError(f"data.build: {node.folder} is not built yet; under torchrun build it first "
                            "(glasslab data build, or the same glasslab train without torchrun)")


def step_name(text: str) -> str:
    """A step name from a file stem: characters a folder name may not hold become '_'."""
    name = re.sub(r"-+", "-", re.sub(r"[^A-Za-z0-9_.-]", "_", text)).strip("-")
    return name if name and name[0].isalnum() else f"run{('_' + name) if name else ''}"


def _recorded_step_config(run_dir: Path):
    """The training step config that made ``run_dir``, from its ``step.json`` (a TrainStepConfig)."""
    from glasslab import config as configs
    from glasslab.lab import read_step_record
    from glasslab.train.steps import TrainStepConfig

    record = read_step_record(run_dir)
    if record is None or not str(record.get("function", "")).endswith(":train_step"):
        raise UserError(f"{run_dir}: no step.json of a `glasslab train` run to take the config from; pass CONFIG too")
    step_config = configs.from_dict(TrainStepConfig, record["config"])
    if step_config.data.data_from:
        raise UserError(f"{run_dir}: its data comes from step {step_config.data.data_from.name!r}; rerun the "
                        "command that made it (`glasslab train CONFIG` with its data.build, or `glasslab run` for an "
                        "experiment)")
    return step_config


def _recorded_name(run_dir: Path) -> str:
    from glasslab.lab import read_step_record

    return (read_step_record(run_dir) or {}).get("name") or step_name(run_dir.name)
