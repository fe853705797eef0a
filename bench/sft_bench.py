"""Post-training in numbers: SFT throughput (packed vs padded), what SFT and DPO buy on held-out data, and the
observatory's chat panel against `glasslab chat`.

1. Throughput: the demo hero's model (the 4-layer MoE the demo fine-tunes) through the AssistantOnly objective
   (forward, loss on assistant tokens, backward, AdamW step) on the built-in instruction set, tokenized with a
   byte-level BPE trained here. One step of each arm in turn, so machine noise hits both alike: packed rows
   (document-masked), one conversation per padded row, and packed rows with plain causal attention (wrong —
   conversations see each other — but the cost floor of the mask).
2. Quality: the demo's post-training steps (conversations, SFT of the hero, export, pairs, DPO of the SFT
   model) in ``--lab`` — run, or found cached, by the executor, so a finished ``glasslab demo`` lab is read as
   it is: the held-out SFT loss of the hero before and after SFT (``sft_heldout_loss_drop_percent``) and the
   held-out preference accuracy of the SFT model before and after DPO (``dpo_heldout_pref_accuracy_gain_points``).
   ``--demo quick`` runs the quick demo's sizes; ``--smoke`` a tiny base in place of the ladder's hero.
3. Chat: the SFT model answering the same messages with the same sampling (so the same tokens) through the chat
   panel's endpoint (``glasslab serve`` in its own process, read over HTTP as the page reads it) and through
   :class:`~glasslab.posttrain.chat.ChatSession` (what ``glasslab chat`` runs), alternately. Time to first token
   is from the request to its first text; tokens/s is over the tokens after the first; each the median over
   the replies (the machine's noise is larger than the difference). Ratios are CLI over page
   for the first token's time and page over CLI for tokens/s, so 1.0 means the page costs nothing. Both sides
   run torch on one thread (an idle process's spinning threads would otherwise slow the other's).

    python bench/sft_bench.py [--smoke] [--lab LAB] [--demo full|quick] [--chat-rounds 6] [--threads 0]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from interleave import LoadWatch, headline, paired_ratios

from glasslab.data.chat import ChatEncoder
from glasslab.data.tokenizer import PAD, train_tokenizer
from glasslab.experiments.demo import (
    CONVERSATIONS_STEP,
    DPO_STEP,
    FULL,
    PAIRS_STEP,
    QUICK,
    SFT_STEP,
    VOCAB_SIZE,
    data_step,
    plan,
    posttrain_steps,
)
from glasslab.model import Transformer
from glasslab.posttrain.conversations import problem_with
from glasslab.posttrain.fitting import fit_conversations
from glasslab.posttrain.instructions import instruction_conversations
from glasslab.posttrain.outcome import outcome
from glasslab.posttrain.packing import ConversationLoader, SFTBatch
from glasslab.posttrain.samples import CHAT_PROMPTS
from glasslab.train.objectives import AssistantOnly

# --- 1. throughput ------------------------------------------------------------------------------------------


def timed_step(model, optimizer, batch: SFTBatch) -> float:
    """Seconds for one SFT optimiser step on ``batch``."""
    started = time.perf_counter()
    nats = AssistantOnly().nats(model, batch, contextlib.nullcontext)
    (nats / batch.loss_tokens + model.aux_loss()).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - started


def packing_bench(smoke: bool, steps: int, seq_len: int, rows: int) -> None:
    records = list(instruction_conversations(max_modules=30 if smoke else 0))
    assert all(problem_with(r) is None for r in records)
    texts = [m["content"] for r in records for m in r["messages"]]
    tokenizer = train_tokenizer(texts, vocab_size=VOCAB_SIZE)
    encoder = ChatEncoder(tokenizer)
    conversations, counts = fit_conversations(encoder.encode_many([r["messages"] for r in records]), encoder,
                                              seq_len + 1)
    pad = tokenizer.token_to_id(PAD)
    loaders = {mode: ConversationLoader(conversations, seq_len, rows, pad, mode, seed=0)
               for mode in ("packed", "padded")}
    print(f"{counts.line('conversations')}; mean {statistics.mean(len(c.ids) for c in conversations):.0f} tokens of "
          f"which {statistics.mean(c.num_assistant_tokens for c in conversations):.0f} the assistant's; rows of "
          f"{seq_len} x {rows}")
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
    # Each step ran the three arms side by side, so each step gives one ratio (see bench/interleave.py).
    per_step_rate = {name: [n / s for n, s in zip(tokens[name], times[name], strict=True)] for name in times}
    speedup = paired_ratios(per_step_rate["packed"], per_step_rate["padded"])
    mask_cost = paired_ratios(times["packed"], times["packed_causal"])
    print(f"sft_packed_vs_padded_tokens_per_s_ratio: {headline(speedup, 'target >= 1.5')}")
    print(f"sft_document_mask_step_time_ratio: {headline(mask_cost, 'packed with the mask / without; target <= 1.1')}")


# --- 2. quality --------------------------------------------------------------------------------------------


def posttrain_folders(lab: Path, demo: str, smoke: bool, threads: int) -> dict[str, Path]:
    """The demo's post-training steps run (or found cached) in ``lab``: their folders by step name."""
    from glasslab.experiments.demo import demo_steps
    from glasslab.lab import Executor
    from glasslab.lab.pool import InlinePool

    if smoke:
        size = dataclasses.replace(QUICK, sft_steps=6, dpo_steps=6, sft_max_modules=40, sft_task_items=20)
        steps = smoke_steps(size)
    else:
        size = FULL if demo == "full" else QUICK
        steps = demo_steps(size, threads=max(1, threads or torch.get_num_threads()), hero_threads=threads)
    backend = InlinePool() if smoke else "local"  # a smoke's steps in this process: no interpreter start per step
    report = Executor(lab, backend, jobs=1, narrate=False).run(steps, experiment="sft-bench")
    if not report.ok:
        raise SystemExit(f"sft_bench: {', '.join(report.keys('failed'))} failed; see step.json in {lab}")
    return {planned.name: planned.folder for planned in report.plan.steps}


def smoke_steps(size) -> list:
    """The demo's SFT and DPO (what this bench measures) on a tiny base trained here instead of the ladder's hero
    (smoke only); the export and the task's RL, which ``rl_bench.py`` covers, are left out."""
    from glasslab.config import from_dict
    from glasslab.data.reference import DatasetRef
    from glasslab.lab import Step
    from glasslab.train.run_config import RunConfig
    from glasslab.train.steps import TrainStepConfig, train_step

    data = data_step(size)
    run = from_dict(RunConfig, {
        "model": {"vocab_size": VOCAB_SIZE, "d_model": 32, "n_layers": 2, "n_heads": 2, "n_kv_heads": 2, "d_ff": 64},
        "data": {"mixture": {"weights": {"code": 0.75, "prose": 0.18, "reference": 0.07}}},
        "train": {"seq_len": 64, "global_batch_tokens": 64 * 8, "max_steps": 30, "checkpoint_interval": 30,
                  "sample_prompts": [], "eval_max_tokens": 256}})
    base = Step("bench-base", train_step, TrainStepConfig(run=run, data=DatasetRef.of_build(data)))
    measured = {CONVERSATIONS_STEP, SFT_STEP, PAIRS_STEP, DPO_STEP}
    return [data, base, *(step for step in posttrain_steps(size, data, base) if step.name in measured)]


def quality(folders: dict[str, Path]) -> None:
    sft, dpo = outcome(folders[SFT_STEP]), outcome(folders[DPO_STEP])
    for name, out in (("SFT", sft), ("DPO", dpo)):
        print(f"{name}: {out['key']} {out['before']:.4f} -> {out['after']:.4f}; counts "
              f"{json.dumps(out['counts'], separators=(',', ':'))}")
    print(f"sft_heldout_loss_drop_percent: {-100 * sft['relative']:.1f}  (the hero's held-out SFT loss, before -> "
          "after SFT; target >= 10)")
    gain = 100 * (dpo["after"] - dpo["before"])
    print(f"dpo_heldout_pref_accuracy_gain_points: {gain:+.1f}  (held-out pairs, the SFT model -> after DPO; "
          "target >= +20)")


# --- 3. chat -----------------------------------------------------------------------------------------------


def page_reply(client, url: str, model: str, text: str, max_new: int, seed: int) -> tuple[float, float, int, float]:
    """(seconds to the first text, seconds after it, tokens, the server's own seconds to its first text) of one
    reply through the chat endpoint."""
    started = time.perf_counter()
    first = None
    body = {"model": model, "text": text, "temperature": 0.8, "top_p": 0.9, "max_new_tokens": max_new, "seed": seed}
    with client.stream("POST", f"{url}/api/chat", json=body, timeout=600) as response:
        for line in response.iter_lines():
            msg = json.loads(line)
            if "text" in msg and first is None:
                first = time.perf_counter()
            if "done" in msg or "error" in msg:
                assert "error" not in msg, msg["error"]
                tokens, server_first = msg["tokens"], msg["first_token_s"]
    end = time.perf_counter()
    return first - started, end - first, tokens, server_first


def cli_reply(session_for, text: str, seed: int) -> tuple[float, float, int]:
    """The same through a ChatSession, as `glasslab chat` runs it."""
    session = session_for(seed)
    started = time.perf_counter()
    first = None
    for _ in session.reply(text):
        first = first or time.perf_counter()
    end = time.perf_counter()
    return first - started, end - first, session.last_reply_tokens


def serve(lab: Path):
    """``glasslab serve`` on a free loopback port, in its own process as a user runs it; (process, URL)."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # one thread, as this process chats with: no idle spinning
    server = subprocess.Popen([sys.executable, "-m", "glasslab", "serve", "--lab", str(lab), "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    for line in server.stdout:
        if "observatory for" in line:
            return server, f"http://127.0.0.1:{port}"
    raise SystemExit(f"sft_bench: glasslab serve did not start (exit {server.wait()})")


def chat_bench(lab: Path, sft: Path, rounds: int, max_new: int) -> None:
    import httpx

    from glasslab.posttrain.chat import ChatSession, Sampling, load_chat_model

    torch.set_num_threads(1)
    chat = load_chat_model(str(sft))

    def session_for(seed: int) -> ChatSession:
        return ChatSession(chat, Sampling(temperature=0.8, top_p=0.9, max_new_tokens=max_new, seed=seed))

    page: list[tuple[float, float, int, float]] = []
    cli: list[tuple[float, float, int]] = []
    server, url = serve(lab)
    try:
        with httpx.Client() as client:
            for seed in range(3):  # the first loads the model; the next warm both paths up
                page_reply(client, url, sft.name, CHAT_PROMPTS[0], 4, seed)
                cli_reply(session_for, CHAT_PROMPTS[0], seed)
            for i in range(rounds):
                text, seed = CHAT_PROMPTS[i % len(CHAT_PROMPTS)], 100 + i
                page.append(page_reply(client, url, sft.name, text, max_new, seed))
                cli.append(cli_reply(session_for, text, seed))
    finally:
        server.terminate()
        server.wait()
    assert [r[2] for r in page] == [r[2] for r in cli], "the same sampling must draw the same tokens"
    first = {name: statistics.median(r[0] for r in runs) for name, runs in (("page", page), ("cli", cli))}
    rate = {name: statistics.median((r[2] - 1) / r[1] for r in runs if r[2] > 1) for name, runs in (
        ("page", page), ("cli", cli))}
    # Each round asked both paths in turn, so each round gives one ratio (see bench/interleave.py).
    first_ratios = paired_ratios([r[0] for r in cli], [r[0] for r in page])
    rate_ratios = paired_ratios([r[1] / (r[2] - 1) for r in cli if r[2] > 1], [r[1] / (r[2] - 1) for r in page
                                                                                 if r[2] > 1])
    print(f"chat over {rounds} replies of {statistics.mean(r[2] for r in cli):.0f} tokens on average: first token "
          f"page {1000 * first['page']:.1f} ms, glasslab chat {1000 * first['cli']:.1f} ms; page "
          f"{rate['page']:.0f} tokens/s, glasslab chat {rate['cli']:.0f} tokens/s; the server's own time to its first "
          f"text {1000 * statistics.median(r[3] for r in page):.1f} ms (the rest is HTTP and waking processes)")
    print("chat_page_vs_cli_first_token_ratio: "
          f"{headline(first_ratios, 'glasslab chat time to the first token / the page; target >= 0.8')}")
    print(f"chat_page_vs_cli_tokens_per_s_ratio: {headline(rate_ratios, 'target >= 0.8')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and a tiny base: checks the bench runs")
    parser.add_argument("--lab", default=None, help="lab of the demo's post-training steps (default: a temp folder)")
    parser.add_argument("--demo", choices=("full", "quick"), default="full", help="the demo's size (default full)")
    parser.add_argument("--steps", type=int, default=12, help="timed throughput steps per arm (after a warm-up)")
    parser.add_argument("--seq-len", type=int, default=256, help="tokens per row (throughput)")
    parser.add_argument("--rows", type=int, default=16, help="rows per step (throughput)")
    parser.add_argument("--chat-rounds", type=int, default=12, help="replies timed on each path (medians)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    with contextlib.ExitStack() as stack:
        stack.enter_context(LoadWatch())
        if args.smoke:
            packing_bench(True, 1, 128, 4)
        else:
            packing_bench(False, args.steps, args.seq_len, args.rows)
        lab = Path(args.lab) if args.lab else Path(stack.enter_context(tempfile.TemporaryDirectory())) / "lab"
        folders = posttrain_folders(lab, args.demo, args.smoke, args.threads)
        quality(folders)
        chat_bench(lab, folders[SFT_STEP], 2 if args.smoke else args.chat_rounds, 16 if args.smoke else 96)


if __name__ == "__main__":
    main()
