"""``glasslab ladder plan|fit``: plan a scaling ladder as a table; fit measured rungs as a one-step experiment."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from glasslab.cli.options import add_lab_option, split_config_items, step_lab
from glasslab.errors import UserError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ladder", help="plan a scaling ladder, fit its laws, predict the hero",
                       description="Plan a scaling ladder (rungs and hero from one recipe) or fit laws to "
                       "measured rungs with 90% intervals and a back-test.")
    ladder_sub = p.add_subparsers(dest="ladder_command", metavar="ACTION", required=True)

    plan = ladder_sub.add_parser("plan", help="print the rungs and hero a spec plans",
                                 description="Print the plan of a ladder spec (YAML/JSON with LadderSpec "
                                 "fields; defaults without one) as a table. Overrides are dotted KEY=VALUE "
                                 "pairs, e.g. tokens_per_param=40 base_model.vocab_size=4096 "
                                 "scaling_rule.lr_coefficient=0.2.")
    plan.add_argument("items", nargs="*", metavar="SPEC|KEY=VALUE",
                      help="a ladder spec file (YAML or JSON), then overrides of its fields")
    plan.add_argument("--budgets", nargs="+", type=float, metavar="FLOPS",
                      help="compute budgets in FLOPs (replace the spec's widths)")
    plan.add_argument("--isoflop", type=int, default=None, metavar="SIZES",
                      help="plan this many model sizes per budget (isoFLOP; approach 3 needs it)")
    plan.set_defaults(func=run_plan)

    fit = ladder_sub.add_parser(
        "fit", help="fit laws to measured rungs and write fit.json + figures",
        description="Fit L(C) (and approach 3 where rungs vary tokens per parameter) to measured rungs, "
        "predict the target compute with a 90% interval, back-test; as a one-step experiment whose folder "
        "<lab>/<ladder>-fit-<hash8> holds fit.json and the figures. The rungs are run folders of a ladder "
        "(default: every rung under --lab), or a points file: a CSV with the header flops,loss and "
        "optionally seed, params, tokens (one row per trained run; FLOPs, nats per token), or the same "
        "as a JSON list of records.")
    fit.add_argument("runs", nargs="*", metavar="RUN|POINTS",
                     help="rung run folders, or one .csv/.json points file (default: every rung under --lab)")
    add_lab_option(fit)
    fit.add_argument("--ladder", default=None, help="only the rungs of this ladder (with --lab); names the fit")
    fit.add_argument("--law", choices=("c", "nd"), default="c",
                     help="c: L(C) = L_inf + A*C^-alpha (default); nd: E + A*N^-alpha + B*D^-beta on a points file "
                     "with params and tokens, predicting --target-params/--target-tokens")
    fit.add_argument("--L-inf", dest="L_inf", default=None, metavar="NATS|free",
                     help="the asymptote of L(C): a value to pin (nats/token) or 'free' to fit it (required with "
                     "--law c)")
    fit.add_argument("--target-params", type=float, default=None, metavar="N",
                     help="--law nd: the target run's parameters (non-embedding active, as the points' params)")
    fit.add_argument("--target-tokens", type=float, default=None, metavar="D",
                     help="--law nd: the target run's tokens (or forward area, as the points' tokens)")
    fit.add_argument("--heroes", default=None, metavar="CSV",
                     help="--law nd: earlier heroes of the same recipe (name, params, tokens, loss, noise), whose "
                     "losses the prediction must agree with and which set the floor when the grid cannot")
    fit.add_argument("--sweep", nargs="+", type=float, default=[], metavar="NATS",
                     help="assumed asymptotes to tabulate; their span is the range a pinned L-inf is spread "
                     "over for the interval (default without a sweep: pinned value ± 0.3 nats)")
    fit.add_argument("--spec", default=None, metavar="SPEC",
                     help="ladder spec: predict its planned hero (and name the ladder after it)")
    fit.add_argument("--target-flops", type=float, default=None,
                     help="compute to predict, FLOPs (default: the spec's hero, else 10x the largest rung)")
    fit.add_argument("--out", default=None,
                     help="a fixed folder for fit.json and figures instead of <lab>/<ladder>-fit-<hash8>")
    fit.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates (default 1000)")
    fit.set_defaults(func=run_fit)


def _console():
    from rich.console import Console

    # Piped output (tests, logs) gets the full table instead of rich's 80-column default.
    return Console(width=None if sys.stdout.isatty() else 200)


def run_plan(args: argparse.Namespace) -> int:
    from glasslab import config
    from glasslab.ladder.plan import LadderSpec, plan_ladder, plan_table

    spec_path, overrides = split_config_items(args.items, "ladder spec")
    if args.budgets:
        overrides.append(f"budgets=[{', '.join(repr(b) for b in args.budgets)}]")
    if args.isoflop is not None:
        overrides.append(f"isoflop_sizes={args.isoflop}")
    spec = config.load(LadderSpec, spec_path, overrides)
    _console().print(plan_table(plan_ladder(spec)))
    return 0


def parse_asymptote(text: str) -> float | None:
    """``free`` → None (fit it); else a number of nats per token."""
    if text.strip().lower() == "free":
        return None
    try:
        return float(text)
    except ValueError:
        raise UserError(f"--L-inf={text!r}: expected a number of nats per token or 'free'") from None


def run_fit(args: argparse.Namespace) -> int:
    from glasslab.cli.train import step_name
    from glasslab.ladder.points import is_points_file, read_points
    from glasslab.ladder.runs import find_ladder_runs, read_rungs
    from glasslab.ladder.steps import FitStepConfig, fit_step

    if args.law == "nd":
        return run_points_law(args)
    if args.heroes:
        raise UserError(f"--heroes {args.heroes}: earlier heroes set the end-point law's floor; expected --law nd")
    if args.L_inf is None:
        raise UserError("--L-inf: required with --law c; expected a number of nats per token or 'free'")
    L_inf = parse_asymptote(args.L_inf)
    if args.bootstrap < 1:
        raise UserError(f"--bootstrap {args.bootstrap}: expected at least 1 replicate")
    ladder, target = args.ladder, args.target_flops
    if args.spec:
        from glasslab import config
        from glasslab.ladder.plan import LadderSpec, plan_ladder

        spec = config.load(LadderSpec, args.spec)
        ladder = ladder or spec.name
        target = target or plan_ladder(spec).hero.law_flops
    points = [r for r in args.runs if is_points_file(r)]
    if points:
        if len(args.runs) > 1:
            raise UserError(f"{points[0]}: a points file is fitted on its own; expected one file, not "
                            f"{len(args.runs)} arguments")
        rungs, notes = read_points(points[0])
        for note in notes:
            print(note, file=sys.stderr)
        ladder = ladder or step_name(Path(points[0]).stem)
    else:
        run_dirs = [Path(r) for r in args.runs] or find_ladder_runs(args.lab, ladder)
        if not run_dirs:
            raise UserError(f"no rung runs given and none found under {args.lab}"
                            + (f" for ladder {ladder!r}" if ladder else ""))
        rungs = read_rungs(run_dirs)
    ladder = ladder or "ladder"
    target = target or 10 * max(r.flops for r in rungs)
    config = FitStepConfig(ladder, target, L_inf, tuple(args.sweep), rungs=tuple(rungs),
                           num_bootstrap=args.bootstrap)
    _fit_and_report(args, ladder, fit_step, config)
    return 0


def run_points_law(args: argparse.Namespace) -> int:
    """``--law nd``: the end-point law on one points file, predicting the target run, through the gate."""
    from glasslab.cli.train import step_name
    from glasslab.ladder.hero_floor import read_heroes
    from glasslab.ladder.points import is_points_file, read_points
    from glasslab.ladder.steps import PointsLawConfig, points_law_step

    if len(args.runs) != 1 or not is_points_file(args.runs[0]):
        raise UserError(f"--law nd: {' '.join(args.runs) or 'no file'}: expected one .csv/.json points file with "
                        "params, tokens and loss")
    if args.target_params is None or args.target_tokens is None:
        raise UserError("--law nd: expected --target-params N and --target-tokens D (the run to predict)")
    rungs, notes = read_points(args.runs[0])
    for note in notes:
        print(note, file=sys.stderr)
    ladder = args.ladder or step_name(Path(args.runs[0]).stem)
    target = (args.target_params, args.target_tokens)
    heroes = read_heroes(args.heroes) if args.heroes else ()
    _fit_and_report(args, ladder, points_law_step,
                    PointsLawConfig(ladder, tuple(rungs), target, args.bootstrap, heroes))
    return 0


def _fit_and_report(args: argparse.Namespace, ladder: str, step_fn: Any, config: object) -> None:
    """Run the fit step ``step_fn`` on ``config``, print the summary and the gate's verdict."""
    from glasslab.cli.train import step_name
    from glasslab.lab import Step, run_one_step
    from glasslab.ladder.fit import read_fit
    from glasslab.ladder.summary import summary_tables
    from glasslab.layout import FIT_FILE

    done = run_one_step(Step(step_name(f"{ladder}-fit"), step_fn, config, folder=args.out),
                        step_lab(args.lab, args.out))
    console = _console()
    for table in summary_tables(done.folder):
        console.print(table)
    print(f"{'cached: ' if done.status == 'cached' else ''}{done.folder}: fit.json and figures")
    print(gate_line(read_fit(done.folder / FIT_FILE)))


def gate_line(fit: dict) -> str:
    """The registration gate's verdict in one line (then one line per reason and flag)."""
    gate = fit.get("gate") or {"registered": False, "reasons": ["no gate record"], "flags": []}
    head = "registration gate: " + ("REGISTERS" if gate["registered"] else "REFUSES")
    return "\n".join([head, *(f"  refuses: {r}" for r in gate["reasons"]), *(f"  flags: {f}" for f in gate["flags"])])
