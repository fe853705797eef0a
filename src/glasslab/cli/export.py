"""``glasslab export RUN[@STEP] [--out DIR]``: a run's checkpoint as a Hugging Face ``transformers`` folder.

    glasslab export demo-hero-1a2b3c4d --out /tmp/hero      # the latest intact checkpoint
    glasslab export my-run@200                              # lab/export-<hash8>/ only

The export is a one-step experiment: its folder ``<lab>/export-<hash8>/`` is what the run's page links
to; ``--out`` copies it where you want it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from glasslab.cli.options import add_lab_option
from glasslab.errors import UserError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export", help="export a run's checkpoint for transformers (with a model card)",
        description="Export a training run's checkpoint as a folder that transformers' AutoModelForCausalLM "
        "and AutoTokenizer load offline, with a model card (README.md) and a manifest. The export is a step "
        "in the lab (<lab>/export-<hash8>/, linked from the run's page); --out also copies it there. The "
        "exported model's logits are compared with glasslab's on held-out text before it counts as done.",
    )
    p.add_argument("run", metavar="RUN[@STEP]",
                   help="run id (folder name under the lab) or run folder; @STEP picks a checkpoint (default: latest)")
    p.add_argument("--out", default=None,
                   help="also copy the export here (a new or empty folder, or an earlier export)")
    add_lab_option(p)
    p.add_argument("--page-url", default=None,
                   help="the observatory's address for the model card's link (default: glasslab serve's)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from glasslab.cli.note import resolve_run_dir
    from glasslab.lab import Step, run_one_step
    from glasslab.model.export import check_export_target, copy_export
    from glasslab.model.load import find_model, split_ref
    from glasslab.train.export_step import DEFAULT_PAGE_URL, ExportConfig, checkpoint_folder, export_step, find_export

    lab = Path(args.lab)
    ref, step = split_ref(args.run)
    if "@" in ref:
        raise UserError(f"{args.run!r}: expected RUN or RUN@STEP, e.g. my-run@200")
    run_dir = resolve_run_dir(str(lab), ref)
    if step is not None:
        checkpoint_folder(run_dir, step)  # a one-line error naming the steps there are
    source = find_model(str(run_dir) if step is None else f"{run_dir}@{step}")
    if source.kind != "run":
        raise UserError(f"{args.run!r}: already an export")
    step, digest = source.step, source.sha256
    out = Path(args.out) if args.out else None
    if out is not None:
        check_export_target(out)  # refuse before any work
    in_lab = run_dir.resolve().parent == lab.resolve()
    folder = find_export(lab, run_dir.name, step, digest) if in_lab else None
    if folder is None:
        cfg = ExportConfig(run=run_dir.name if in_lab else str(run_dir.resolve()), step=step, checkpoint_sha256=digest,
                           page_url=args.page_url or DEFAULT_PAGE_URL)
        folder = run_one_step(Step("export", export_step, cfg), lab).folder
    manifest = copy_export(folder, out) if out is not None else copy_export(folder, folder)
    print(f"{run_dir.name}@{step} exported as {manifest['architecture']} ({manifest['size_name']}): {folder}"
          f"  (logits within {manifest['max_logit_diff']:.1e} of glasslab's)")
    if out is not None:
        print(f"copied to {out}")
    return 0
