"""The trainer's overhead over a bare forward/backward/step of the same model, in percent (target <= 2%).

"Bare" is the least a training step must do: forward, cross-entropy, backward, clip, AdamW step,
balancer step. "Trainer" is ``Trainer.step_with_callbacks`` with everything it adds: micro-batch loss
scaling, per-group gradient and parameter norms, the spike guard, the LR schedule, mixture weights, the
hash of the step's tokens, logging every metric to a real run store and a JSONL sink (``train.sinks``),
and its callbacks (throughput/MFU/memory, the command line's progress bar). Both drive the same model and
optimiser on the same in-memory batches in this process, one step of each in turn so machine noise hits both
alike; the overhead is median trainer step / median bare step - 1. The hash of each step's tokens
(``data/batches.py``) is timed alone in the same loop, on the same batches: ``batch_hash_percent`` is
its median as a share of the median bare step, the part of the overhead it adds.

It also measures what the LM head's chunked loss (``model/head_loss.py``) saves: the peak resident
memory of one forward and backward of the head and its cross-entropy over 4,096 tokens at a 32,768
vocabulary, in token chunks as the trainer computes it, over the same through full logits. Each runs
in a fresh process, warmed up by the same pass, its resident set sampled every 0.5 ms, with glibc
mapping blocks from 64 KiB up one by one so that the resident set follows what is live.

    python bench/train_bench.py [--steps 60] [--d-model 128] [--seq-len 128] [--batch 8] [--threads 1] [--smoke]

``--smoke`` (a tiny model, 3 steps of each; the loss over 512 tokens at a 4,096 vocabulary) only
checks that the bench still runs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch
from interleave import LoadWatch, headline, paired_ratios

from glasslab import track
from glasslab.cli.progress import TrainingProgress
from glasslab.data.batches import batch_hash
from glasslab.model import ModelConfig, MoEConfig, Transformer
from glasslab.model.head_loss import chunk_tokens, head_cross_entropy
from glasslab.train.config import TrainConfig
from glasslab.train.distributed import DistContext
from glasslab.train.loop import RunParts, Trainer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from train_fakes import SyntheticLoader  # noqa: E402


class RandomTokens(SyntheticLoader):
    """The tests' stand-in for the Loader contract (so this bench follows it), serving a fixed ring of
    random batches: the loader is not what is being measured."""

    def __init__(self, vocab: int, batch: int, seq_len: int) -> None:
        super().__init__(seq_len, batch)
        self.batches = torch.randint(0, vocab, (8, batch, seq_len + 1), generator=torch.Generator().manual_seed(0))

    def next_batch(self) -> torch.Tensor:
        self.position += 1
        return self.batches[self.position % len(self.batches)]


def bare_step(model, optimizer, batch, grad_clip: float) -> None:
    loss = model(batch[:, :-1], targets_BT=batch[:, 1:]) / batch[:, 1:].numel() + model.aux_loss()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    optimizer.zero_grad()
    model.balancer.step()


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def head_loss_peak_child(tokens: int, width: int, vocab: int, chunk: int) -> None:
    """In this (fresh) process: print how far the resident set rises above its level before one forward
    and backward of the head's loss over ``tokens`` tokens in chunks of ``chunk``, after one warm-up pass."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    h = torch.randn(tokens, width, requires_grad=True)
    w = (torch.randn(vocab, width) * 0.02).requires_grad_()
    targets = torch.randint(0, vocab, (tokens,))
    head_cross_entropy(h, w, targets, chunk=chunk)[0].backward()  # allocator arenas and BLAS buffers stay
    h.grad = w.grad = None
    before, peak, done = resident_bytes(), [0], threading.Event()

    def sample() -> None:
        while not done.wait(0.0005):
            peak[0] = max(peak[0], resident_bytes())

    sampler = threading.Thread(target=sample)
    sampler.start()
    head_cross_entropy(h, w, targets, chunk=chunk)[0].backward()
    done.set()
    sampler.join()
    print(peak[0] - before)


def head_loss_peak(tokens: int, width: int, vocab: int, chunk: int) -> int:
    """:func:`head_loss_peak_child` in a fresh process: bytes."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, __file__, "--head-loss-peak", *map(str, (tokens, width, vocab, chunk))],
                          env=env, capture_output=True, text=True, check=True, timeout=600)
    return int(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="steps of each kind")
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: least noise)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check that the bench runs")
    parser.add_argument("--head-loss-peak", nargs=4, type=int, metavar=("TOKENS", "WIDTH", "VOCAB", "CHUNK"),
                        help=argparse.SUPPRESS)  # the measuring child of head_loss_peak
    args = parser.parse_args()
    if args.head_loss_peak:
        head_loss_peak_child(*args.head_loss_peak)
        return
    if args.smoke:
        args.steps, args.d_model, args.seq_len, args.batch = 3, 32, 16, 2
    with LoadWatch():
        run_bench(args)


def run_bench(args: argparse.Namespace) -> None:
    """The trainer's overhead over bare steps, then the head loss's peak memory; prints the headlines."""
    torch.set_num_threads(args.threads)
    model_cfg = ModelConfig(vocab_size=2048, d_model=args.d_model, n_layers=4, n_heads=4, n_kv_heads=4,
                            d_ff=4 * args.d_model, moe=MoEConfig(num_experts=8, top_k=2, d_expert=args.d_model))
    cfg = TrainConfig(seq_len=args.seq_len, global_batch_tokens=args.seq_len * args.batch, max_steps=10**6,
                      checkpoint_interval=10**6, compile=False)  # eager on both sides: the same kernels
    torch.manual_seed(0)
    loader = RandomTokens(model_cfg.vocab_size, args.batch, args.seq_len)
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        trainer_model = Transformer(model_cfg)
        parts = RunParts(model=trainer_model, balancer=trainer_model.balancer, loader=loader,
                         flops_per_token=model_cfg.flops_per_token(args.seq_len))
        run = track.init(Path(tmp) / "run", {"bench": True}, sinks=("jsonl",))
        progress = TrainingProgress()  # what `glasslab train` shows, updated every step
        trainer = Trainer(cfg, parts, run, Path(tmp) / "run", DistContext(), {}, peak_flops=1e11, callbacks=[progress])
        # The bare step drives the trainer's own model and optimiser: same weights, same routing.
        bare_model, bare_optimizer = trainer.model, trainer.optimizer
        progress.on_start(trainer)
        stack.callback(progress.on_end, trainer, "finished")
        for _ in range(2):  # warm up both
            trainer.step_with_callbacks()
            bare_step(bare_model, bare_optimizer, loader.next_batch(), cfg.grad_clip)
        bare_times, trainer_times, hash_times = [], [], []
        for _ in range(args.steps):
            start = time.perf_counter()
            bare_step(bare_model, bare_optimizer, loader.next_batch(), cfg.grad_clip)
            bare_times.append(time.perf_counter() - start)
            start = time.perf_counter()
            trainer.step_with_callbacks()  # includes the store's periodic commit when it falls due
            trainer_times.append(time.perf_counter() - start)
            start = time.perf_counter()
            batch_hash(loader.next_batch())  # what the trainer step above spent on its batch's hash
            hash_times.append(time.perf_counter() - start)
        run.finish()
    bare, full = statistics.median(bare_times), statistics.median(trainer_times)
    print(f"model {model_cfg.size_name()}, batch {args.batch}x{args.seq_len} tokens, {args.steps} steps each, "
          f"alternating, threads {torch.get_num_threads()}")
    print(f"median bare step: {bare * 1e3:.1f} ms; median trainer step: {full * 1e3:.1f} ms")
    # Each step ran both sides in turn, so each step gives one figure (bench/interleave.py).
    overheads = [100 * (ratio - 1) for ratio in paired_ratios(trainer_times, bare_times)]
    print(f"train_overhead_percent: {headline(overheads, 'target <= 2')}", flush=True)
    print(f"batch_hash_percent: {100 * statistics.median(hash_times) / bare:.3f}  (of a bare step; the part of "
          "the overhead that the hash of each step's tokens adds)", flush=True)
    tokens, vocab = (512, 4096) if args.smoke else (4096, 32768)
    chunk = min(chunk_tokens(vocab), tokens // 4)  # the trainer's chunk (1,024 tokens at 32k); 4+ chunks
    full_peak = head_loss_peak(tokens, 256, vocab, chunk=tokens)
    chunked_peak = head_loss_peak(tokens, 256, vocab, chunk=chunk)
    print(f"head loss over {tokens} tokens at vocabulary {vocab}: peak resident growth {full_peak / 2**20:.0f} MiB "
          f"through full logits, {chunked_peak / 2**20:.0f} MiB in chunks of {chunk} tokens")
    print(f"peak_rss_chunked_ce_vs_full: {chunked_peak / full_peak:.2f}  (target <= 0.5 at a 32k vocabulary)")


if __name__ == "__main__":
    main()
