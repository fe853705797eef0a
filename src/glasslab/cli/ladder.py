"""``glasslab ladder plan|fit``: plan a scaling ladder as a table; fit its rungs into ``fit.json``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from glasslab.cli.options import add_lab_option
from glasslab.errors import UserError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ladder", help="plan a scaling ladder, fit its laws, predict the hero",
                       description="Plan a scaling ladder (rungs and hero from one recipe) or fit laws to "
                       "its finished rungs with 90% intervals and a back-test.")
    ladder_sub = p.add_subparsers(dest="ladder_command", metavar="ACTION", required=True)

    plan = ladder_sub.add_parser("plan", help="print the rungs and hero a spec plans",
                                 description="Print the plan of a ladder spec (YAML/JSON with LadderSpec "
                                 "fields; defaults without one) as a table.")
    plan.add_argument("spec", nargs="?", metavar="SPEC", help="ladder spec file (YAML or JSON)")
    plan.add_argument("--budgets", nargs="+", type=float, metavar="FLOPS",
                      help="compute budgets in FLOPs (replace the spec's widths)")
    plan.add_argument("--isoflop", type=int, default=None, metavar="SIZES",
                      help="plan this many model sizes per budget (isoFLOP; approach 3 needs it)")
    plan.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                      help="override a spec field, e.g. -o tokens_per_param=40 -o base_model.vocab_size=4096")
    plan.set_defaults(func=run_plan)

    fit = ladder_sub.add_parser("fit", help="fit laws to finished rungs and write fit.json + figures",
                                description="Fit L(C) (and approach 3 on isoFLOP ladders) to the rungs' "
                                "eval/macro/loss; predict the target compute with a 90% interval; back-test.")
    fit.add_argument("runs", nargs="*", metavar="RUN",
                     help="rung run folders (default: every rung under --lab)")
    add_lab_option(fit)
    fit.add_argument("--ladder", default=None, help="only the rungs of this ladder (with --lab)")
    fit.add_argument("--L-inf", dest="L_inf", required=True, metavar="NATS|free",
                     help="the asymptote: a value to pin (nats/token) or 'free' to fit it")
    fit.add_argument("--sweep", nargs="+", type=float, default=[], metavar="NATS",
                     help="assumed asymptotes to tabulate; their span is the range a pinned L-inf is spread "
                     "over for the interval (default without a sweep: pinned value ± 0.3 nats)")
    fit.add_argument("--spec", default=None, metavar="SPEC",
                     help="ladder spec: predict its planned hero (and name the ladder after it)")
    fit.add_argument("--target-flops", type=float, default=None,
                     help="compute to predict, FLOPs (default: the spec's hero, else 10x the largest rung)")
    fit.add_argument("--out", default=None, help="folder for fit.json and figures (default: print only)")
    fit.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates (default 1000)")
    fit.set_defaults(func=run_fit)


def run_plan(args: argparse.Namespace) -> int:
    from rich.console import Console

    from glasslab import config
    from glasslab.ladder.plan import LadderSpec, plan_ladder, plan_table

    overrides = list(args.override)
    if args.budgets:
        overrides.append(f"budgets=[{', '.join(repr(b) for b in args.budgets)}]")
    if args.isoflop is not None:
        overrides.append(f"isoflop_sizes={args.isoflop}")
    spec = config.load(LadderSpec, args.spec, overrides)
    # Piped output (tests, logs) gets the full table instead of rich's 80-column default.
    Console(width=None if sys.stdout.isatty() else 200).print(plan_table(plan_ladder(spec)))
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
    from glasslab.ladder.figures import draw_fit
    from glasslab.ladder.fit import fit_ladder, write_fit
    from glasslab.ladder.runs import find_ladder_runs, read_rungs

    L_inf = parse_asymptote(args.L_inf)
    ladder, target = args.ladder, args.target_flops
    if args.spec:
        from glasslab import config
        from glasslab.ladder.plan import LadderSpec, plan_ladder

        spec = config.load(LadderSpec, args.spec)
        ladder = ladder or spec.name
        target = target or plan_ladder(spec).hero.flops
    run_dirs = [Path(r) for r in args.runs] or find_ladder_runs(args.lab, ladder)
    if not run_dirs:
        raise UserError(f"no rung runs given and none found under {args.lab}"
                        + (f" for ladder {ladder!r}" if ladder else ""))
    rungs = read_rungs(run_dirs)
    target = target or 10 * max(r.flops for r in rungs)
    fit = fit_ladder(rungs, ladder=ladder or "ladder", target_flops=target, L_inf=L_inf,
                     sweep=args.sweep, num_bootstrap=args.bootstrap)
    print(format_fit(fit))
    if args.out:
        from glasslab.layout import FIT_FILE

        path = write_fit(Path(args.out) / FIT_FILE, fit)
        figures = draw_fit(fit, args.out)
        print(f"wrote {path}, {', '.join(str(f) for f in figures)}")
    return 0


def format_fit(fit: dict) -> str:
    """A short human summary of a fit.json dict."""
    law, pred = fit["law"], fit["prediction"]
    lines = [f"{law['form']}  ({fit['L_inf']['mode']} L_inf; fitted on {len(law['fitted_on'])} rungs)"]
    lines += [f"  {k} = {v:.6g} ± {law['param_se'][k]:.2g}" for k, v in law["params"].items()]
    lines.append(f"prediction at {pred['flops']:.3g} FLOPs: {pred['point']:.4f} "
                 f"[{pred['lo']:.4f}, {pred['hi']:.4f}] ({pred['level']:.0%})")
    for row in fit["sweep_table"]:
        lines.append(f"  if L_inf = {row['L_inf']:.4g}: {row['point']:.4f} "
                     f"[{row['lo']:.4f}, {row['hi']:.4f}]")
    last = fit["backtest"]["last"]
    if last:
        lines.append(f"back-test (leave last rung out, {last['extrapolation']:.1f}x): "
                     f"predicted {last['point']:.4f}, measured {last['measured']:.4f}, "
                     f"error {last['rel_error_pct']:+.2f}%")
    a3 = fit["approach3"]
    if a3["fitted"]:
        opt = a3["compute_optimal"]
        lines.append("approach 3: " + ", ".join(f"{k}={v:.4g}" for k, v in a3["params"].items())
                     + f"; compute-optimal N={opt['params_active']:.3g}, D={opt['tokens']:.3g}")
    else:
        lines.append(f"approach 3 not fitted: {a3['reason']}")
    return "\n".join(lines)
