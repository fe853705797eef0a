"""Tracing text to the training data: the suffix-array index's build speed and size, and a trace's latency.

    python bench/trace_bench.py            # code and prose of the standard library and torch: 2 MB, 20 MB
    python bench/trace_bench.py --smoke    # the tests' tiny dataset (CI)

Each size builds a dataset (built-in corpora, a 4096-token BPE; not timed), then the index step of
``glasslab trace`` over its training tokens (``data/token_index.py``), then traces 100-token texts: half
copied from training documents behind a few words of their own, half taken from the held-out split (text
of the same kind the model never saw, like a model's output). The index is read memory-mapped, as the
command reads it; the trace runs on one thread.

Headlines, for the largest size: ``trace_index_build_tokens_per_s_per_core`` (training tokens indexed
per CPU second of the build, both splits built, every thread counted; target >= 1M),
``trace_index_bytes_per_token`` (the index's files beside the tokens' own copy, per token of both splits;
target <= 6), ``trace_100_token_ms`` (the median trace of a 100-token text; target <= 50 ms; the slowest
is printed beside it).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from interleave import LoadWatch

from glasslab.config import from_dict
from glasslab.data.build import build_dataset
from glasslab.data.config import BuildConfig
from glasslab.data.shards import open_shard, read_manifest
from glasslab.data.token_index import TokenIndex, build_index
from glasslab.data.tokenizer import load_tokenizer, shard_encoder

SIZES = {"1x": 2_000_000, "10x": 20_000_000}
"""Source bytes per size (a quarter from each corpus, before filtering)."""


def build_config(max_bytes: int) -> BuildConfig:
    """Code and prose of the standard library and of torch, ``max_bytes`` of sources in all."""
    code_filters = ["mean_word_length", "symbol_ratio", "alpha_ratio", "top_ngram", "duplicate_ngrams"]
    sources = [{"domain": domain, "kind": "builtin", "path": f"{corpus}_{domain}", "max_bytes": max_bytes // 4,
                **({"skip_filters": code_filters} if domain == "code" else {})}
               for corpus in ("stdlib", "torch") for domain in ("code", "prose")]
    return from_dict(BuildConfig, {"sources": sources, "tokenizer": {"vocab_size": 4096, "sample_bytes": 1_000_000},
                                   "num_workers": 1, "samples_per_domain": 0})


def texts(dataset: Path, count: int, seed: int = 0) -> list[list[int]]:
    """``count`` 100-token texts: half training windows behind three words, half held-out windows."""
    rng = np.random.default_rng(seed)
    manifest = read_manifest(dataset)
    encode = shard_encoder(load_tokenizer(dataset)).encode
    prefix = encode("It wrote this:", add_special_tokens=False).ids
    out = []
    for i in range(count):
        split = "train" if i % 2 == 0 else "eval"
        domain = sorted(manifest["domains"])[i // 2 % len(manifest["domains"])]
        tokens = open_shard(dataset, domain, split, manifest).tokens
        if len(tokens) < 200:
            tokens = open_shard(dataset, domain, "train", manifest).tokens
        start = int(rng.integers(0, len(tokens) - 100))
        window = [int(t) for t in tokens[start:start + 100]]
        eot = manifest.get("eot_id")
        window = [t for t in window if t != eot]
        out.append((prefix + window)[:100] if split == "train" else window[:100])
    return out


def measure(name: str, config: BuildConfig, root: Path, traces: int) -> dict:
    dataset = build_dataset(config, root / f"data-{name}", progress=False)
    folder = root / f"index-{name}"
    folder.mkdir()
    cpu, wall = time.process_time(), time.perf_counter()
    info = build_index(dataset, folder)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    index = TokenIndex(folder)
    queries = texts(dataset, traces)
    index.trace(queries[0])  # the first touch of the mapped files is not a trace
    seconds, spans = [], 0
    for ids in queries:
        started = time.perf_counter()
        found, _ = index.trace(ids)
        seconds.append(time.perf_counter() - started)
        spans += len(found)
    return {"name": name, "tokens": info["tokens"], "documents": info["documents"], "build_wall_s": wall,
            "build_cpu_s": cpu, "tokens_per_cpu_s": info["tokens"] / max(cpu, 1e-9),
            "bytes_per_token": info["index_bytes"] / max(info["tokens"] + info["heldout_tokens"], 1),
            "trace_ms_median": 1000 * statistics.median(seconds), "trace_ms_max": 1000 * max(seconds),
            "spans_per_text": spans / len(queries)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="the tests' tiny dataset only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trace-bench-") as tmp:
        root = Path(tmp)
        if args.smoke:
            sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
            from train_data import tiny_build_config

            rows = [measure("tiny", tiny_build_config(), root, 10)]
        else:
            rows = [measure(name, build_config(size), root, 40) for name, size in SIZES.items()]
    print(f"{'size':<6} {'tokens':>11} {'docs':>7} {'build s':>8} {'cpu s':>7} {'Mtok/cpu-s':>11} "
          f"{'B/token':>8} {'trace ms':>9} {'max ms':>7} {'spans':>6}")
    for r in rows:
        print(f"{r['name']:<6} {r['tokens']:>11,} {r['documents']:>7,} {r['build_wall_s']:>8.2f} "
              f"{r['build_cpu_s']:>7.2f} "
              f"{r['tokens_per_cpu_s'] / 1e6:>11.2f} {r['bytes_per_token']:>8.2f} {r['trace_ms_median']:>9.2f} "
              f"{r['trace_ms_max']:>7.2f} {r['spans_per_text']:>6.1f}")
    last = rows[-1]
    print(f"\ntrace_index_build_tokens_per_s_per_core: {last['tokens_per_cpu_s']:.0f}  (target >= 1000000; "
          f"{last['tokens']:,} tokens)")
    print(f"trace_index_bytes_per_token: {last['bytes_per_token']:.2f}  (target <= 6, beside the tokens' own copy)")
    print(f"trace_100_token_ms: {last['trace_ms_median']:.2f}  (target <= 50; slowest {last['trace_ms_max']:.2f} ms)")


if __name__ == "__main__":
    with LoadWatch():
        main()
