"""Data map benchmark: documents mapped per second per core against a plain scikit-learn pipeline, scaling on
2 workers, memory at 10x the corpus, and how well the content domains agree with a label the map never saw.

The corpus is real and nobody here wrote it: the Python files (``**/*.py``) under ``--corpus`` (default: this
interpreter's site-packages), a file from each top-level folder (package) in turn up to ``--max-mb``, built into
a dataset first (one domain, a 4096-token BPE; not timed).

1. ``glasslab data map`` on 1 worker (in this process: its CPU time is this process's) and on ``--workers``:
   documents per CPU second of embedding and assigning (the fit and assign phases; the summaries, which
   the reference does not make, are printed beside), and the speed-up; the two maps must be identical
   (``documents.parquet``). The CPU-bound control (a pure Python loop on 1 and 2 processes) and the load
   average are printed beside the speed-up: on a shared machine 2 workers cannot give 2x whatever the map does.
   The two maps and the reference (2.) run interleaved over ``--repeats`` rounds (5; 2 in a smoke), each map
   in a fresh lab; each ratio is the median of the rounds' ratios, printed with its spread.
2. The reference, single-process, BLAS on one thread like the map: decode every document the same way, then
   scikit-learn ``TfidfVectorizer`` (fitted on all) → ``TruncatedSVD`` (randomized, the same dims, fitted on
   the same sample size) → ``MiniBatchKMeans`` at the same fine K (fitted on the sample) → every document
   predicted. ``map_docs_per_s_per_core_vs_reference`` is ours over its documents per CPU second.
3. Agreement with the top-level folder each file came from under ``--corpus`` (its package): normalized
   mutual information of the coarse clusters and the packages over the training documents, beside the same
   for a random assignment of the same cluster sizes.
4. Peak RSS of a map in a fresh process (the process and its workers) at 1/``--scale`` of the corpus and at
   the whole of it.
5. ``map_minutes_site_packages``: the map on ``--workers`` of what was read, and that rate carried to every
   ``.py`` byte under ``--corpus`` (said which, when only a part was read: ``--max-mb 0`` reads all).

Run: ``python bench/map_bench.py [--corpus DIR] [--max-mb N] [--k 40]``; ``--smoke`` (0.3 MB, K 4) only checks
that it runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from data_bench import corpus_config, loadavg, machine_scaling  # noqa: E402
from interleave import LoadWatch, headline, interleaved, paired_ratios  # noqa: E402


def package_files(corpus: Path) -> dict[str, list[Path]]:
    """The ``.py`` files under each top-level folder (package) of ``corpus``, in sorted order."""
    packages = {}
    skip = (".dist-info", "__pycache__")
    for folder in sorted(p for p in corpus.iterdir() if p.is_dir() and not p.name.endswith(skip)):
        files = sorted(p for p in folder.rglob("*.py") if p.is_file())
        if files:
            packages[folder.name] = files
    return packages


def sampled_corpus(packages: dict[str, list[Path]], corpus: Path, max_bytes: int, out: Path) -> tuple[int, int]:
    """Links in ``out`` to files taken one per package in turn until ``max_bytes`` (so every package has its say,
    not the alphabet's first); returns (files, bytes)."""
    taken = total = 0
    queues = {name: list(reversed(files)) for name, files in packages.items()}
    while queues and total < max_bytes:
        for name in list(queues):
            path = queues[name].pop()
            link = out / path.relative_to(corpus)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(path)
            taken, total = taken + 1, total + path.stat().st_size
            if not queues[name]:
                del queues[name]
            if total >= max_bytes:
                break
    return taken, total


def build(corpus: Path, out: Path) -> Path:
    from glasslab.data.build import build_dataset
    from glasslab.data.config import TokenizerConfig

    cfg = corpus_config(corpus, 0, num_workers=2, tokenizer=TokenizerConfig(vocab_size=4096))
    return build_dataset(cfg, out)


def timed_map(dataset: Path, lab: Path, workers: int, k: int) -> tuple[float, float, Path]:
    """Wall and CPU seconds (this process and its finished children) of a map, and its folder."""
    from glasslab.data.map import map_plan
    from glasslab.lab import run_one_step

    before = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = run_one_step(map_plan(dataset, k=k, num_workers=workers, progress=False), lab)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = sum(a.ru_utime - b.ru_utime + a.ru_stime - b.ru_stime for a, b in zip(after, before, strict=True))
    return wall, cpu, done.folder


def reference_cpu_seconds(dataset: Path, dims: int, fine_k: int, sample: int) -> tuple[float, int]:
    """CPU seconds of the plain scikit-learn pipeline over every document of ``dataset``, and the documents."""
    from sklearn.cluster import MiniBatchKMeans
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer

    from glasslab.data.map import decode_documents, shard_counts
    from glasslab.data.map_cluster import one_thread
    from glasslab.data.map_embed import WORD_PATTERN

    start = time.process_time()
    keys = [(d, s, i) for d, s, n in shard_counts(dataset) for i in range(n)]
    with one_thread():
        texts = decode_documents(str(dataset), keys)
        matrix = TfidfVectorizer(token_pattern=WORD_PATTERN, sublinear_tf=True, dtype=np.float32).fit_transform(texts)
        rows = np.random.default_rng(0).choice(len(texts), size=min(sample, len(texts)), replace=False)
        svd = TruncatedSVD(n_components=min(dims, len(rows) - 1), random_state=0).fit(matrix[rows])
        vectors = svd.transform(matrix)
        kmeans = MiniBatchKMeans(n_clusters=fine_k, random_state=0, n_init=1).fit(vectors[rows])
        kmeans.predict(vectors)
    return time.process_time() - start, len(keys)


def package_agreement(dataset: Path, folder: Path) -> tuple[float, float, Counter]:
    """NMI of the coarse clusters with each training file's top-level folder, and of a shuffled assignment."""
    import pyarrow.parquet as pq
    from sklearn.metrics import normalized_mutual_info_score

    from glasslab.data.map import DOCUMENTS_FILE
    from glasslab.data.provenance import ProvenanceIndex

    table = pq.read_table(folder / DOCUMENTS_FILE).to_pydict()
    provenance = ProvenanceIndex(dataset)
    train = [i for i, split in enumerate(table["split"]) if split == "train"]
    packages = [provenance.record(table["domain"][i], "train", table["document"][i])["file"].split("/")[0]
                for i in train]
    clusters = np.array([table["cluster"][i] for i in train])
    shuffled = np.random.default_rng(0).permutation(clusters)
    return (normalized_mutual_info_score(packages, clusters), normalized_mutual_info_score(packages, shuffled),
            Counter(packages))


def rss_child(dataset: str, lab: str, k: int) -> None:
    """Map ``dataset`` on 1 worker and print this process's and its workers' peak RSS (MB)."""
    sys.path.insert(0, str(SRC))
    timed_map(Path(dataset), Path(lab), 1, k)
    self_mb = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                   if line.startswith("VmHWM:")) / 1024
    print(json.dumps({"self_mb": self_mb, "workers_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))


def peak_rss_mb(dataset: Path, lab: Path, k: int) -> float:
    done = subprocess.run([sys.executable, __file__, "--rss-child", str(dataset), str(lab), str(k)],
                          capture_output=True, text=True, check=True)
    peaks = json.loads(done.stdout.strip().splitlines()[-1])
    return max(peaks["self_mb"], peaks["workers_mb"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=sysconfig.get_paths()["purelib"],
                        help="folder whose **/*.py files are the corpus (default: site-packages)")
    parser.add_argument("--max-mb", type=float, default=20, help="read at most this much of the corpus (0: all)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--k", type=int, default=40)
    parser.add_argument("--scale", type=int, default=10, help="the memory check's smaller corpus: 1/scale")
    parser.add_argument("--repeats", type=int, default=5,
                        help="interleaved rounds of each side of a ratio (the headline is their median)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, 2 rounds: check that the bench runs")
    parser.add_argument("--rss-child", nargs=3, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_child:
        rss_child(args.rss_child[0], args.rss_child[1], int(args.rss_child[2]))
        return
    sys.path.insert(0, str(SRC))
    if args.smoke:
        args.max_mb, args.k, args.scale, args.repeats = 0.3, 4, 2, 2
    tmp = Path(tempfile.mkdtemp(prefix="map_bench_"))
    corpus, max_bytes = Path(args.corpus), int(args.max_mb * 1e6) or 1 << 62
    packages = package_files(corpus)
    all_mb = sum(p.stat().st_size for files in packages.values() for p in files) / 1e6
    files, read = sampled_corpus(packages, corpus, max_bytes, tmp / "corpus")
    sampled_corpus(packages, corpus, read // args.scale, tmp / "corpus-small")
    print(f"corpus {corpus}: {len(packages)} packages, {all_mb:.0f} MB of .py; read {files} files, {read / 1e6:.1f} "
          f"MB, a file per package in turn; workers={args.workers} cpus={os.cpu_count()} load={loadavg()}", flush=True)
    dataset, small = build(tmp / "corpus", tmp / "data"), build(tmp / "corpus-small", tmp / "data-small")
    with LoadWatch():
        report(args, tmp, dataset, small, read / 1e6, all_mb)


def map_rounds(args, tmp: Path, dataset: Path) -> tuple[dict[str, list[float]], dict, Path, float]:
    """The map on 1 worker, on ``--workers`` and the reference pipeline, interleaved ``--repeats`` times
    (bench/interleave.py), each map in a lab of its own (a lab would find the step cached). Returns by side
    each round's figure (the maps' wall seconds, ``rate_vs_reference``: ours over the reference's documents
    per CPU second), the last 1-worker map's summary and folder, and its CPU seconds."""
    import pyarrow.parquet as pq

    from glasslab.data.map import DOCUMENTS_FILE, read_map

    last: dict = {"round": -1}

    def one() -> float:
        last["round"] += 1
        wall, last["cpu"], last["one"] = timed_map(dataset, tmp / f"lab-1-{last['round']}", 1, args.k)
        last["summary"] = read_map(last["one"], dataset)
        return wall

    def many() -> float:
        wall, _, folder = timed_map(dataset, tmp / f"lab-{args.workers}-{last['round']}", args.workers, args.k)
        assert pq.read_table(last["one"] / DOCUMENTS_FILE).equals(pq.read_table(folder / DOCUMENTS_FILE)), \
            "maps differ"
        return wall

    def reference() -> float:
        summary = last["summary"]
        ref_cpu, ref_documents = reference_cpu_seconds(dataset, summary["settings"]["dims"], summary["fine_k"],
                                                       summary["settings"]["sample"])
        cpu = summary["process_cpu_seconds"]  # 1 worker: every task ran in this process
        ours_rate = (summary["documents"] + summary["heldout_documents"]) / (cpu["fit"] + cpu["assign"])
        return ours_rate / (ref_documents / ref_cpu)

    rounds = interleaved({"one": one, "many": many, "rate_vs_reference": reference}, args.repeats)
    return rounds, last["summary"], last["one"], last["cpu"]


def report(args, tmp: Path, dataset: Path, small: Path, read_mb: float, all_mb: float) -> None:
    import sklearn.cluster  # noqa: F401  (imported before the clocks start, as a long-lived worker has it)
    import sklearn.decomposition  # noqa: F401

    rounds, summary, one, one_cpu = map_rounds(args, tmp, dataset)
    documents = summary["documents"] + summary["heldout_documents"]
    cpu = summary["process_cpu_seconds"]
    one_wall, many_wall = statistics.median(rounds["one"]), statistics.median(rounds["many"])
    ours_rate = documents / (cpu["fit"] + cpu["assign"])
    ref_rate = ours_rate / rounds["rate_vs_reference"][-1]
    control = machine_scaling()
    nmi, nmi_random, packages = package_agreement(dataset, one)
    rss_small, rss_large = peak_rss_mb(small, tmp / "lab-rss-small", args.k), peak_rss_mb(dataset, tmp / "lab-rss",
                                                                                         args.k)
    print(f"{documents:,} documents ({summary['documents']:,} training), {summary['tokens']:,} training tokens; "
          f"K {summary['k']} from fine K {summary['fine_k']}; 1 worker: CPU s {cpu} ({one_cpu:.1f} in all)")
    print(f"packages: {len(packages)}; most files: "
          + ", ".join(f"{name} {count}" for name, count in packages.most_common(12)))
    print(f"last round: ours {ours_rate:.1f} docs/CPU-s, reference {ref_rate:.1f} docs/CPU-s; medians: "
          f"1 worker {one_wall:.1f} s, {args.workers} workers {many_wall:.1f} s; control {control:.2f}x, "
          f"load {loadavg()}; peak RSS {rss_small:.0f} MB at 1/{args.scale}, {rss_large:.0f} MB at 1x")
    for cluster in summary["clusters"][:8]:
        print(f"  {cluster['share']:6.1%}  {', '.join(w for w, _ in cluster['terms'][:6])}")
    minutes = many_wall / 60 * (all_mb / read_mb)
    print("map_docs_per_s_per_core_vs_reference: "
          f"{headline(rounds['rate_vs_reference'], f'target >= 0.8; ours {ours_rate:.0f} docs/s per core')}")
    scaling = paired_ratios(rounds["one"], rounds["many"])
    note = f"target >= 1.6 on idle cores; CPU-bound control {control:.2f}"
    print(f"map_scaling_2_workers: {headline(scaling, note)}")
    print(f"map_peak_rss_growth_10x: {rss_large / rss_small:.2f}  (target <= 1.2; {args.scale}x the corpus)")
    print(f"map_nmi_vs_package: {nmi:.3f}  (target >= 0.5 at K=40; random assignment {nmi_random:.3f})")
    print(f"map_minutes_site_packages: {minutes:.1f}  (on {args.workers} workers; measured on {read_mb:.0f} of "
          f"{all_mb:.0f} MB and carried to all of it)")


if __name__ == "__main__":
    main()
