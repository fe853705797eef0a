"""Every built-in experiment's step names (``<name>-<hash8>``), to check that a change keeps the identity of
unchanged work.

    python bench/step_hashes.py [--smoke] [--src DIR] [--out FILE] [--compare FILE]

Plans (never runs) the demo's steps at ``--quick`` and full size, and every ladder experiment shipped in
``glasslab.experiments`` (their ``steps()`` and, where there is one, ``smoke_steps()``), each in an empty
temporary lab, and prints one line per step: ``<experiment> <folder name>``. A step's folder name carries
its hash, so two codes that print the same lines give every existing lab's folders the same names.

``--src DIR`` imports glasslab from ``DIR`` (another checkout's ``src``, read only) instead of this one's, so
the same script lists main's names and a branch's: ``--out`` writes the list, ``--compare`` reads one
written before and names every line that differs. ``--smoke`` plans only the quick demo.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path


def experiments(smoke: bool) -> dict[str, object]:
    """Experiment label → a function returning its steps."""
    from glasslab.experiments import demo

    found: dict[str, object] = {"demo-quick": lambda: demo.demo_steps(demo.QUICK)}
    if smoke:
        return found
    found["demo-full"] = lambda: demo.demo_steps(demo.FULL)
    import importlib
    import pkgutil

    import glasslab.experiments as package

    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name == "demo":
            continue
        module = importlib.import_module(f"glasslab.experiments.{info.name}")
        for attr in ("steps", "smoke_steps"):
            if hasattr(module, attr):
                found[f"{info.name}.{attr}"] = getattr(module, attr)
    return found


def step_names(smoke: bool) -> list[str]:
    """``<experiment> <folder name>`` for every planned step, in plan order."""
    from glasslab.lab.plan import make_plan

    lines = []
    with tempfile.TemporaryDirectory() as lab:
        for label, make_steps in experiments(smoke).items():
            plan = make_plan(make_steps(), Path(lab) / label)
            lines.extend(f"{label} {planned.folder.name}" for planned in plan.steps)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="plan only the quick demo")
    parser.add_argument(
        "--src",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "src",
        help="the glasslab sources to plan with (default: this checkout's)",
    )
    parser.add_argument("--out", type=Path, help="write the list of names here")
    parser.add_argument("--compare", type=Path, help="a list written before: name the lines that differ")
    args = parser.parse_args()
    sys.path.insert(0, str(args.src.resolve()))
    lines = step_names(args.smoke)
    import glasslab

    print(f"planned with {Path(glasslab.__file__).parent}", file=sys.stderr)
    print("\n".join(lines))
    if args.out:
        args.out.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    print(f"step_names: {len(lines)}  (every planned step of the experiments above)")
    if args.compare:
        before = args.compare.read_text(encoding="utf-8").splitlines()
        moved = sorted(set(before).symmetric_difference(lines))
        for line in moved:
            print(f"{'only before' if line in before else 'only now'}: {line}")
        print(f"step_names_moved: {len(moved)}  (target 0: no existing step's folder moves)")


if __name__ == "__main__":
    main()
