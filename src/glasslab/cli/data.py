"""``glasslab data build CONFIG`` (a one-step experiment) and ``glasslab data report DATASET_DIR``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from glasslab.cli.options import add_lab_option, step_lab
from glasslab.errors import UserError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "data",
        help="build datasets and their composition reports",
        description="Build a tokenized dataset from sources, or write its composition report.",
    )
    data_sub = p.add_subparsers(dest="data_command", metavar="ACTION")
    data_sub.required = True
    add_build_parser(data_sub)
    add_map_parser(data_sub)
    add_report_parser(data_sub)


def add_build_parser(data_sub: argparse._SubParsersAction) -> None:
    build = data_sub.add_parser(
        "build",
        help="sources → processing → tokenizer → shards (+ report.json)",
        description="Build a dataset from a YAML/JSON BuildConfig, as a one-step experiment: the folder "
        "<lab>/data-<hash8> gets step.json and the lab's event log says when it was built; the same build "
        "again is cached. The build runs as tasks on every core (--workers) or on Ray (--backend ray); a "
        "build that was killed resumes with the tasks it had not finished. CONFIG may be 'demo' for the "
        "demo's own data step (three built-in domains: Python's standard library code, docstring prose and "
        "reference topics), so a later `glasslab run demo` finds it built. Overrides are dotted KEY=VALUE "
        "pairs, e.g. tokenizer.vocab_size=2048.",
    )
    build.add_argument("config", metavar="CONFIG", help="BuildConfig file, or 'demo'")
    build.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides")
    build.add_argument("--quick", action="store_true", help="with 'demo': the data of `glasslab demo --quick`")
    build.add_argument("--out", default=None,
                       help="a fixed dataset folder instead of <lab>/data-<hash8> (its parent is then the lab)")
    add_lab_option(build, urls=True)
    build.add_argument(
        "--strict", action="store_true",
        help="fail on a malformed record or invalid UTF-8 instead of skipping (replacing) and counting it",
    )
    build.add_argument(
        "--skip-bad-files", action="store_true",
        help="leave damaged files (truncated .gz/.zst, unreadable Parquet) out whole instead of failing",
    )
    build.add_argument("--workers", type=int, default=None,
                       help="tasks at once in every stage (default: the CPUs available, or the Ray cluster's)")
    build.add_argument("--backend", choices=("local", "ray"), default=None,
                       help="run the tasks on local processes (default) or as Ray tasks")
    build.add_argument("--address", default=None,
                       help="with --backend ray: the Ray cluster to join (default: start a local Ray)")
    build.add_argument("--force", action="store_true", help="build again even if this build succeeded before")
    build.add_argument("--quiet", action="store_true", help="no progress lines (what is skipped is still said)")
    build.set_defaults(func=run_build)



def add_report_parser(data_sub: argparse._SubParsersAction) -> None:
    report = data_sub.add_parser(
        "report",
        help="write a dataset's composition report (report.json)",
        description="Recompute DATASET_DIR/report.json from its manifest, shards and build record; with "
        "--mixture, add the tokens and epochs each domain gets per phase for a token budget.",
    )
    report.add_argument("dataset", metavar="DATASET_DIR")
    report.add_argument(
        "--mixture", default=None, help="YAML/JSON MixtureConfig (weights, phases, epoch_caps)"
    )
    report.add_argument("--token-budget", type=int, default=0, help="training tokens (default: one epoch)")
    report.add_argument(
        "--tokens-per-step", type=int, default=1, help="tokens per optimiser step (phase starts)"
    )
    report.add_argument("--samples", type=int, default=3, help="random documents shown per domain")
    report.add_argument("--seed", type=int, default=0, help="seed of the samples")
    report.add_argument("--out", default=None, help="report file (default DATASET_DIR/report.json)")
    report.set_defaults(func=run_report)


def add_map_parser(data_sub: argparse._SubParsersAction) -> None:
    mapping = data_sub.add_parser(
        "map",
        help="what is in a dataset: its documents embedded and clustered into content domains",
        description="Embed every document of DATASET (training and held-out), cluster them (spherical k-means at "
        "a fine K, coarsened to --k with at least --min-share of the documents each) and summarise each cluster: "
        "documents, tokens and shares, top terms, the documents nearest its centroid and a uniform sample, its "
        "share of each source. A lab step of its own, <lab>/map-<hash8> (cached; a killed map resumes), run as "
        "tasks on local processes or Ray like the build; the data page shows it. The embedder is fitted on the "
        "corpus itself (hashed TF-IDF -> randomized SVD), nothing is downloaded.",
    )
    mapping.add_argument("dataset", metavar="RUN|DATASET", help="dataset folder, or a run (id or folder) whose dataset")
    mapping.add_argument("--k", type=int, default=40, help="content domains (coarse clusters), at most (default 40)")
    mapping.add_argument("--fine-k", type=int, default=0, metavar="N",
                         help="fine clusters (default: one per 20 sampled documents, at most 4096)")
    mapping.add_argument("--embedder", default="tfidf",
                         help="tfidf (default): fitted on the corpus itself; model:RUN[@STEP]: a lab model's "
                              "mean-pooled hidden states; or a local sentence-transformers folder (.[embed] extra)")
    mapping.add_argument("--dims", type=int, default=256, help="embedding dimensions (default 256)")
    mapping.add_argument("--sample", type=int, default=20_000,
                         help="training documents the embedder and centroids are fitted on (default 20000)")
    mapping.add_argument("--min-share", type=float, default=0.01,
                         help="smallest content domain, as a share of the sampled documents (default 0.01)")
    mapping.add_argument("--seed", type=int, default=0)
    mapping.add_argument("--workers", type=int, default=0, help="tasks at once (default: the CPUs available)")
    mapping.add_argument("--backend", choices=("local", "ray"), default="", help="local processes (default) or Ray")
    mapping.add_argument("--force", action="store_true", help="map again even if this map succeeded before")
    mapping.add_argument("--quiet", action="store_true", help="no progress lines")
    add_lab_option(mapping)
    mapping.set_defaults(func=run_map)


def run_map(args: argparse.Namespace) -> int:
    from glasslab.cli.trace import dataset_of
    from glasslab.data.map import map_plan, read_map
    from glasslab.lab import run_one_step

    dataset = dataset_of(args.lab, args.dataset)
    settings = {"k": args.k, "fine_k": args.fine_k, "dims": args.dims, "sample": args.sample,
                "min_share": args.min_share, "seed": args.seed, "num_workers": args.workers,
                "backend": args.backend, "progress": not args.quiet}
    if args.embedder.startswith("model:"):
        from glasslab.evals.map_model import model_map_plan

        step = model_map_plan(dataset, args.embedder, args.lab, **settings)
    else:
        step = map_plan(dataset, embedder=args.embedder, **settings)
    done = run_one_step(step, args.lab, force=args.force)
    summary = read_map(done.folder, dataset)
    print(f"{summary['k']} content domains ({summary['fine_k']} fine clusters) over {summary['documents']:,} "
          f"training documents, {summary['tokens']:,} tokens" + (" (mapped before: cached)" if done.status == "cached"
                                                                  else ""))
    for cluster in summary["clusters"]:
        print(f"{cluster['id']:>4} {cluster['share']:6.1%} of tokens  {cluster['documents']:>7,} docs  "
              f"held-out {cluster['heldout_share']:5.1%}  {', '.join(w for w, _ in cluster['terms'][:6])}")
    print(done.folder)
    return 0


def run_build(args: argparse.Namespace) -> int:
    from glasslab.cli.data_build import data_build_step
    from glasslab.lab import run_one_step
    from glasslab.store.mirror import lab_workspace
    from glasslab.store.url import OBJECT_STORES

    overrides = list(args.overrides)
    if args.strict:
        overrides.append("strict=true")
    if args.skip_bad_files:
        overrides.append("skip_bad_files=true")
    if args.workers is not None:
        overrides.append(f"num_workers={args.workers}")
    if args.backend is not None:
        overrides.append(f"backend={args.backend}")
    if args.address is not None:
        overrides.append(f"ray_address={args.address}")
    if args.quiet:
        overrides.append("progress=false")
    if args.out and args.lab.partition("://")[0] in OBJECT_STORES:
        raise UserError(f"--out {args.out}: a fixed folder is not taken with an object-store --lab {args.lab}")
    step = data_build_step(args.config, overrides, quick=args.quick, folder=args.out)
    with lab_workspace(args.lab) as lab:  # on an s3:// lab: this node's working copy, pushed as it ends
        done = run_one_step(step, step_lab(lab, args.out), force=args.force)
    if done.status == "cached":
        print(f"built before (cached): {done.folder}", file=sys.stderr)
    print(done.folder)
    return 0


def run_report(args: argparse.Namespace) -> int:
    from glasslab import config
    from glasslab.data.config import MixtureConfig
    from glasslab.data.report import make_report
    from glasslab.layout import REPORT_FILE, write_json_atomic

    mixture = config.load(MixtureConfig, args.mixture) if args.mixture else None
    report = make_report(
        args.dataset,
        samples_per_domain=args.samples,
        seed=args.seed,
        mixture=mixture,
        token_budget=args.token_budget,
        tokens_per_step=args.tokens_per_step,
    )
    out = Path(args.out) if args.out else Path(args.dataset) / REPORT_FILE
    write_json_atomic(out, report, sort_keys=True)
    print(f"manifest {report['manifest_hash'][:16]}  python {report['python_version']}")
    for domain, d in report["domains"].items():
        print(
            f"{domain:>16}: {d['documents']:>7} docs {d['tokens']:>11} tokens "
            f"{d['bytes_per_token']:.2f} B/token"
            f"  eval {d['eval_documents']} docs {d['eval_tokens']} tokens"
        )
    for phase in report.get("mixture", {}).get("phases", []):
        epochs = ", ".join(f"{d} {e:.2f}" for d, e in phase["epochs"].items())
        print(f"  phase from step {phase['start_step']}: epochs {epochs}")
    print(out)
    return 0
