"""``glasslab demo``: the open lab end to end — data, a 4-rung MoE ladder, its fit, a hero run."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from glasslab.cli.options import add_executor_options, add_lab_option
from glasslab.errors import UserError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo", help="run the whole open lab on the built-in data (about 10 minutes on a laptop CPU)",
        description="Build the data and its report, train the tokenizer, run a 4-rung MoE ladder, fit it, "
        "pre-register the hero's prediction, train the hero with >= 4x the top rung's compute, and show it "
        "all live in the observatory. Ends with a table of rungs, fit and predicted-vs-actual loss, and "
        "publishes the static site into LAB/site. A second run reuses finished steps.",
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes: the whole DAG in about two minutes")
    p.add_argument("--no-serve", action="store_true", help="do not serve the live page")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    add_lab_option(p, urls=True)
    p.add_argument("--host", default="127.0.0.1", help="address the page binds to (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="port of the page (default 8765)")
    p.add_argument("--sinks", default="", metavar="NAME[,NAME]",
                   help="also copy every run's metrics to these sinks: jsonl, tensorboard, wandb (train.sinks)")
    p.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)),
                   help="steps run in parallel (default: 2, or 1 on a 1-core machine)")
    add_executor_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """The demo in the lab ``--lab`` names: a folder, or on an object-store lab this node's working copy of it
    (pulled first; each step's folder goes to the root when it ends, a run's at every checkpoint, the site and
    the lab's own files as the demo ends)."""
    from glasslab.store.mirror import lab_workspace

    with lab_workspace(args.lab) as lab:
        args.lab = str(lab)
        return _demo(args)


def _demo(args: argparse.Namespace) -> int:
    import sys

    from rich.console import Console

    from glasslab.cli.run import print_verdict
    from glasslab.data.map import MAP_FILE
    from glasslab.data.map import STEP_NAME as MAP_STEP
    from glasslab.experiments.demo import EXPORT_STEP, FULL, LADDER, QUICK, SFT_STEP, card, demo_steps
    from glasslab.lab import Executor
    from glasslab.ladder.summary import summary_tables
    from glasslab.layout import read_json
    from glasslab.observatory.app import BackgroundServer
    from glasslab.observatory.publish import publish
    from glasslab.track import check_sinks

    console = Console(width=None if sys.stdout.isatty() else 160)
    lab = Path(args.lab)
    lab.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    server = None
    if not args.no_serve:
        server = BackgroundServer(lab, host=args.host, port=args.port)
        console.print(f"live observatory: [bold]{server.url}/[/bold]")
    cores = os.cpu_count() or 1
    sinks = tuple(name.strip() for name in args.sinks.split(",") if name.strip())
    check_sinks(sinks)
    size = QUICK if args.quick else FULL
    steps = demo_steps(size, device=args.device, threads=max(1, cores // args.jobs),
                       hero_threads=cores, sinks=sinks)
    executor = Executor(lab, backend=args.backend, jobs=args.jobs, address=args.address, retries=args.retries,
                        re_register=args.re_register, force_registration=args.force_registration, narrate=True)
    report = executor.run(steps, experiment="demo", card=card(size))
    if not report.ok:
        raise UserError(f"demo: {', '.join(report.keys('failed')) or 'a step'} failed; see step.json in {lab}")
    folders = {planned.name: planned.folder for planned in report.plan.steps}
    exports = {planned.step.deps[0].name: planned.folder  # the export of each run, by the run's step name
               for planned in report.plan.steps if planned.name == EXPORT_STEP}
    for table in summary_tables(folders[f"{LADDER}-fit"], folders[f"{LADDER}-hero"]):
        console.print(table)
    console.print(posttrain_table(folders))
    console.print(f"the hero for transformers (with a model card): {exports[f'{LADDER}-hero']}")
    console.print(f"its chat model (SFT), with the chat template: {exports[SFT_STEP]}  "
                  f"(glasslab chat {exports[SFT_STEP].name} --lab {lab})")
    index_hero_data(folders[f"{LADDER}-hero"], lab, console)
    data_map = folders[MAP_STEP]
    console.print(f"map of the hero's training data, {len(read_json(data_map / MAP_FILE)['clusters'])} content "
                  f"domains: {data_map}  (its held-out loss per domain: the hero's page)")
    site = publish(lab, lab / "site")
    console.print(f"static site: {site}  ({time.monotonic() - started:.0f} s in all)")
    print_verdict(str(lab), "demo")
    if server is not None:
        console.print(f"serving {server.url}/ until Ctrl-C")
        try:
            server.wait()
        except KeyboardInterrupt:
            server.stop()
    return 0


def index_hero_data(hero: Path, lab: Path, console) -> None:
    """Index the hero's training tokens (so the pages mark what its samples copied), a cached step of the lab."""
    from glasslab.data.batches import trained_dataset
    from glasslab.data.token_index import index_for

    index = index_for(trained_dataset(hero), lab)
    console.print(f"trace index of the hero's training data: {index.folder}  "
                  f"(glasslab trace {hero.name} \"TEXT\" --lab {lab})")


def posttrain_table(folders: dict[str, Path]):
    """The demo table's last rows: held-out SFT loss and task accuracies (plain and in chat form) of the hero
    before and after SFT with one reply of each, the held-out preference accuracy of the SFT model before
    and after DPO with one reply of each, the held-out arithmetic answers' loss before and after the task
    SFT of the DPO model, then that model's held-out pass@1 before and after RL (``folders``: each step's
    folder by its name)."""
    from rich.table import Table

    from glasslab.experiments.demo import DPO_STEP, RL_STEP, SFT_STEP, TASK_SFT_STEP
    from glasslab.posttrain.outcome import outcome

    sft_folder, dpo_folder, rl_folder = folders[SFT_STEP], folders[DPO_STEP], folders[RL_STEP]
    sft, dpo, task, rl = (outcome(folders[name]) for name in (SFT_STEP, DPO_STEP, TASK_SFT_STEP, RL_STEP))
    table = Table(title=f"SFT of the hero ({sft_folder.name}): held-out loss on assistant tokens (nats/token), "
                        f"task accuracy; DPO of the SFT model ({dpo_folder.name}): held-out preference accuracy; "
                        f"task SFT and RL of the DPO model ({rl_folder.name}): held-out arithmetic")
    for column in ("", "before", "after", "change"):
        table.add_column(column)
    table.add_row("held-out SFT loss (hero -> SFT)", _num(sft["before"]), _num(sft["after"]), _relative(sft))
    for name, (before, after) in sft["tasks"].items():
        table.add_row(f"{name} accuracy", _num(before), _num(after), f"{100 * (after - before):+.1f} points")
    table.add_row(f"reply to {sft['prompt']!r}", sft["base_reply"], sft["reply"], "")
    table.add_row("held-out preference accuracy (SFT -> DPO)", _num(dpo["before"]), _num(dpo["after"]), _points(dpo))
    table.add_row(f"reply to {dpo['prompt']!r}", dpo["base_reply"], dpo["reply"], "")
    table.add_row("held-out answer loss (DPO -> task SFT)", _num(task["before"]), _num(task["after"]),
                  _relative(task))
    table.add_row("held-out pass@1 (task SFT -> RL)", _num(rl["before"]), _num(rl["after"]), _points(rl))
    return table


def _relative(out: dict) -> str:
    return f"{out['relative']:+.1%}" if out["relative"] is not None else ""


def _points(out: dict) -> str:
    """An outcome's change in points (``+20.5 points``), or nothing when a side is missing."""
    before, after = out["before"], out["after"]
    return f"{100 * (after - before):+.1f} points" if before is not None and after is not None else ""


def _num(value) -> str:
    return f"{value:.3f}" if isinstance(value, (int, float)) else "—"
