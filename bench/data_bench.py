"""Data pipeline benchmark: stage throughput, tokenize-to-shards vs raw encode_batch, loader speed, memory.

Everything is measured side by side in one run on the same text (Python's own standard library and
reference topics, so no download is needed):

- the demo build end to end (default BuildConfig: three built-in domains);
- each processing stage in MB/s of UTF-8 text (read JSONL, normalise, filters, exact and near dedup,
  decontamination);
- tokenize-to-shards (streaming from JSONL, ``--workers`` processes, writing memmap shards) against
  ``Tokenizer.encode_batch`` on the same texts already in memory (target ratio >= 0.8);
- loader tokens/s;
- peak RSS of a process tokenizing a corpus 1x and ``--scale``x the demo's text into shards: bounded
  memory means the larger corpus needs about the same RSS.

Run: ``python bench/data_bench.py`` (about a minute on 2 cores). ``--smoke`` (100 documents or 150 kB per source,
a 512-token BPE, a 2x memory corpus, 20 loader steps) only checks that the bench still runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))

from glasslab.data import BuildConfig, DataConfig, MixtureConfig, build_dataset  # noqa: E402
from glasslab.data.config import DedupConfig, SourceConfig, TokenizerConfig  # noqa: E402
from glasslab.data.decontaminate import Decontaminator  # noqa: E402
from glasslab.data.dedup import ExactDedup, NearDedup  # noqa: E402
from glasslab.data.filters import first_failed_filter  # noqa: E402
from glasslab.data.normalize import normalize  # noqa: E402
from glasslab.data.shards import ShardWriter  # noqa: E402
from glasslab.data.sources import InputErrors, read_jsonl, read_source  # noqa: E402
from glasslab.data.tokenizer import EOT, load_tokenizer  # noqa: E402


def read_corpus(path: Path):
    """Texts of a benchmark JSONL file, streamed."""
    return read_jsonl(
        path, SourceConfig(domain="x", kind="jsonl", path=str(path)), InputErrors(), strict=False
    )


def _mb_per_s(nbytes: int, seconds: float) -> float:
    return nbytes / 1e6 / seconds


def _timed(fn, texts: list[str]) -> float:
    start = time.perf_counter()
    for text in texts:
        fn(text)
    return time.perf_counter() - start


def write_corpus(path: Path, texts: list[str], copies: int) -> int:
    """JSONL of ``texts`` repeated ``copies`` times (each copy tagged so no two lines are equal)."""
    nbytes = 0
    with open(path, "w", encoding="utf-8") as out:
        for copy in range(copies):
            for text in texts:
                doc = f"{text}\n# copy {copy}"
                nbytes += len(doc.encode())
                out.write(json.dumps({"text": doc}) + "\n")
    return nbytes


def high_water_mb(pid: int | str = "self") -> float:
    """Peak resident memory of one process (VmHWM; unlike ru_maxrss it does not carry over a fork+exec)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def child_pids() -> list[int]:
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            pids.append(int(stat.parent.name))
    return pids


def shard_child(tokenizer_dir: str, corpus: str, out: str, workers: int) -> None:
    """Runs in a fresh process: tokenize ``corpus`` into a shard and print peak RSS (self + workers)."""
    tokenizer = load_tokenizer(tokenizer_dir)
    eot, vocab = tokenizer.token_to_id(EOT), tokenizer.get_vocab_size()
    with ShardWriter(tokenizer.to_str(), eot, vocab, workers) as writer:
        stats = writer.write(read_corpus(Path(corpus)), Path(out))
        workers_mb = max((high_water_mb(pid) for pid in child_pids()), default=0.0)
    print(json.dumps({"tokens": stats.tokens, "rss_main_mb": high_water_mb(), "rss_worker_mb": workers_mb}))


def peak_rss(tokenizer_dir: Path, corpus: Path, out: Path, workers: int) -> dict:
    command = [sys.executable, __file__, "--child", str(tokenizer_dir), str(corpus), str(out), str(workers)]
    done = subprocess.run(command, capture_output=True, text=True, check=True, env=dict(os.environ))
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--scale", type=int, default=4, help="memory test corpus, in multiples of the demo text"
    )
    parser.add_argument("--child", nargs=4, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check that the bench runs")
    args = parser.parse_args()
    if args.child:
        shard_child(*args.child[:3], int(args.child[3]))
        return
    cfg = BuildConfig(num_workers=args.workers)
    loader_steps = 200
    if args.smoke:
        small = tuple(dataclasses.replace(s, max_documents=100, max_bytes=150_000) for s in cfg.sources)
        cfg = dataclasses.replace(cfg, sources=small, tokenizer=TokenizerConfig(vocab_size=512, sample_bytes=200_000))
        args.scale, loader_steps = 2, 20

    tmp = Path(tempfile.mkdtemp(prefix="data_bench_"))
    print(f"workers={args.workers} cpus={os.cpu_count()} python={sys.version.split()[0]}")

    # 1. The demo build, end to end.
    start = time.perf_counter()
    demo = build_dataset(cfg, tmp / "demo", progress=False)
    demo_s = time.perf_counter() - start
    timings = json.loads((demo / "build.json").read_text())["timings"]
    print("demo build stages (s): " + ", ".join(f"{k}={v:.2f}" for k, v in timings.items()))

    # 2. Stage throughput on the demo's raw text.
    texts = []
    for source in cfg.sources:
        texts += list(read_source(source, InputErrors()))
    raw_bytes = sum(len(t.encode()) for t in texts)
    corpus_1x = tmp / "corpus_1x.jsonl"
    corpus_bytes = write_corpus(corpus_1x, texts, 1)
    start = time.perf_counter()
    for _ in read_source(SourceConfig(domain="x", kind="jsonl", path=str(corpus_1x)), InputErrors()):
        pass
    stages = {"read_jsonl": _mb_per_s(corpus_bytes, time.perf_counter() - start)}
    stages["normalize"] = _mb_per_s(raw_bytes, _timed(normalize, texts))
    normal = [normalize(t) for t in texts]
    stages["filters"] = _mb_per_s(raw_bytes, _timed(lambda t: first_failed_filter(t, cfg.filters), normal))
    stages["exact_dedup"] = _mb_per_s(raw_bytes, _timed(ExactDedup().is_new, normal))
    stages["near_dedup"] = _mb_per_s(raw_bytes, _timed(NearDedup(DedupConfig()).is_new, normal))
    decontaminator = Decontaminator(13)
    for text in normal[::20]:
        decontaminator.add_eval(text)
    stages["decontaminate"] = _mb_per_s(raw_bytes, _timed(decontaminator.is_clean, normal))

    # 3. Tokenize-to-shards vs raw encode_batch on the same text (demo corpus x2 for steadier timing).
    corpus_2x = tmp / "corpus_2x.jsonl"
    nbytes = write_corpus(corpus_2x, texts, 2)
    same_texts = list(read_corpus(corpus_2x))
    tokenizer = load_tokenizer(demo)
    tokenizer.encode_batch(same_texts[:50])  # warm the thread pool
    start = time.perf_counter()
    raw_tokens = sum(len(e.ids) for e in tokenizer.encode_batch(same_texts))
    raw_s = time.perf_counter() - start
    start = time.perf_counter()
    tokenizer.encode_batch_fast(same_texts)
    raw_fast_s = time.perf_counter() - start
    del same_texts
    start = time.perf_counter()
    eot, vocab = tokenizer.token_to_id(EOT), tokenizer.get_vocab_size()
    with ShardWriter(tokenizer.to_str(), eot, vocab, args.workers) as writer:
        stats = writer.write(read_corpus(corpus_2x), tmp / "shard_2x.bin")
    shard_s = time.perf_counter() - start
    assert stats.tokens == raw_tokens + stats.documents, (
        "shards must hold exactly the encode_batch tokens + EOTs"
    )

    # 4. Loader tokens/s (imported here: torch would inflate the RSS of the --child processes).
    from glasslab.data import Loader

    loader = Loader(
        DataConfig(path=str(demo), mixture=MixtureConfig(weights={"code": 2, "prose": 1, "reference": 1})),
        seq_len=512,
        global_batch=32,
    )
    loader.next_batch()
    start = time.perf_counter()
    steps = loader_steps
    for _ in range(steps):
        loader.next_batch()
    loader_tps = steps * 32 * 513 / (time.perf_counter() - start)

    # 5. Peak RSS tokenizing 1x and scale-x corpora in fresh processes.
    corpus_big = tmp / "corpus_big.jsonl"
    big_bytes = write_corpus(corpus_big, texts, args.scale)
    small = peak_rss(demo, corpus_1x, tmp / "rss_1x.bin", args.workers)
    big = peak_rss(demo, corpus_big, tmp / "rss_big.bin", args.workers)

    print(f"demo_build_seconds: {demo_s:.1f}  (target well under 60 s on 2 cores)")
    for name, value in stages.items():
        print(f"stage_{name}_mb_per_s: {value:.2f}")
    print(f"encode_batch_raw_mb_per_s: {_mb_per_s(nbytes, raw_s):.2f}")
    print(f"tokenize_to_shards_mb_per_s: {_mb_per_s(nbytes, shard_s):.2f}")
    print(f"tokenize_to_shards_vs_encode_batch_ratio: {raw_s / shard_s:.2f}  (target >= 0.8)")
    print(f"tokenize_to_shards_vs_encode_batch_fast_ratio: {raw_fast_s / shard_s:.2f}  (no offsets)")
    print(f"loader_tokens_per_s: {loader_tps:,.0f}")
    print(f"peak_rss_main_mb_1x ({corpus_bytes / 1e6:.1f} MB text): {small['rss_main_mb']:.0f}")
    print(
        f"peak_rss_main_mb_{args.scale}x ({big_bytes / 1e6:.1f} MB text): {big['rss_main_mb']:.0f}"
        f"  (target: about the 1x figure)"
    )
    print(f"peak_rss_worker_mb_1x: {small['rss_worker_mb']:.0f}")
    print(f"peak_rss_worker_mb_{args.scale}x: {big['rss_worker_mb']:.0f}")
    print(f"peak_rss_growth_ratio: {big['rss_main_mb'] / small['rss_main_mb']:.2f}  (target <= 1.2)")
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
