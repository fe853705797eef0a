"""SFT throughput: assistant tokens per second, conversations packed (document-masked) vs padded one per row.

Both drive the demo hero's model (the 4-layer MoE the demo fine-tunes) through the AssistantOnly
objective (forward, loss on assistant tokens, backward, AdamW step) on the built-in instruction set,
tokenized with a byte-level BPE trained here on that set. One step of each in turn, so machine noise
hits both alike; the ratio is (assistant tokens / median packed step) / (assistant tokens / median
padded step), each over the same number of rows. A third arm runs the packed rows with plain causal
attention (wrong — conversations see each other — but the cost floor) to measure what the document
mask costs.

    python bench/sft_bench.py [--smoke] [--steps 12] [--seq-len 256] [--rows 16] [--threads 0]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import time

import torch

from glasslab.data.chat import ChatEncoder
from glasslab.data.tokenizer import PAD, train_tokenizer
from glasslab.experiments.demo import VOCAB_SIZE, plan
from glasslab.model import Transformer
from glasslab.posttrain.conversations import problem_with
from glasslab.posttrain.instructions import instruction_conversations
from glasslab.posttrain.packing import ConversationLoader, SFTBatch
from glasslab.train.objectives import AssistantOnly


def timed_step(model, optimizer, batch: SFTBatch) -> float:
    """Seconds for one SFT optimiser step on ``batch``."""
    started = time.perf_counter()
    nats = AssistantOnly().nats(model, batch, contextlib.nullcontext)
    (nats / batch.loss_tokens + model.aux_loss()).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a few modules and steps: checks the bench runs")
    parser.add_argument("--steps", type=int, default=12, help="timed steps per arm (after a warm-up step)")
    parser.add_argument("--seq-len", type=int, default=256, help="tokens per row")
    parser.add_argument("--rows", type=int, default=16, help="rows per step")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    steps, seq_len, rows = (1, 128, 4) if args.smoke else (args.steps, args.seq_len, args.rows)

    records = list(instruction_conversations(max_modules=30 if args.smoke else 0))
    assert all(problem_with(r) is None for r in records)
    texts = [m["content"] for r in records for m in r["messages"]]
    tokenizer = train_tokenizer(texts, vocab_size=VOCAB_SIZE)
    conversations = ChatEncoder(tokenizer).encode_many([r["messages"] for r in records])
    pad = tokenizer.token_to_id(PAD)
    loaders = {mode: ConversationLoader(conversations, seq_len, rows, pad, mode, seed=0)
               for mode in ("packed", "padded")}
    kept = loaders["packed"].conversations
    print(f"{len(records)} conversations ({loaders['packed'].too_long} longer than a row left out), mean "
          f"{statistics.mean(len(c.ids) for c in kept):.0f} tokens of which "
          f"{statistics.mean(c.num_assistant_tokens for c in kept):.0f} the assistant's; rows of {seq_len} x {rows}")

    torch.manual_seed(0)
    model = Transformer(plan().hero.model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times: dict[str, list[float]] = {"packed": [], "padded": [], "packed_causal": []}
    tokens: dict[str, list[int]] = {name: [] for name in times}
    fill: dict[str, list[float]] = {name: [] for name in times}
    for step in range(steps + 1):
        batches = {mode: loader.next_batch() for mode, loader in loaders.items()}
        batches["packed_causal"] = dataclasses.replace(batches["packed"], doc_ids_BT=None)
        for name, batch in batches.items():
            seconds = timed_step(model, optimizer, batch)
            if step >= 1:  # warm-up: allocator, first-touch of optimiser state
                times[name].append(seconds)
                tokens[name].append(batch.loss_tokens)
                fill[name].append(float((batch.tokens_BT != pad).float().mean()))
    rate = {name: statistics.mean(tokens[name]) / statistics.median(times[name]) for name in times}
    for name in times:
        print(f"{name:>14}: {rate[name]:9.0f} assistant tokens/s, {statistics.mean(tokens[name]):6.0f} per step, rows "
              f"{100 * statistics.mean(fill[name]):3.0f}% filled, median step {statistics.median(times[name]):.3f} s")
    mask_cost = statistics.median(times["packed"]) / statistics.median(times["packed_causal"])
    print(f"sft_packed_vs_padded_tokens_per_s_ratio: {rate['packed'] / rate['padded']:.2f}  (target >= 1.5)")
    print(f"sft_document_mask_step_time_ratio: {mask_cost:.2f}  (packed with the mask / without; target <= 1.1)")


if __name__ == "__main__":
    main()
