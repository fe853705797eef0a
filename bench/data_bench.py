"""Data build benchmark: end-to-end throughput per core, scaling, Ray vs processes, datatrove stage by stage,
near-dedup precision and recall, and memory at 10x the corpus.

Everything is measured side by side in one run, on a real corpus nobody here wrote: the Python sources
(``**/*.py``) under ``--corpus`` (default: this interpreter's site-packages, a few hundred MB).

1. The build end to end (read → shards) with 1 worker, 2 workers, and 2 Ray tasks at once on a local Ray
   (started before the clock): MB/s of input per core, the 2-worker speed-up (it needs 2 idle cores:
   the load average is printed beside it), Ray's throughput over processes', and each stage's MB/s per
   core. The three builds run interleaved (1, 2, Ray, 1, 2, Ray … over ``--repeats`` rounds; each ratio is
   the median of the rounds' ratios, printed with its spread) and must give the same manifest hash. Then
   where the workers lose, from the CPU seconds of every task (``build.json``): per stage its tasks, their
   CPU with 1 and N workers, the longest task, the span its tasks need on N idle cores, what the pool adds
   around them, the driver's time alone before it, and its measured scaling beside the CPU-bound control;
   for the build, the share of its CPU that can run N at once and the scaling that allows — figures a
   loaded machine moves far less than wall times.
2. datatrove, stage by stage on identical inputs: the corpus as JSONL files of at most 4 MB (one task
   each on both sides), each stage fed all of it — Gopher quality + repetition filters (our ``prose``
   rules: the same thresholds, the same whitespace words), exact dedup, MinHash near-dedup (the same
   word 5-gram shingles, bands and rows) and tokenization (our tokenizer.json) — on datatrove's
   ``LocalPipelineExecutor`` and on our task runner, the same number of workers. datatrove runs from
   ``--datatrove-python`` (a venv of its own: it pins other versions of packages we use); skipped, saying
   so, when there is none.
3. Near-dedup precision and recall on a planted corpus: originals with copies at 5, 10, 20 and 40% word
   edits (in 1-3 contiguous spans) and unrelated documents sharing boilerplate (Jaccard at most the
   threshold - 0.15). A true pair has word-shingle Jaccard >= the threshold. Precision: the share of
   removed documents that have a kept duplicate (a true pair with a kept document); recall: the share
   of true pairs of which a document was removed (no longer both in the training data).
4. Peak RSS of a build (its process and its workers) on a seeded corpus of distinct documents, 1x and
   ``--scale``x: bounded memory means the same peak.
5. The demo's data build, end to end (its seconds are quoted in the docs).

Run: ``python bench/data_bench.py [--corpus DIR] [--max-mb N] [--datatrove-python PATH]``. ``--baseline
SRC`` (another checkout's ``src/``) runs section 1 only, every build in a fresh process, with SRC's sources and
ours interleaved (1 and N workers each): before and after in one run. ``--smoke`` (0.5 MB
of the corpus, 1 round without Ray, a tiny planted corpus, 0.3 MB x 10 for memory, the quick demo data) only checks
that the bench still runs, and never needs datatrove.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from interleave import LoadWatch, headline, interleaved, paired_ratios

SRC = Path(__file__).resolve().parents[1] / "src"
JSONL_FILE_BYTES = 4_000_000
"""Stage-comparison inputs per JSONL file: one read task on our side (``inputs.TASK_BYTES``), one task on
datatrove's."""
DATATROVE_STAGES = ("filters", "exact", "near", "tokenize")
"""The stages timed against datatrove's, in the order each round runs them."""


# --- datatrove's side (runs in datatrove's own interpreter: no glasslab imports here) -------------------


def datatrove_child(stage: str, inputs: str, work: str, workers: int, tokenizer: str, bands: int, rows: int) -> None:
    """Run one stage's datatrove pipeline(s) on ``inputs`` and print its wall seconds as JSON."""
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.text import TextNormConfig
    from datatrove.utils.word_tokenizers import WordTokenizer

    class Whitespace(WordTokenizer):  # our words: str.split (datatrove's English words need spaCy)
        def word_tokenize(self, text):
            return text.split()

        def sent_tokenize(self, text):
            return [text]

        def span_tokenize(self, text):
            return [(0, len(text))]

    words = Whitespace()
    tasks = len(list(Path(inputs).glob("*.jsonl")))
    out = Path(work)

    def run(pipeline, n=tasks, name=stage):
        LocalPipelineExecutor(pipeline, tasks=n, workers=min(workers, n), logging_dir=str(out / "logs" / name),
                              start_method="fork").run()

    def reader():
        return JsonlReader(inputs, glob_pattern="*.jsonl")

    start = time.perf_counter()
    if stage == "filters":
        from datatrove.pipeline.filters import GopherQualityFilter, GopherRepetitionFilter

        run([reader(),
             GopherQualityFilter(min_doc_words=20, max_doc_words=200_000, min_avg_word_length=3, max_avg_word_length=10,
                                 max_symbol_word_ratio=0.1, max_bullet_lines_ratio=None, max_ellipsis_lines_ratio=None,
                                 max_non_alpha_words_ratio=0.7, min_stop_words=None, language=words),
             GopherRepetitionFilter(dup_line_frac=0.3, dup_para_frac=None, dup_line_char_frac=None,
                                    dup_para_char_frac=None, top_n_grams=((2, 0.2),), dup_n_grams=((5, 0.15),),
                                    language=words),
             JsonlWriter(str(out / "kept"), compression=None)])
    elif stage == "exact":
        from datatrove.pipeline.dedup.exact_dedup import (
            ExactDedupConfig,
            ExactDedupFilter,
            ExactDedupSignature,
            ExactFindDedups,
        )

        def content(doc) -> str:
            return doc.text

        config = ExactDedupConfig(content_getter=content)
        run([reader(), ExactDedupSignature(str(out / "sigs"), config, finder_workers=workers)], name="sigs")
        run([ExactFindDedups(str(out / "sigs"), str(out / "dups"), config)], n=workers, name="find")
        run([reader(), ExactDedupFilter(str(out / "dups"), config), JsonlWriter(str(out / "kept"), compression=None)],
            name="filter")
    elif stage == "near":
        from datatrove.pipeline.dedup.minhash import (
            MinhashConfig,
            MinhashDedupBuckets,
            MinhashDedupCluster,
            MinhashDedupFilter,
            MinhashDedupSignature,
        )

        plain = TextNormConfig(lowercase=False, norm_whitespace=False, remove_punctuation=False,
                               norm_unicode_diacritics=False, norm_numbers=False)
        config = MinhashConfig(n_grams=5, num_buckets=bands, hashes_per_bucket=rows, norm_config=plain)
        run([reader(), MinhashDedupSignature(str(out / "sigs"), config, language=words)], name="sigs")
        run([MinhashDedupBuckets(str(out / "sigs"), str(out / "buckets"), config=config)], n=bands, name="buckets")
        run([MinhashDedupCluster(str(out / "buckets"), str(out / "remove"), config=config)], n=1, name="cluster")
        run([reader(), MinhashDedupFilter(str(out / "remove")), JsonlWriter(str(out / "kept"), compression=None)],
            name="filter")
    elif stage == "tokenize":
        from datatrove.pipeline.tokens import DocumentTokenizer

        run([reader(), DocumentTokenizer(str(out / "tokens"), tokenizer_name_or_path=tokenizer,
                                         eos_token="<|endoftext|>")])
    print(json.dumps({"seconds": time.perf_counter() - start}))


def datatrove_seconds(python: str, stage: str, inputs: Path, work: Path, workers: int, tokenizer: Path,
                      bands: int, rows: int) -> float:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    command = [python, __file__, "--datatrove-child", stage, str(inputs), str(work), str(workers), str(tokenizer),
               str(bands), str(rows)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"datatrove {stage} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["seconds"]


# --- memory: a build in a fresh process -------------------------------------------------------------------


def rss_child(corpus: str, out: str, workers: int) -> None:
    """Build ``corpus`` (JSONL) into ``out`` and print the peak RSS of this process and of its workers (MB)."""
    sys.path.insert(0, str(SRC))
    from glasslab.data.build import build_dataset
    from glasslab.data.config import BuildConfig, SourceConfig, TokenizerConfig

    cfg = BuildConfig(sources=(SourceConfig(domain="x", kind="jsonl", path=corpus),),
                      tokenizer=TokenizerConfig(vocab_size=1024, sample_bytes=1_000_000), num_workers=workers,
                      progress=False)
    build_dataset(cfg, Path(out))
    # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so this process would inherit the bench's peak.
    # The workers are forked from this small process, so their ru_maxrss is their own.
    self_mb = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                   if line.startswith("VmHWM:")) / 1024
    children_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps({"self_mb": self_mb, "workers_mb": children_mb}))


def distinct_corpus(path: Path, megabytes: float, seed: int = 0) -> int:
    """JSONL of distinct documents of random words (seeded), ``megabytes`` of text; returns its bytes."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocabulary = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 10))) for _ in range(20_000)]
    written = 0
    with open(path, "w", encoding="utf-8") as out:
        while written < megabytes * 1e6:
            words = rng.choices(vocabulary, k=rng.randint(150, 1500))
            text = "\n".join(" ".join(words[i : i + 12]) for i in range(0, len(words), 12))
            written += len(text)
            out.write(json.dumps({"text": text}) + "\n")
    return written


def peak_rss(corpus: Path, out: Path, workers: int) -> dict:
    command = [sys.executable, __file__, "--rss-child", str(corpus), str(out), str(workers)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- near-dedup on a planted corpus -----------------------------------------------------------------------


def shingle_set(text: str, n: int = 5) -> set:
    words = text.split()
    return {tuple(words[i : i + n]) for i in range(max(len(words) - n + 1, 1))}


def true_jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b)


def edited(words: list[str], fraction: float, rng: random.Random, vocabulary: list[str]) -> list[str]:
    """``words`` with ``fraction`` of them replaced, in 1-3 contiguous spans."""
    out = list(words)
    to_edit = max(1, round(fraction * len(words)))
    spans = rng.randint(1, 3)
    for k in range(spans):
        size = to_edit // spans + (k < to_edit % spans)
        start = rng.randrange(0, max(1, len(out) - size))
        for i in range(start, min(start + size, len(out))):
            out[i] = rng.choice(vocabulary)
    return out


def planted_corpus(originals: int, seed: int, threshold: float) -> tuple[list[str], list[list[int]]]:
    """Documents and groups of related document indices (an original and its 4 copies; unrelated documents
    sharing one boilerplate block); documents in different groups share nothing."""
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(50_000)]
    texts: list[str] = []
    groups: list[list[int]] = []
    for _ in range(originals):
        words = rng.choices(vocabulary, k=rng.randint(300, 600))
        group = [len(texts)]
        texts.append(" ".join(words))
        for fraction in (0.05, 0.10, 0.20, 0.40):
            group.append(len(texts))
            texts.append(" ".join(edited(words, fraction, rng, vocabulary)))
        groups.append(group)
    blocks = [rng.choices(vocabulary, k=rng.randint(150, 250)) for _ in range(max(2, originals // 20))]
    for block in blocks:
        group = []
        for _ in range(5):
            own = rng.choices(vocabulary, k=rng.randint(300, 500))
            group.append(len(texts))
            texts.append(" ".join(block + own))
        groups.append(group)
    for group in groups[originals:]:  # the boilerplate pairs stay well below the threshold
        sets = [shingle_set(texts[i]) for i in group]
        assert max(true_jaccard(a, b) for i, a in enumerate(sets) for b in sets[i + 1:]) <= threshold - 0.15
    order = list(range(len(texts)))
    rng.shuffle(order)  # duplicates anywhere in the corpus, not next to their originals
    where = {old: new for new, old in enumerate(order)}
    return [texts[i] for i in order], [[where[i] for i in group] for group in groups]


def near_dedup_quality(texts: list[str], groups: list[list[int]], threshold: float, num_perm: int,
                       shingle_words: int) -> tuple[float, float, int, int]:
    """(precision, recall, true pairs, removed documents) of the near-dedup method on ``texts``: signatures,
    bands, bucket pairs, verification and clusters as the build's stages compute them (one partition)."""
    import numpy as np

    from glasslab.data import dedup
    from glasslab.data.filters import Document

    hasher = dedup.MinHasher(num_perm, shingle_words)
    bands, rows = dedup.lsh_bands(num_perm, threshold)
    docs = [Document(t) for t in texts]
    signatures = np.stack([hasher.signature(hasher.shingle_list(d)) for d in docs])
    hashes = dedup.band_hashes(signatures, bands, rows)
    records = np.zeros(hashes.size, dtype=dedup.BAND_RECORD)
    records["hash"], records["key"] = hashes.reshape(-1), np.repeat(np.arange(len(docs)), bands)
    pairs = dedup.unique_pairs(dedup.bucket_pairs(records))
    shingles = [hasher.shingles(d) for d in docs]
    verified = pairs[[dedup.jaccard(shingles[a], shingles[b]) >= threshold for a, b in zip(pairs["a"], pairs["b"],
                                                                                             strict=True)]]
    removed = set(dedup.cluster_removals(verified).tolist())
    kept = [k for k in range(len(docs)) if k not in removed]
    sets = [shingle_set(t, shingle_words) for t in texts]
    group_of = {k: g for g, group in enumerate(groups) for k in group}
    # a removal is right when a kept document is its duplicate (related documents share a group)
    correct = sum(any(true_jaccard(sets[k], sets[j]) >= threshold for j in kept if group_of.get(j) == group_of.get(k))
                  for k in removed)
    true_pairs = found = 0
    for group in groups:
        for i, a in enumerate(group):
            for b in group[i + 1:]:
                if true_jaccard(sets[a], sets[b]) >= threshold:
                    true_pairs += 1
                    found += a in removed or b in removed  # no longer both in the training data
    precision = correct / len(removed) if removed else 1.0
    recall = found / true_pairs if true_pairs else 1.0
    return precision, recall, true_pairs, len(removed)


def cluster_bytes_per_pair(pairs: int) -> float:
    """Peak bytes the cluster stage allocates per verified pair (numpy and scipy report to tracemalloc)."""
    import tracemalloc

    import numpy as np

    from glasslab.data import dedup

    rng = np.random.default_rng(0)
    verified = np.zeros(pairs, dtype=dedup.PAIR)
    verified["a"] = rng.integers(0, pairs, pairs)
    verified["b"] = verified["a"] + rng.integers(1, 1000, pairs)
    tracemalloc.start()
    dedup.cluster_removals(verified)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return (peak + verified.nbytes) / pairs


# --- our side ---------------------------------------------------------------------------------------------


def python_files(corpus: Path, max_bytes: int) -> list[Path]:
    files, total = [], 0
    for path in sorted(corpus.glob("**/*.py")):
        if not path.is_file():
            continue
        files.append(path)
        total += path.stat().st_size
        if max_bytes and total >= max_bytes:
            break
    return files


def corpus_config(corpus: Path, max_bytes: int, **kwargs):
    from glasslab.data.config import BuildConfig, SourceConfig

    source = SourceConfig(domain="code", kind="text", path=str(corpus), pattern="**/*.py", max_bytes=max_bytes)
    return BuildConfig(sources=(source,), progress=False, **kwargs)


def timed_build(cfg, out: Path) -> tuple[float, dict, str]:
    from glasslab.data.build import build_dataset
    from glasslab.data.shards import manifest_hash

    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    build_dataset(cfg, out)
    seconds = time.perf_counter() - start
    record = {**json.loads((out / "build.json").read_text()), "bench_wall_s": seconds}
    return seconds, record, manifest_hash(out)


def write_stage_inputs(files: list[Path], folder: Path) -> int:
    """The corpus as JSONL files of at most :data:`JSONL_FILE_BYTES`; returns the UTF-8 bytes of text."""
    folder.mkdir(parents=True)
    index, size, total = 0, 0, 0
    out = open(folder / f"{index:05d}.jsonl", "w", encoding="utf-8")
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        line = json.dumps({"text": text}) + "\n"
        if size and size + len(line) > JSONL_FILE_BYTES:
            out.close()
            index, size = index + 1, 0
            out = open(folder / f"{index:05d}.jsonl", "w", encoding="utf-8")
        out.write(line)
        size += len(line)
        total += len(text.encode("utf-8", "surrogateescape"))
    out.close()
    return total


def our_stage_seconds(inputs: Path, work: Path, workers: int) -> dict[str, float]:
    """Our stages alone on the JSONL inputs, through the build's driver and task runner: the filters (read with
    the prose rules), exact dedup and near dedup (read with no filters and one kind of dedup, its stages, the
    survivors), tokenization (the tokenize and assemble stages of a build with nothing dropped)."""
    from glasslab.data.build import Build
    from glasslab.data.config import DedupConfig, EvalSplitConfig, SourceConfig
    from glasslab.data.inputs import plan_read_tasks
    from glasslab.data.progress import Progress
    from glasslab.data.runner import TaskRunner

    def driver(name: str, filters: str, exact: bool, near: bool) -> tuple[Build, Progress]:
        source = SourceConfig(domain="x", kind="jsonl", path=str(inputs), filters=filters)
        cfg = corpus_config(inputs, 0, dedup=DedupConfig(exact=exact, near=near),
                            eval=EvalSplitConfig(fraction=0.0, min_documents=0, min_bytes=0))
        cfg = dataclasses.replace(cfg, sources=(source,))
        status = Progress(None, enabled=False)
        runner = TaskRunner(work / name, workers, "local", status)
        return Build(cfg, work / name, plan_read_tasks(cfg.sources), runner, status), status

    def seconds(status: Progress, stages: tuple[str, ...]) -> float:
        return sum(s.seconds for s in status.stages if s.stage in stages)

    out = {}
    build, status = driver("filters", "prose", False, False)
    build.read()
    out["filters"] = seconds(status, ("read",))
    build.runner.close()
    for kind, stages in (("exact", ("read", "exact", "survivors")),
                         ("near", ("read", "buckets", "verify", "clusters", "survivors"))):
        build, status = driver(kind, "none", kind == "exact", kind == "near")
        build.read()
        build.dedup()
        build.survivors()
        out[kind] = seconds(status, stages)
        build.runner.close()
    build, status = driver("tokenize", "none", False, False)
    build.read()
    build.dedup()
    build.survivors()
    build.choose_eval()
    build.overlap_and_tokenizer()
    build.tokenize()
    out["tokenize"] = seconds(status, ("tokenize", "assemble"))
    out["tokenizer_json"] = str(next((work / "tokenize").glob("tokenizer/*/tokenizer/tokenizer.json")))
    build.runner.close()
    return out


def loadavg() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _burn(n: int) -> float:
    total = 0
    for i in range(n):
        total += i * i
    return float(total)


def machine_scaling(n: int = 10_000_000) -> float:
    """What 2 processes buy on this machine right now: a CPU-bound loop run twice in a row, over the same two
    run at once (2.0 on 2 idle cores; a shared machine gives less, whatever the build does)."""
    import multiprocessing

    start = time.perf_counter()
    _burn(n)
    _burn(n)
    serial = time.perf_counter() - start
    with multiprocessing.get_context("fork").Pool(2) as pool:
        start = time.perf_counter()
        pool.map(_burn, [n, n])
        parallel = time.perf_counter() - start
    return serial / parallel


def build_rounds(corpus: Path, max_bytes: int, workers: int, repeats: int, work: Path,
                 with_ray: bool) -> tuple[dict[str, list[float]], dict[str, list[dict]], float]:
    """The build end to end with 1 worker (in this process, so its CPU time is this process's), ``workers``
    worker processes and, ``with_ray``, as many Ray tasks, interleaved ``repeats`` times (bench/interleave.py);
    every build must give the same dataset. Returns each side's seconds by round, each side's records
    (build.json) by round and the 1-worker build's median CPU seconds."""
    records: dict[str, list[dict]] = {}
    hashes, cpu = set(), {}

    def side(name: str, **kwargs) -> Callable[[], float]:
        def seconds() -> float:
            before = resource.getrusage(resource.RUSAGE_SELF)
            wall, record, digest = timed_build(corpus_config(corpus, max_bytes, **kwargs), work / name)
            records.setdefault(name, []).append(record)
            after = resource.getrusage(resource.RUSAGE_SELF)
            cpu.setdefault(name, []).append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
            hashes.add(digest)
            return wall
        return seconds

    sides = {"one": side("one", num_workers=1), "many": side("many", num_workers=workers)}
    if with_ray:
        sides["ray"] = side("ray", num_workers=workers, backend="ray")
    rounds = interleaved(sides, repeats)
    assert len(hashes) == 1, f"the builds ({', '.join(sides)}) built {len(hashes)} different datasets"
    return rounds, records, statistics.median(cpu["one"])


# --- before/after: builds in fresh processes, our sources against a baseline's --------------------------------


def build_child(src: str, corpus: str, max_bytes: int, workers: int, out: str) -> None:
    """Build the corpus with the glasslab sources in ``src`` and print the wall seconds, the manifest hash and
    build.json as JSON."""
    sys.path.insert(0, src)
    seconds, record, digest = timed_build(corpus_config(Path(corpus), max_bytes, num_workers=workers), Path(out))
    print(json.dumps({"seconds": seconds, "hash": digest, "record": record}))


def baseline_rounds(corpus: Path, max_bytes: int, workers: int, repeats: int, work: Path,
                    baseline: Path) -> tuple[dict[str, list[float]], dict[str, list[dict]], dict[str, set]]:
    """The build with 1 and ``workers`` workers, with our sources and with ``baseline``'s, each in a fresh
    process, interleaved ``repeats`` times. Returns each side's seconds and records by round, and its hashes."""
    records: dict[str, list[dict]] = {}
    hashes: dict[str, set] = {}

    def side(name: str, src: Path, n: int) -> Callable[[], float]:
        def seconds() -> float:
            command = [sys.executable, __file__, "--build-child", str(src), str(corpus), str(max_bytes), str(n),
                       str(work / name)]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"build {name} failed:\n{done.stderr[-3000:]}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            records.setdefault(name, []).append(result["record"])
            hashes.setdefault(name[: name.index("_")], set()).add(result["hash"])
            return result["seconds"]
        return seconds

    sides = {"base_one": side("base_one", baseline, 1), "base_many": side("base_many", baseline, workers),
             "ours_one": side("ours_one", SRC, 1), "ours_many": side("ours_many", SRC, workers)}
    return interleaved(sides, repeats), records, hashes


def run_baseline(args: argparse.Namespace) -> None:
    """``--baseline SRC``: section 1 only, before (SRC) and after (ours) in one interleaved run."""
    max_bytes = int(args.max_mb * 1e6)
    tmp = Path(tempfile.mkdtemp(prefix="data_bench_"))
    files = python_files(Path(args.corpus), max_bytes)
    n = args.workers
    print(f"corpus {args.corpus}: {len(files)} files, {sum(p.stat().st_size for p in files) / 1e6:.1f} MB; "
          f"workers={n} cpus={os.cpu_count()} baseline={args.baseline} load={loadavg()}")
    control = machine_scaling()
    rounds, records, hashes = baseline_rounds(Path(args.corpus), max_bytes, n, args.repeats, tmp,
                                              Path(args.baseline))
    for name, seconds in rounds.items():
        print(f"{name}: {headline(seconds, 'seconds')}")
    print(f"manifest hashes: baseline {sorted(h[:12] for h in hashes['base'])}, ours "
          f"{sorted(h[:12] for h in hashes['ours'])}")
    assert all(len(h) == 1 for h in hashes.values()), "1 and N workers built different datasets"
    stages = [s["stage"] for s in records["ours_many"][0]["stages"]]
    print("stage wall seconds (medians), baseline 1w/Nw -> ours 1w/Nw: " + ", ".join(
        f"{st} " + "/".join(f"{_median_of(records[side], st, 'seconds'):.2f}" if any(
            s["stage"] == st for s in records[side][0]["stages"]) else "-" for side in rounds) for st in stages))
    print_accounting(*stage_accounting(records["ours_one"], records["ours_many"], n), n, control)
    print(f"baseline data_build_scaling_{n}_workers: "
          f"{headline(paired_ratios(rounds['base_one'], rounds['base_many']), 'before')}")
    print(f"data_build_scaling_{n}_workers: "
          f"{headline(paired_ratios(rounds['ours_one'], rounds['ours_many']), 'after')}")
    print(f"{n}-worker build, baseline seconds over ours: "
          f"{headline(paired_ratios(rounds['base_many'], rounds['ours_many']), 'above 1: faster after')}")
    print(f"1-worker build, baseline seconds over ours: "
          f"{headline(paired_ratios(rounds['base_one'], rounds['ours_one']), 'above 1: faster after')}")
    print(f"load average (1/5/15 min) at the end: {loadavg()}; a CPU-bound loop's 2-process speed-up before: "
          f"{control:.2f}, after: {machine_scaling():.2f}")
    shutil.rmtree(tmp)


# --- where the workers lose: each stage's tasks by their CPU seconds (build.json's stages) ------------------


def fifo_span(task_cpu_s: list[float], workers: int) -> float:
    """Seconds ``workers`` idle cores would take over tasks of these CPU seconds, each task handed in turn to the
    first free worker (as the task runner hands them out)."""
    ends = [0.0] * workers
    for cpu in task_cpu_s:
        ends[ends.index(min(ends))] += cpu
    return max(ends)


def concurrent(record: dict) -> list[set[str]]:
    """The build's stages in groups that ran at the same time (their wall-clock intervals overlap), in order."""
    groups: list[tuple[set[str], float]] = []
    for stage in sorted(record["stages"], key=lambda s: s["started"]):
        end = stage["started"] + stage["seconds"]
        if groups and stage["started"] < groups[-1][1]:
            groups[-1] = (groups[-1][0] | {stage["stage"]}, max(groups[-1][1], end))
        else:
            groups.append(({stage["stage"]}, end))
    return [names for names, _ in groups]


def group_span(rows: list[dict], workers: int) -> float:
    """Seconds a group of stages run at once needs on ``workers`` idle cores, at least: all its CPU shared out,
    and no less than its longest chain (a stage's span after the stages it waits for)."""
    def chain(row: dict) -> float:
        return row["span_n"] + max((chain(r) for r in rows if r["stage"] in row["after"]), default=0.0)

    return max(sum(r["cpu_n"] for r in rows) / workers, max(chain(r) for r in rows)) if rows else 0.0


def _median_of(records: list[dict], stage: str, field: str) -> float:
    return statistics.median(next(s for s in r["stages"] if s["stage"] == stage)[field] for r in records)


def _stage(record: dict, name: str) -> dict:
    return next(s for s in record["stages"] if s["stage"] == name)


def stage_accounting(ones: list[dict], manys: list[dict], workers: int) -> tuple[list[dict], dict]:
    """Per stage (medians over the rounds' build.json): tasks, CPU seconds of its tasks with 1 worker and with
    ``workers``, the longest task's CPU seconds, the span its tasks' CPU seconds need on ``workers`` idle
    cores, the smallest task's CPU (a bound on what a task costs whatever its size: starting, reading its
    inputs), the pool's seconds around the tasks, the driver's CPU seconds alone
    before the stage, wall seconds with 1 and ``workers``. Then the build: its CPU seconds with 1 worker, its
    span on ``workers`` (the stages' spans, stages run at once as one group, and the driver's serial CPU
    seconds), the bound that gives, and the share of the CPU that can run ``workers`` at once (Amdahl). CPU
    seconds move far less with the machine's load than wall times (caches shared with other processes still
    inflate them some)."""
    rows = []
    for stage in (s["stage"] for s in manys[0]["stages"]):
        tasks_cpu = [_stage(r, stage)["task_cpu_s"] for r in manys]
        rows.append({"stage": stage, "tasks": _stage(manys[0], stage)["tasks"],
                     "after": _stage(manys[0], stage).get("after", []),
                     "cpu_1": _median_of(ones, stage, "cpu_s"), "cpu_n": _median_of(manys, stage, "cpu_s"),
                     "longest_s": statistics.median(max(cpu, default=0.0) for cpu in tasks_cpu),
                     "span_n": statistics.median(fifo_span(cpu, workers) for cpu in tasks_cpu),
                     "dispatch_s": _median_of(manys, stage, "dispatch_s"),
                     "smallest_ms": 1000 * statistics.median(min(cpu, default=0.0) for cpu in tasks_cpu),
                     "driver_cpu_s": _median_of(manys, stage, "driver_before_cpu_s"),
                     "wall_1": _median_of(ones, stage, "seconds"), "wall_n": _median_of(manys, stage, "seconds")})

    def driver_cpu(records: list[dict]) -> float:
        return statistics.median(r["driver_after"]["cpu_s"] + sum(s["driver_before_cpu_s"] for s in r["stages"])
                                 for r in records)

    serial_n = driver_cpu(manys)
    cpu_1 = sum(row["cpu_1"] for row in rows) + driver_cpu(ones)
    cpu_n = sum(row["cpu_n"] for row in rows) + serial_n
    groups = concurrent(manys[0])
    span = sum(group_span([r for r in rows if r["stage"] in group], workers) for group in groups) + serial_n
    one_by_one = sum(row["span_n"] for row in rows) + serial_n  # every stage after the one before
    build = {"cpu_1": cpu_1, "cpu_n": cpu_n, "span_n": span, "serial_n": serial_n, "bound": cpu_1 / span,
             "bound_one_by_one": cpu_1 / one_by_one,
             "together": set().union(*(group for group in groups if len(group) > 1)),
             "parallel_fraction": (1 - span / cpu_n) / (1 - 1 / workers),
             "driver_after_cpu_s": statistics.median(r["driver_after"]["cpu_s"] for r in manys),
             "outside_s": statistics.median(r["bench_wall_s"] - r["timings"]["total_s"] for r in manys)}
    return rows, build


def print_accounting(rows: list[dict], build: dict, workers: int, control: float) -> None:
    """The table of :func:`stage_accounting`, each stage's measured scaling beside the CPU-bound control's."""
    n = workers
    print(f"where {n} workers lose (CPU seconds inside each task; medians over the rounds; spans on {n} idle cores):")
    print(f"  {'stage':<13} {'tasks':>5} {'cpu 1w':>7} {f'cpu {n}w':>7} {'longest':>7} {f'span {n}w':>7} "
          f"{'bound':>5} {'min ms':>7} {'pool s':>6} {'driver':>6} {'wall 1w':>7} {f'wall {n}w':>7} {'scaling':>7}")
    for r in rows:
        bound = r["cpu_1"] / r["span_n"] if r["span_n"] else float("nan")
        scaling = r["wall_1"] / r["wall_n"] if r["wall_n"] else float("nan")
        name = r["stage"] + ("*" if r["stage"] in build["together"] else "")
        print(f"  {name:<13} {r['tasks']:>5} {r['cpu_1']:>7.2f} {r['cpu_n']:>7.2f} {r['longest_s']:>7.2f} "
              f"{r['span_n']:>7.2f} {bound:>5.2f} {r['smallest_ms']:>7.1f} {r['dispatch_s']:>6.2f} "
              f"{r['driver_cpu_s']:>6.2f} {r['wall_1']:>7.2f} {r['wall_n']:>7.2f} {scaling:>7.2f}")
    if build["together"]:
        print("  * ran at the same time (their wall seconds overlap; the build's span counts them as one group)")
    print(f"  driver after the last stage (shards' folder, manifest, report): {build['driver_after_cpu_s']:.2f} s of "
          f"CPU (then {build['outside_s']:.2f} s of wall moving the dataset into place); the driver alone in all: "
          f"{build['serial_n']:.2f} s; the build: {build['cpu_1']:.2f} s of CPU with 1 worker, {build['cpu_n']:.2f} "
          f"with {n}, a span of {build['span_n']:.2f} s on {n} idle cores; a CPU-bound loop's scaling: {control:.2f}")
    print(f"data_build_cpu_parallel_fraction_{n}_workers: {build['parallel_fraction']:.2f}  (share of the {n}-worker "
          f"build's CPU seconds that can run {n} at once, Amdahl; from CPU seconds, not wall time)")
    print(f"data_build_cpu_scaling_bound_{n}_workers: {build['bound']:.2f}  (1-worker CPU seconds over the {n}-worker "
          f"span: what {n} idle cores could give this build; {build['bound_one_by_one']:.2f} with "
          f"every stage after the one before)")


def start_ray(workers: int) -> bool:
    """A local Ray of ``workers`` CPUs started (before any clock), or False when Ray is not installed."""
    try:
        import ray
    except ImportError:
        return False
    from glasslab.lab.modules import user_pythonpath

    ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": user_pythonpath()}})
    return True


def datatrove_rounds(python: str, inputs: Path, work: Path, workers: int, repeats: int, bands: int,
                     rows: int) -> tuple[list[float], dict[str, list[float]], dict[str, list[float]]]:
    """Our four stages and datatrove's on the same inputs, interleaved ``repeats`` times. Returns each round's
    ratio (datatrove's seconds over ours, all stages), then each side's seconds by stage and round."""
    ours: dict[str, list[float]] = {stage: [] for stage in DATATROVE_STAGES}
    theirs: dict[str, list[float]] = {stage: [] for stage in DATATROVE_STAGES}
    tokenizer: list[Path] = []

    def run_ours() -> float:
        measured = our_stage_seconds(inputs, work / f"ours-{len(tokenizer)}", workers)
        tokenizer.append(Path(measured["tokenizer_json"]))
        for stage in DATATROVE_STAGES:
            ours[stage].append(measured[stage])
        return sum(measured[stage] for stage in DATATROVE_STAGES)

    def run_theirs() -> float:
        for stage in DATATROVE_STAGES:
            theirs[stage].append(datatrove_seconds(python, stage, inputs, work / "datatrove" / stage, workers,
                                                   tokenizer[-1], bands, rows))
        return sum(theirs[stage][-1] for stage in DATATROVE_STAGES)

    rounds = interleaved({"ours": run_ours, "theirs": run_theirs}, repeats)
    return paired_ratios(rounds["theirs"], rounds["ours"]), ours, theirs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=sysconfig.get_paths()["purelib"],
                        help="folder whose **/*.py files are the corpus (default: site-packages)")
    parser.add_argument("--max-mb", type=float, default=0, help="read at most this much of the corpus (0: all)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--scale", type=int, default=10, help="the memory check's larger corpus, in multiples")
    parser.add_argument("--datatrove-python", default=os.environ.get("DATATROVE_PYTHON", ""),
                        help="an interpreter with datatrove installed (default: $DATATROVE_PYTHON)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="interleaved rounds of each side of a ratio (the headline is their median)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, 1 round: check that the bench runs")
    parser.add_argument("--datatrove-child", nargs=7, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--baseline", default="",
                        help="a glasslab src/ folder (e.g. main's): run only the end-to-end builds, each with 1 and "
                             "--workers workers, with those sources and ours, in fresh processes, interleaved")
    parser.add_argument("--rss-child", nargs=3, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--build-child", nargs=5, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build_child:
        src, corpus, max_bytes, workers, out = args.build_child
        build_child(src, corpus, int(max_bytes), int(workers), out)
        return
    if args.datatrove_child:
        stage, inputs, work, workers, tokenizer, bands, rows = args.datatrove_child
        datatrove_child(stage, inputs, work, int(workers), tokenizer, int(bands), int(rows))
        return
    if args.rss_child:
        rss_child(args.rss_child[0], args.rss_child[1], int(args.rss_child[2]))
        return
    if args.smoke:
        args.repeats = 1  # the smoke checks that the bench runs: a second round of 3 builds would add ~10 s
    with LoadWatch():
        run_baseline(args) if args.baseline else run_bench(args)


def run_bench(args: argparse.Namespace) -> None:
    """Sections 1-5 of the module's docstring, then the headline lines."""
    sys.path.insert(0, str(SRC))
    from glasslab.data import dedup
    from glasslab.data.config import DedupConfig

    max_bytes = int((0.5 if args.smoke else args.max_mb) * 1e6)
    tmp = Path(tempfile.mkdtemp(prefix="data_bench_"))
    corpus = Path(args.corpus)
    files = python_files(corpus, max_bytes)
    print(f"corpus {corpus}: {len(files)} files, {sum(p.stat().st_size for p in files) / 1e6:.1f} MB; "
          f"workers={args.workers} cpus={os.cpu_count()} python={sys.version.split()[0]} load={loadavg()}")

    # 1. End to end: 1 worker, N workers, Ray, interleaved.
    load_before, control_before = loadavg(), machine_scaling(2_000_000 if args.smoke else 10_000_000)
    with_ray = not args.smoke and start_ray(args.workers)  # Ray's build = the processes': test_lab_ray.py
    rounds, records, one_cpu_s = build_rounds(corpus, max_bytes, args.workers, args.repeats, tmp, with_ray)
    one = records["one"][-1]
    if with_ray:
        import ray

        ray.shutdown()  # before the control's fork: a forked Ray driver reports its pool's SIGTERM
    load_after, control_after = loadavg(), machine_scaling(2_000_000 if args.smoke else 10_000_000)
    one_s, many_s = statistics.median(rounds["one"]), statistics.median(rounds["many"])
    raw_bytes = one["funnel"][0]["bytes"]
    scaling = paired_ratios(rounds["one"], rounds["many"])
    ray_line = (headline(paired_ratios(rounds["many"], rounds["ray"]), "target >= 0.8") if with_ray
                else f"skipped ({'a smoke does not start Ray' if args.smoke else 'Ray is not installed'})")
    print("stages, 1 worker (MB/s of each stage's input): " + ", ".join(
        f"{s['stage']}={s['mb_per_s']:.1f}" for s in one["stages"]))
    print("funnel: " + ", ".join(f"{f['stage']} {f['documents']}/{f['bytes'] / 1e6:.1f}MB" for f in one["funnel"]))
    print_accounting(*stage_accounting(records["one"], records["many"], args.workers), args.workers, control_before)

    # 2. datatrove stage by stage, interleaved with ours.
    inputs = tmp / "jsonl"
    stage_bytes = write_stage_inputs(files, inputs)
    bands, rows = dedup.lsh_bands(DedupConfig().num_perm, DedupConfig().threshold)
    datatrove_line = "skipped (no --datatrove-python; datatrove is a bench-only comparison)"
    if args.datatrove_python and not args.smoke:
        totals, ours, theirs = datatrove_rounds(args.datatrove_python, inputs, tmp / "stages", args.workers,
                                                args.repeats, bands, rows)
        for stage in DATATROVE_STAGES:
            mine, their = statistics.median(ours[stage]), statistics.median(theirs[stage])
            print(f"stage {stage}: ours {stage_bytes / 1e6 / mine / args.workers:.2f} MB/s per core, "
                  f"datatrove {stage_bytes / 1e6 / their / args.workers:.2f}; ratio "
                  f"{headline(paired_ratios(theirs[stage], ours[stage]), 'datatrove seconds / ours')}")
        datatrove_line = headline(totals, f"target >= 1.0, goal >= 1.5; {bands} bands x {rows} rows")
    else:
        ours = our_stage_seconds(inputs, tmp / "ours", args.workers)
        print("stages (ours, MB/s per core): " + ", ".join(
            f"{s}={stage_bytes / 1e6 / ours[s] / args.workers:.2f}" for s in DATATROVE_STAGES))

    # 3. Near-dedup quality on a planted corpus.
    threshold = DedupConfig().threshold
    texts, groups = planted_corpus(40 if args.smoke else 400, seed=0, threshold=threshold)
    precision, recall, true_pairs, removed = near_dedup_quality(texts, groups, threshold, DedupConfig().num_perm,
                                                                DedupConfig().shingle_words)
    print(f"planted corpus: {len(texts)} documents, {true_pairs} true pairs (Jaccard >= {threshold}), "
          f"{removed} removed")
    per_pair = cluster_bytes_per_pair(100_000 if args.smoke else 2_000_000)

    # 4. Peak RSS at 1x and scale x.
    small_mb = 0.3 if args.smoke else 16
    distinct_corpus(tmp / "rss_1x.jsonl", small_mb)
    distinct_corpus(tmp / "rss_big.jsonl", small_mb * args.scale, seed=1)
    small = peak_rss(tmp / "rss_1x.jsonl", tmp / "rss_1x", args.workers)
    big = peak_rss(tmp / "rss_big.jsonl", tmp / "rss_big", args.workers)
    peak_small = max(small.values())
    peak_big = max(big.values())

    # 5. The demo's data build.
    from glasslab.experiments.demo import FULL, QUICK, build_config

    demo_s, _, _ = timed_build(dataclasses.replace(build_config(QUICK if args.smoke else FULL), progress=False),
                               tmp / "demo")

    print(f"load average (1/5/15 min) around the {args.workers}-worker build: {load_before} -> {load_after}; "
          f"a CPU-bound loop's 2-process speed-up then: {control_before:.2f} -> {control_after:.2f} (2.0 when idle)")
    print(f"data_build_mb_per_s_per_core: {raw_bytes / 1e6 / one_s:.2f}  (1 worker, {raw_bytes / 1e6:.1f} MB, "
          f"median {one_s:.1f} s)")
    print(f"data_build_mb_per_cpu_second: {raw_bytes / 1e6 / one_cpu_s:.2f}  (1 worker; per second of CPU time "
          f"used, which a loaded machine does not shrink: {one_cpu_s:.1f} s of CPU in {one_s:.1f} s)")
    print(f"data_build_scaling_2_workers: "
          f"{headline(scaling, f'target >= 1.7 on 2 idle cores; {args.workers} workers median {many_s:.1f} s')}")
    print(f"data_build_ray_vs_processes: {ray_line}")
    print(f"data_build_vs_datatrove_per_core: {datatrove_line}")
    print(f"near_dedup_precision: {precision:.3f}  (target >= 0.98)")
    print(f"near_dedup_recall: {recall:.3f}  (target >= 0.90)")
    print(f"cluster_bytes_per_pair: {per_pair:.0f}  (the one stage holding the whole corpus's state)")
    print(f"peak_rss_mb_1x ({small_mb:g} MB): {peak_small:.0f}  (process {small['self_mb']:.0f}, "
          f"workers {small['workers_mb']:.0f})")
    print(f"peak_rss_mb_{args.scale}x: {peak_big:.0f}  (process {big['self_mb']:.0f}, workers {big['workers_mb']:.0f})")
    print(f"peak_rss_growth_ratio_{args.scale}x: {peak_big / peak_small:.2f}  (target <= 1.2)")
    print(f"demo_build_seconds: {demo_s:.1f}  ({'quick' if args.smoke else 'full'} demo data, default workers)")
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
