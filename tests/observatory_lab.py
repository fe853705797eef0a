"""A small lab written with the real tracker plus hand-written step/report/fit files (contracts.md).

Shared by the observatory tests and the bench; nothing here is a test.
"""

from __future__ import annotations

import json
import math
import shutil
import socket
from pathlib import Path

from glasslab import track
from glasslab.lab import registry
from glasslab.track.run_record import build_record, write_record

XSS = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 1">'
SECRET = "sk-do-not-leak-1234"
FLOPS_PER_TOKEN = 6.0e6
TOKENS_PER_STEP = 4096


def loss_at(step: int, scale: float = 1.0) -> float:
    return 2.0 + 3.0 * scale / math.sqrt(1.0 + step)


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))


def run_config(name: str) -> dict:
    return {"model": {"d_model": 64, "n_layers": 2}, "train": {"lr": 3e-3, "steps": 40},
            "data": {"path": "lab/data-abc12345"}, "sinks": {"wandb": {"api_key": SECRET}}, "name": name}


def log_run(run_dir: Path, steps: int, scale: float = 1.0, extra: dict | None = None, finish: bool = True):
    """A run with the metric names of DESIGN.md; returns the open Run when ``finish`` is False."""
    record = {"size_name": "3.2M-A0.9M", "flops_per_token": FLOPS_PER_TOKEN, "data_manifest_hash": "abc123",
              **(extra or {})}
    # run.json by hand first: track.init redacts every extra key matching "token", which would
    # hide flops_per_token (reported to the foundation); init keeps an existing run.json.
    write_record(run_dir, build_record(run_config(run_dir.name), None) | record)
    run = track.init(run_dir, run_config(run_dir.name), record_extra=record)
    for step in range(steps):
        log_step(run, step, scale)
    run.annotate("spike_skipped", "loss spike skipped", "loss 9.1 > mean + 6σ", step=steps // 2,
                 severity="warning")
    run.sample(step=steps - 1, prompt="Once upon", text=XSS)
    run.flush()
    if finish:
        run.finish()
    return run


def log_step(run, step: int, scale: float = 1.0) -> None:
    metrics = {
        "train/loss": loss_at(step, scale), "train/tokens": float((step + 1) * TOKENS_PER_STEP),
        "optim/learning_rate": 3e-3 * min(1.0, (step + 1) / 10), "grad/norm/total": 1.0 / (1 + step),
        "params/norm/attn": 10 + step * 0.01, "params/norm/mlp": 12 + step * 0.01,
        "moe/layer_0/router_bias_norm": 0.01 * step, "throughput/tokens_per_second": 5e4,
        "throughput/mfu": 0.31, "mixture/weight/web": 0.7, "mixture/weight/code": 0.3,
        # tiny values on a log axis (a default formatter labels them 0) and a large byte count
        "grad/norm/router": 1e-3 / (1 + step) ** 2, "memory/peak_bytes": 1.2e9 + 1e6 * step,
        "mixture/epochs/web": 0.3 * (step + 1), "mixture/epochs/code": 0.1 * (step + 1),
    }
    if step % 5 == 4:
        metrics.update({"eval/macro/loss": loss_at(step, scale) + 0.1, "eval/web/loss": loss_at(step, scale),
                        "eval/code/loss": loss_at(step, scale) + 0.2,
                        "eval/task/copy/acc": min(0.9, 0.25 + 0.02 * step), "eval/task/macro/acc": 0.25 + 0.01 * step})
    run.log(metrics, step)
    run.log_vector("moe/layer_0/expert_load", [0.25 + 0.01 * ((step + e) % 3) for e in range(4)], step)
    run.log_vector("moe/layer_0/router_bias", [0.001 * step * (e - 1.5) for e in range(4)], step)


def prediction(final_flops: float) -> dict:
    curve = []
    for i in range(1, 21):
        fraction = i / 20
        point = 2.0 + 3.0 / math.sqrt(1.0 + 40 * fraction) + 0.1
        curve.append({"fraction": fraction, "flops": final_flops * fraction, "point": point,
                      "lo": point - 0.15, "hi": point + 0.15})
    return {"flops": final_flops, "point": curve[-1]["point"], "lo": curve[-1]["lo"], "hi": curve[-1]["hi"],
            "level": 0.9, "curve": curve}


def build_lab(root: Path, hero_steps: int = 20) -> Path:
    """Two rungs, a ladder fit, a hero run with a pre-registered prediction, a data report, events."""
    root.mkdir(parents=True, exist_ok=True)
    data_dir = root / "data-abc12345"
    write_json(data_dir / "step.json",
               {"name": "data", "hash": "abc12345", "status": "succeeded", "attempts": 1})
    write_json(data_dir / "report.json", {
        "manifest_hash": "abc123", "python_version": "3.11",
        "sources": [{"name": "tiny-web", "domain": "web", "kind": "builtin", "path": "-",
                     "provenance": "built in", "licence": "CC0"}],
        "funnel": [{"stage": "raw", "documents": 1000, "bytes": 100000},
                   {"stage": "filter:short", "documents": 900, "bytes": 95000},
                   {"stage": "exact_dedup", "documents": 850, "bytes": 90000},
                   {"stage": "tokens", "documents": 850, "bytes": 90000, "tokens": 30000}],
        "filters": {"short": 100},
        "funnel_by_domain": {
            domain: [{"stage": "raw", "documents": raw, "bytes": 100 * raw},
                     {"stage": "filter:short", "documents": kept + dup, "bytes": 100 * (kept + dup)},
                     {"stage": "exact_dedup", "documents": kept, "bytes": 100 * kept},
                     {"stage": "tokens", "documents": kept, "bytes": 100 * kept, "tokens": tokens}]
            for domain, raw, dup, kept, tokens in (("web", 700, 50, 600, 20700), ("code", 300, 0, 250, 10300))},
        "domains": {"web": {"documents": 600, "tokens": 20000, "bytes": 60000, "bytes_per_token": 3.0,
                            "eval_documents": 20, "eval_tokens": 700,
                            "length_histogram": {"edges": [0, 100, 200], "counts": [400, 200]},
                            "samples": ["a web page", XSS]},
                    "code": {"documents": 250, "tokens": 10000, "bytes": 30000, "bytes_per_token": 3.0,
                             "eval_documents": 10, "eval_tokens": 10300,
                             "length_histogram": {"edges": [0, 100], "counts": [250]},
                             "samples": ["def f(): pass"]}},
        "mixture": {"token_budget": 163840, "phases": [{"start_step": 0, "weights": {"web": 0.7, "code": 0.3},
                                                        "tokens": {"web": 114688, "code": 49152},
                                                        "epochs": {"web": 5.7, "code": 4.9}}]},
        "errors": {"malformed_lines": [], "invalid_utf8": 0},
    })
    rungs = []
    for name, steps, scale in (("rung-s-aaaa1111", 30, 1.3), ("rung-m-bbbb2222", 40, 1.15)):
        log_run(root / name, steps, scale, {"role": "rung", "ladder": "demo"})
        write_json(root / name / "step.json",
                   {"name": name.rsplit("-", 1)[0], "status": "succeeded", "attempts": 1})
        tokens = steps * TOKENS_PER_STEP
        loss = loss_at(steps - 1, scale) + 0.1
        # The small rung has a second seed whose run lives elsewhere (its loss, no folder here).
        losses = [loss, loss + 0.04] if steps == 30 else [loss]
        mean = sum(losses) / len(losses)
        std = math.sqrt(sum((x - mean) ** 2 for x in losses) / max(1, len(losses) - 1))
        rungs.append({"name": name.rsplit("-", 1)[0], "run_ids": [name], "size_name": "3.2M-A0.9M",
                      "params_active": 9e5, "tokens": tokens, "flops": tokens * FLOPS_PER_TOKEN, "losses": losses,
                      "loss_mean": mean, "loss_std": std})
    final_flops = 40 * TOKENS_PER_STEP * FLOPS_PER_TOKEN
    pred = prediction(final_flops)
    write_json(root / "ladder-cccc3333" / "fit.json", {
        "ladder": "demo", "target": "eval/macro/loss", "L_inf": {"mode": "free", "value": 1.9, "sweep": []},
        "rungs": rungs, "law": {"form": "L = E + A C^-a", "params": {"E": 1.9, "A": 30, "a": 0.1},
                                "param_se": {"E": 0.1}},
        "prediction": {k: pred[k] for k in ("flops", "point", "lo", "hi", "level")}, "curve": pred["curve"],
        "backtest": {"held_out": "rung-m", "error": 0.02}, "hero_run": "hero-dddd4444",
        "gate": {"registered": False, "reasons": ["span of N: largest N / smallest N = 4 (expected ≥ 10 for a free "
                                                  "floor)"], "flags": [], "checks": []},
    })
    log_run(root / "hero-dddd4444", hero_steps, 1.0,
            {"role": "hero", "ladder": "demo", "steps": hero_steps - 1, "tokens": 40 * TOKENS_PER_STEP,
             "dataset": "data-abc12345",
             "tasks": {"copy": {"chance": 0.25}},
             "prediction": {**pred, "target": "eval/macro/loss", "registered_at": "2026-11-30T00:00:00Z",
                            "code": {"commit": "abc"}, "forced": True}})
    write_json(root / "hero-dddd4444" / "step.json", {"name": "hero", "status": "succeeded", "attempts": 1,
                                                      "function": "glasslab.ladder.steps:hero_step",
                                                      "dependencies": {"data": "data-abc12345"}})
    # The hero's kept checkpoints, as the trainer lists them (checkpoints.json).
    write_json(root / "hero-dddd4444" / "checkpoints.json", {"checkpoints": [
        {"step": s, "tokens": s * TOKENS_PER_STEP, "weights_sha256": f"{s:02d}" * 32, "extra": s in (1, 2, 4),
         "files": {"model.pt": "ab" * 32}} for s in (0, 1, 2, 4, 19)]})
    # A fork of the middle rung, and an export of the hero (the formats of issue 15).
    log_run(root / "fork-eeee5555", 10, 1.1,
            {"parent": {"run": "rung-m-bbbb2222", "run_dir": "/elsewhere/rung-m-bbbb2222", "step": 20}})
    write_json(root / "export-ffff6666" / "step.json",
               {"name": "export", "status": "succeeded", "attempts": 1, "config": {"run": "hero-dddd4444", "step": 19}})
    write_json(root / "export-ffff6666" / "export.json", {"run": "hero-dddd4444", "step": 19, "max_logit_diff": 3e-6})
    # `glasslab eval` of that export (issue 17): the hero's page lists its task results.
    write_json(root / "eval-export-ffff6666-9999aaaa" / "step.json",
               {"name": "eval-export-ffff6666", "status": "succeeded", "attempts": 1, "config": {}})
    write_json(root / "eval-export-ffff6666-9999aaaa" / "result.json",
               {"kind": "task_eval", "model": {"kind": "export", "run": "hero-dddd4444", "step": 19},
                "macro_acc": 0.415, "tasks": {"next_word_code": {"items": 600, "chance": 0.25, "acc": 0.415,
                                                                  "acc_norm": 0.395, "bpb": 1.9394}}})
    for point in (pred["point"] + 0.05, pred["point"]):  # registered, then replaced: both stay in the registry
        registry.register(root, "demo/hero/eval/macro/loss", metric="eval/macro/loss", point=point,
                          low=pred["lo"], high=pred["hi"] + 0.05, target="hero", source="ladder-cccc3333",
                          details={"curve": pred["curve"]}, replace=True)
    track.log_lab_event(root, "step_succeeded", "data-abc12345", "data built", XSS)
    track.log_lab_event(root, "step_retried", "rung-s-aaaa1111", "retried after a lost worker",
                        severity="warning")
    return root


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_lab(lab_root: Path, port: int | None = None):
    """The observatory served in a thread of this process, on a free port (a context manager)."""
    from glasslab.observatory.app import BackgroundServer

    return BackgroundServer(lab_root, port=port or free_port())


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


# --- a run at a real run's width ----------------------------------------------------------------

WIDE_GROUPS = ("embed", "attn", "mlp", "experts", "router", "norm", "lm_head")


def wide_keys(metrics: int, layers: int, domains: int, tasks: int) -> tuple[list[str], list[str]]:
    """(metrics logged every step, metrics logged at evals), ``metrics`` in all: the names of DESIGN.md
    for a model of ``layers`` MoE layers, then ``debug/metric_<n>`` filler under one prefix."""
    train = ["train/loss", "train/tokens", "optim/learning_rate", "grad/norm/total", "params/norm/total",
             "throughput/tokens_per_second", "throughput/mfu", "memory/peak_bytes",
             *(f"grad/norm/{g}" for g in WIDE_GROUPS), *(f"params/norm/{g}" for g in WIDE_GROUPS)]
    train += [f"moe/layer_{i}/{name}" for i in range(layers)
              for name in ("load_max_violation", "routing_entropy", "router_bias_norm")]
    train += [f"grad/norm/layer_{i}/{part}" for i in range(layers) for part in ("attn", "experts")]
    train += [f"mixture/{kind}/domain_{d:02d}" for kind in ("weight", "epochs") for d in range(domains)]
    evals = ["eval/macro/loss", "eval/macro/bpb", *(f"eval/domain_{d:02d}/{m}" for d in range(domains)
                                                   for m in ("loss", "bpb"))]
    evals += [f"eval/task/task_{t:02d}/acc" for t in range(tasks)]
    filler = metrics - len(train) - len(evals)
    if filler < 0:
        raise ValueError(f"{metrics} metrics cannot hold the {len(train) + len(evals)} named ones")
    train += [f"debug/metric_{n:03d}" for n in range(filler)]
    return train, evals


def write_wide_run(folder: Path, steps: int, metrics: int = 500, layers: int = 48, experts: int = 64,
                   vector_every: int = 100, domains: int = 16, tasks: int = 20, chunk_steps: int = 5000) -> int:
    """A run of ``metrics`` scalars every step (evals every ``steps // 100``) and per-expert load and
    router bias of ``layers`` × ``experts`` every ``vector_every`` steps, written through the real
    store with large transactions. Layer ``layers // 3`` grows out of balance towards the end and
    ``debug/metric_007`` jumps at the last step, so there is something for "what changed" to find.
    Returns the scalar rows written."""
    from glasslab.track.store import RunStore

    train, evals = wide_keys(metrics, layers, domains, tasks)
    hot = layers // 3
    write_record(folder, build_record({"model": {"n_layers": layers, "experts": experts}, "name": folder.name}, None)
                 | {"size_name": "1.6B-A61M", "flops_per_token": FLOPS_PER_TOKEN, "steps": steps})
    store = RunStore(folder, flush_rows=1 << 62, flush_seconds=math.inf)
    store.conn.execute("PRAGMA cache_size=-262144")
    eval_every = max(1, steps // 100)
    rows = 0
    # Each metric: a curve of its own (offset, slope and wiggle from its index), cheap to compute.
    shape = {key: (1.0 + 0.01 * (i % 97), 0.3 + 0.002 * (i % 41), 0.05 * (i % 7))
             for i, key in enumerate(train + evals)}
    for step in range(steps):
        t = step / max(1, steps - 1)
        decay = 1.0 / math.sqrt(1.0 + step)
        wiggle = math.sin(step / 37.0)
        logged = {}
        for key in train:
            base, slope, amp = shape[key]
            logged[key] = base + slope * decay + amp * wiggle
        logged["train/loss"] = 2.0 + 3.0 * decay
        logged["train/tokens"] = float((step + 1) * TOKENS_PER_STEP)
        for i in range(layers):
            logged[f"moe/layer_{i}/load_max_violation"] = 0.1 + 0.01 * i * decay + (2.0 * t * t if i == hot else 0.0)
        if step == steps - 1:
            logged["debug/metric_007"] = logged.get("debug/metric_007", 0.0) + 10.0
        if step % eval_every == eval_every - 1:
            for key in evals:
                logged[key] = shape[key][0] + 3.0 * decay
        store.log(logged, step)
        rows += len(logged)
        if step % vector_every == 0:
            for i in range(layers):
                load = [1.0 + 0.3 * math.sin(e + i + step / 500) for e in range(experts)]
                load[(i * 7) % experts] *= 1.0 + (4.0 * t if i == hot else 0.2)  # the hot layer's favourite
                total = sum(load)
                store.log_vector(f"moe/layer_{i}/expert_load", [v / total for v in load], step)
                store.log_vector(f"moe/layer_{i}/router_bias",
                                 [0.01 * math.sin(e * 0.7 + i) * (1 + t) for e in range(experts)], step)
        if step % chunk_steps == chunk_steps - 1:
            store.flush()
    store.annotate("spike_skipped", "loss spike skipped", step=steps // 2, severity="warning")
    store.close()
    return rows
