"""Model benchmark: training-step throughput of our MoE vs transformers' Qwen3-MoE, and model FLOP/s.

Everything is measured side by side in one run on this machine, so ratios are meaningful even on a
shared, noisy CPU (absolute numbers are not):

- CPU, fp32, batch 8 × 256 tokens: tokens/s of a full training step (forward, backward, fused AdamW)
  for our MoE and for ``Qwen3MoeForCausalLM`` with the same dimensions (vocab 8,192, d_model 256, 8
  layers, 4 heads, 16 experts of hidden size 256, top-2, softmax routing, QK-norm — the same function:
  our model exports to that class exactly), its experts run by ``grouped_mm`` (transformers' default);
- model FLOP/s (``cfg.flops_per_token`` × tokens/s) of our dense and MoE models as a fraction of this
  machine's fp32 2048×2048 matmul FLOP/s, timed in the same round-robin as the steps (so a machine
  that slows down mid-run slows both), and as a fraction of what each model's weight matmuls reach
  alone at the step's shapes (:func:`matmul_ceiling`). The headline is the trainer's
  default path: eager or compiled as ``train.compile=null`` chooses (``train/compile_rule.py``) for a
  run of that model on 20 tokens per parameter; eager figures follow as context, and with
  ``--compile`` the compiled ones too. The headlines (the speed-up and the fractions) are the median of
  the ``--steps`` rounds' figures, each round's step over the matmul or transformers' step timed beside
  it, printed with their spread (``bench/interleave.py``); the context lines are the best round's, but
  for ``cpu_moe_speedup_bound_at_its_matmul_ceiling`` (transformers' step over our MoE's weight matmuls
  alone, per round: the speed-up no MoE step with those matmuls can pass);
- the trainer's own step (``Trainer.train_step``), compiled, for a dense and an MoE model, with and
  without activation checkpointing: how often a step waits for the device (``host_syncs_per_step``,
  ``train/host_syncs.py``) and whether anything compiles again after step 1
  (``recompiles_after_step_1``, dynamo's counters). On the CPU these use the ``aot_eager`` backend:
  graphs, guards and recompiles are dynamo's, the same whatever backend generates the kernels, and
  inductor's C++ build would take minutes here;
- with CUDA (or ``--device cpu`` to walk it on tiny sizes): the same fraction ("MFU") for a ~1.2B-total
  MoE and a dense model of similar active size, in the trainer's precision (fp32 weights, bf16
  autocast), against a bf16 8192×8192 matmul measured in the same run; the trainer checks on the GPU,
  where CUDA's own sync detector counts too; then what compiling costs and buys, on a 4-layer cut of
  the same MoE (see :data:`COMPILED_LAYERS`). Each line is printed as soon as it is measured.

Run: ``python bench/model_bench.py [--steps N] [--compile] [--gpu-only] [--device D] [--smoke]``. Ends
with ``name: value  (target …)`` lines. ``--smoke`` (tiny models, one step) only checks that the bench
runs; ``--gpu-only`` is the CUDA section (``bench/gpu_check.sh``). ``--profile [--compile]`` prints
instead where an eager step of our MoE and of transformers' spends its time, by part of the model
(``bench/step_profile.py``), and the experts' matmuls in each layout that could run them.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from glasslab.model import ModelConfig, MoEConfig, Transformer
from glasslab.model.grouped_mm import grouped_mm, grouped_mm_weight_grad
from glasslab.model.moe import GroupedExperts, Router
from glasslab.train.build import checkpoint_activations
from glasslab.train.compile_rule import CompileChoice, choose_compile
from glasslab.train.config import TrainConfig
from glasslab.train.distributed import DistContext
from glasslab.train.host_syncs import count_host_syncs
from glasslab.train.loop import RunParts, Trainer
from glasslab.train.throughput import matmul_flops_per_s, synchronize

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from interleave import LoadWatch, headline, interleaved, paired_ratios  # noqa: E402

from train_fakes import SyntheticLoader  # noqa: E402

SEQ, BATCH = 256, 8
MOE_CPU = ModelConfig(
    vocab_size=8192,
    d_model=256,
    n_layers=8,
    n_heads=4,
    d_ff=768,
    moe=MoEConfig(
        num_experts=16, top_k=2, d_expert=256, num_shared_experts=0, router="softmax", balancing="none"
    ),
)
DENSE_CPU = ModelConfig(vocab_size=8192, d_model=256, n_layers=8, n_heads=4, d_ff=768)
SMOKE_MOE = ModelConfig(vocab_size=512, d_model=64, n_layers=2, n_heads=2, d_ff=192,
                        moe=dataclasses.replace(MOE_CPU.moe, num_experts=4, d_expert=64))
SMOKE_DENSE = ModelConfig(vocab_size=512, d_model=64, n_layers=2, n_heads=2, d_ff=192)


def round_robin_seconds(fns: dict, repeats: int, device: str) -> dict[str, list[float]]:
    """Seconds of each ``fn()`` after one warm-up call each: ``repeats`` timed calls of each, taken
    round-robin (bench/interleave.py) so that load from others on a shared machine hits every entry
    alike. Returns each entry's seconds in round order."""
    for fn in fns.values():
        fn()

    def timed(fn: Callable[[], object]) -> Callable[[], float]:
        def seconds() -> float:
            synchronize(device)
            t0 = time.perf_counter()
            fn()
            synchronize(device)
            return time.perf_counter() - t0
        return seconds

    return interleaved({name: timed(fn) for name, fn in fns.items()}, repeats)


def ours_step_fn(cfg: ModelConfig, batch: int, seq: int, device: str, autocast: bool = False,
                 compile: bool | str = False):
    """One training step of our model as the trainer runs it: the loss from the model (its LM head in
    token chunks), fp32 weights and, with ``autocast``, bf16 autocast; ``compile`` (True or a backend's
    name) runs the model through ``torch.compile`` as ``train.compile`` does (the first call compiles)."""
    torch.manual_seed(0)
    model = Transformer(cfg).to(device=device)
    net = model
    if compile:
        net = torch.compile(model) if compile is True else torch.compile(model, backend=compile)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(0, cfg.vocab_size, (batch, seq + 1), device=device)
    precision = torch.autocast(device, dtype=torch.bfloat16) if autocast else contextlib.nullcontext()

    def step() -> None:
        with precision:
            nats = net(tokens[:, :-1], targets_BT=tokens[:, 1:])
        (nats / tokens[:, 1:].numel() + model.aux_loss()).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        model.balancer.update()

    return step


def hf_step_fn(cfg: ModelConfig, batch: int, seq: int, experts_implementation: str):
    import transformers

    from glasslab.model.export import _hf_config

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf_cfg = _hf_config(cfg, "Qwen3MoeForCausalLM")
        hf_cfg._experts_implementation = experts_implementation
        model = transformers.Qwen3MoeForCausalLM(hf_cfg).float().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(0, cfg.vocab_size, (batch, seq + 1))

    def step() -> None:
        logits = model(tokens[:, :-1]).logits
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab_size).float(), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def matmul_ceiling(cfg: ModelConfig, batch: int, seq: int) -> tuple[Callable[[], None], float]:
    """This model's own matmuls on their own, and their FLOPs: every weight matmul of a training step
    (forward, input gradient, weight gradient) at the step's shapes — linear layers, router, LM head,
    and the experts as the trainer runs them (``glasslab::grouped_mm`` over equal groups of
    expert-sorted rows). No implementation of the model runs faster than these alone; its step's
    model FLOP/s over theirs is how much of what BLAS gives at these shapes it gets (attention's
    FLOPs and all elementwise work count against the step, not here)."""
    tokens = batch * seq
    calls, flops = [], 0
    for module in Transformer(cfg).modules():
        if isinstance(module, (torch.nn.Linear, Router)):
            w = module.weight.detach().float()  # (out, in)
            x, g = torch.randn(tokens, w.shape[1]), torch.randn(tokens, w.shape[0])
            calls += [lambda x=x, w=w: x @ w.t(), lambda g=g, w=w: g @ w, lambda g=g, x=x: g.t() @ x]
            flops += 3 * 2 * tokens * w.numel()
        elif isinstance(module, GroupedExperts):
            moe = cfg.moe
            rows = tokens * moe.top_k
            ends = torch.linspace(rows / moe.num_experts, rows, moe.num_experts).round().to(torch.int32)
            for w in (module.gate_up_EDF2.detach(), module.down_EFD.detach()):
                x, g = torch.randn(rows, w.shape[1]), torch.randn(rows, w.shape[2])
                calls += [lambda x=x, w=w, e=ends: grouped_mm(x, w, e),
                          lambda g=g, w=w, e=ends: grouped_mm(g, w.transpose(-2, -1), e),
                          lambda x=x, g=g, e=ends: grouped_mm_weight_grad(x, g, e)]
                flops += 3 * 2 * rows * w[0].numel()

    def run() -> None:
        for call in calls:
            call()

    return run, flops


def default_compile(cfg: ModelConfig) -> CompileChoice:
    """What ``train.compile=null`` picks on CPU for a run of ``cfg`` trained on 20 tokens per parameter
    (the compute-optimal length these models would be trained for): the trainer's default path."""
    planned_flops = 20 * cfg.param_counts()["total"] * cfg.flops_per_token(SEQ)
    return choose_compile(None, planned_flops, "cpu")


def cpu_section(steps: int, compile: bool, smoke: bool) -> list[str]:
    moe_cfg, dense_cfg = (SMOKE_MOE, SMOKE_DENSE) if smoke else (MOE_CPU, DENSE_CPU)
    batch, seq, matmul = (2, 32, 256) if smoke else (BATCH, SEQ, 2048)
    cfgs = {"moe": moe_cfg, "dense": dense_cfg}
    default = {name: default_compile(cfg) for name, cfg in cfgs.items()}
    timed = {name: ours_step_fn(cfg, batch, seq, "cpu") for name, cfg in cfgs.items()}
    timed["hf"] = hf_step_fn(moe_cfg, batch, seq, "grouped_mm")
    compiled = [name for name in cfgs if compile or default[name].compile]
    for name in compiled:
        timed[f"{name}_compiled"] = ours_step_fn(cfgs[name], batch, seq, "cpu", compile=True)
    models = list(timed)
    a, b = torch.randn(matmul, matmul), torch.randn(matmul, matmul)
    timed["matmul"] = lambda: a @ b
    ceiling_flops = {}
    for name, cfg in cfgs.items():
        timed[f"{name}_ceiling"], ceiling_flops[name] = matmul_ceiling(cfg, batch, seq)
    rounds = round_robin_seconds(timed, steps, "cpu")
    seconds = {name: min(samples) for name, samples in rounds.items()}  # best of: the context lines
    peak = 2 * matmul**3 / seconds["matmul"]
    rate = {name: batch * seq / seconds[name] for name in models}
    ceiling = {name: flops / seconds[f"{name}_ceiling"] / peak for name, flops in ceiling_flops.items()}
    frac = {name: cfgs[name.removesuffix("_compiled")].flops_per_token(seq) * r / peak
            for name, r in rate.items() if name != "hf"}
    path = {name: f"{name}_compiled" if default[name].compile else name for name in cfgs}
    print(f"cpu threads {torch.get_num_threads()}, batch {batch}x{seq}, fp32 {matmul}² matmul {peak / 1e9:.1f} GFLOP/s")
    for name, cfg in cfgs.items():
        print(f"{name} {cfg.size_name()}: " + ", ".join(f"{v:.0f} tok/s {k.removeprefix(name).strip('_') or 'eager'}"
                                                       for k, v in rate.items() if k.startswith(name)))
        print(f"  the trainer's default path for it: {path[name].removeprefix(name).strip('_') or 'eager'} "
              f"({default[name].reason})")
    print(f"transformers Qwen3-MoE, experts 'grouped_mm' (its default), eager: {rate['hf']:.0f} tok/s")
    # The headlines: one figure per round, each step over the matmul or transformers' step beside it.
    round_frac = {name: [cfg.flops_per_token(seq) * batch * seq / (2 * matmul**3) * r
                         for r in paired_ratios(rounds["matmul"], rounds[path[name]])] for name, cfg in cfgs.items()}
    speedups = paired_ratios(rounds["hf"], rounds[path["moe"]])
    lines = [
        "cpu_moe_model_flops_fraction_of_matmul: "
        f"{headline(round_frac['moe'], 'target >= 0.75; the trainer default path')}",
        f"cpu_moe_train_speedup_vs_qwen3moe_grouped_mm_experts: {headline(speedups, 'target >= 1.7x')}",
        f"cpu_dense_model_flops_fraction_of_matmul: {headline(round_frac['dense'], 'target >= 0.51, must not drop')}",
        "cpu_moe_vs_dense_model_flops_fraction_ratio: "
        f"{headline(paired_ratios(round_frac['moe'], round_frac['dense']), 'target 1.0: MoE as efficient as dense')}",
        f"cpu_moe_eager_model_flops_fraction_of_matmul: {frac['moe']:.2f}  (context: train.compile=false)",
        f"cpu_dense_eager_model_flops_fraction_of_matmul: {frac['dense']:.2f}  (context: train.compile=false)",
        f"cpu_moe_matmul_ceiling_fraction_of_matmul: {ceiling['moe']:.2f}  (context: its weight matmuls alone)",
        f"cpu_dense_matmul_ceiling_fraction_of_matmul: {ceiling['dense']:.2f}  (context: its weight matmuls alone)",
        f"cpu_moe_fraction_of_its_matmul_ceiling: {frac[path['moe']] / ceiling['moe']:.2f}  "
        f"(context: dense {frac[path['dense']] / ceiling['dense']:.2f})",
        "cpu_moe_speedup_bound_at_its_matmul_ceiling: " + headline(
            paired_ratios(rounds["hf"], rounds["moe_ceiling"]),
            "context: transformers' step over our MoE's weight matmuls alone; no step with them beats it"),
    ]
    lines += [f"cpu_{name}_compiled_model_flops_fraction_of_matmul: {frac[f'{name}_compiled']:.2f}  "
              "(context: train.compile=true)" for name in compiled]
    return lines


GPU_MOE = ModelConfig(vocab_size=32768, d_model=1024, n_layers=16, n_heads=16, d_ff=2816,
                      moe=MoEConfig(num_experts=32, top_k=2, d_expert=704, num_shared_experts=1, first_k_dense=1))
"""The GPU section's MoE: 1.2B parameters in all, 16 layers."""
GPU_DENSE = ModelConfig(vocab_size=32768, d_model=1024, n_layers=12, n_heads=16, d_ff=2816)
"""A dense model of about the MoE's active size."""
COMPILED_LAYERS = 4
"""Layers of the MoE cut whose compilation the GPU section times (the same widths, so the same speed-up
per layer). A whole-model compile traces every layer, so its time grows with depth, not width. On the
2-core development machine (shared by ~10 processes, 2026-12-01, docs/LOG.md) tracing this MoE's graph
(dynamo and AOT autograd, backend ``aot_eager``) cost 1 + 2.5 CPU-seconds per layer (6.1 s at 2
layers, 21.1 s at 8), and inductor's lowering of the forward as much again (10.9 s at 2 layers), the
backward's likewise: ~7.5 CPU-seconds per layer. Taking a GPU host's core as no faster, and Triton's
few dozen kernels as built in parallel within ~15 s, the 16-layer model needs ~2 minutes, more than
``bench/gpu_check.sh`` gives this whole section; 4 layers, ~45 s."""


def emit(line: str, lines: list[str]) -> None:
    """Print a headline line now (a later time-out keeps it) and keep it."""
    print(line, flush=True)
    lines.append(line)


def tokens_per_second(step: Callable[[], None], tokens: int, steps: int, device: str) -> float:
    """Tokens/s of ``step``: the best of ``steps`` timed calls after one warm-up call."""
    return tokens / min(round_robin_seconds({"step": step}, steps, device)["step"])


def gpu_section(steps: int, smoke: bool, compile: bool, device: str = "cuda",
                compile_backend: str | None = None) -> list[str]:
    """bf16-autocast MFU of the ~1.2B MoE and the dense model; the trainer checks on this device; with
    ``compile``, last (the slowest), what compiling :data:`COMPILED_LAYERS` layers of the MoE costs
    (seconds to its first step) and buys (speed-up), the compile rule's inputs. ``device="cpu"`` with
    ``smoke`` walks it all on tiny sizes (a dry run of ``bench/gpu_check.sh``)."""
    out: list[str] = []
    matmul = 256 if smoke else 8192  # bf16 matmuls on a CPU are slow: 1024² took 13 s of a dry run
    peak = matmul_flops_per_s(device, torch.bfloat16, matmul, repeats=5 if smoke else 50)
    print(f"{device} bf16 {matmul}² matmul: {peak / 1e12:.1f} TFLOP/s", flush=True)
    moe, dense = (SMOKE_MOE, SMOKE_DENSE) if smoke else (GPU_MOE, GPU_DENSE)
    batch, seq = (2, 64) if smoke else (16, 2048)
    for name, cfg, target in (("dense", dense, 0.45), ("moe", moe, 0.25)):
        rate = tokens_per_second(ours_step_fn(cfg, batch, seq, device, autocast=True), batch * seq, steps, device)
        print(f"{device} {name} {cfg.size_name()}: {rate:.0f} tok/s", flush=True)
        emit(f"gpu_{name}_mfu_bf16: {cfg.flops_per_token(seq) * rate / peak:.2f}  (target >= {target})", out)
    # dynamo's graphs and guards, and the syncs in our code, do not depend on the backend: aot_eager
    # compiles these four in seconds, where inductor would take most of the section's box.
    for line in trainer_check_lines(device, "aot_eager", prefix="gpu_", only_moe_recompute=smoke and device == "cpu"):
        emit(line, out)
    if compile:
        cut = dataclasses.replace(moe, n_layers=min(moe.n_layers, COMPILED_LAYERS))
        eager = tokens_per_second(ours_step_fn(cut, batch, seq, device, autocast=True), batch * seq, steps, device)
        compiled_step = ours_step_fn(cut, batch, seq, device, autocast=True, compile=compile_backend or True)
        synchronize(device)
        start = time.perf_counter()
        compiled_step()  # compiles, then runs one step
        synchronize(device)
        emit(f"gpu_moe_compile_seconds: {time.perf_counter() - start:.0f}  (context: {cut.n_layers} layers; "
             "train/compile_rule.py assumes ~90 for a whole model)", out)
        compiled = tokens_per_second(compiled_step, batch * seq, steps, device)
        emit(f"gpu_moe_compiled_speedup_vs_eager: {compiled / eager:.2f}x  "
             "(context: train/compile_rule.py assumes 1.25x)", out)
    return out


def trainer_checks(cfg: ModelConfig, recompute: bool, device: str, backend: str) -> tuple[float, int]:
    """(host syncs per step, graphs compiled after step 1) of the trainer's compiled step on ``cfg``, over
    three steps after the first. On CUDA, CUDA's sync detector counts too (also the syncs inside
    kernels, which the host-side counter cannot see); the higher count is taken."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    train = TrainConfig(seq_len=32, global_batch_tokens=32 * 4, micro_batch_size=2, max_steps=100,
                        checkpoint_interval=1000, compile=True, peak_flops=1e12)
    torch.manual_seed(0)
    model = Transformer(cfg)
    if recompute:
        checkpoint_activations(model.blocks)
    # The synthetic stream's tokens are below 64, inside every vocabulary here.
    parts = RunParts(model=model, balancer=model.balancer, loader=SyntheticLoader(32, 4),
                     flops_per_token=cfg.flops_per_token(32))
    with tempfile.TemporaryDirectory() as tmp, _patched(torch, "compile",
                                                         functools.partial(torch.compile, backend=backend)):
        trainer = Trainer(train, parts, None, Path(tmp), DistContext(device=torch.device(device)), {}, 1e12)
        trainer.train_step()
        graphs = counters["stats"]["unique_graphs"]
        with count_host_syncs() as ours, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if device == "cuda":
                torch.cuda.set_sync_debug_mode("warn")
            try:
                for _ in range(3):
                    trainer.train_step()
            finally:
                if device == "cuda":
                    torch.cuda.set_sync_debug_mode("default")
        cuda_syncs = sum("synchroniz" in str(w.message) for w in caught)
    return max(sum(ours.values()), cuda_syncs) / 3, counters["stats"]["unique_graphs"] - graphs


@contextlib.contextmanager
def _patched(owner, name: str, value):
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


def trainer_check_lines(device: str, backend: str, prefix: str = "", only_moe_recompute: bool = False) -> list[str]:
    """The trainer checks for the tiny dense and MoE models, with and without activation checkpointing:
    a context line for each, then two headline lines (the worst of the four). ``only_moe_recompute``: the MoE
    with activation checkpointing alone (a dry run on the CPU, where this bench's own smoke runs all four)."""
    syncs, recompiles, lines = {}, {}, []
    for name, cfg in (("moe", SMOKE_MOE),) if only_moe_recompute else (("dense", SMOKE_DENSE), ("moe", SMOKE_MOE)):
        for recompute in (True,) if only_moe_recompute else (False, True):
            key = f"{name}{'_activation_checkpointing' if recompute else ''}"
            syncs[key], recompiles[key] = trainer_checks(cfg, recompute, device, backend)
            lines.append(f"{prefix}host_syncs_per_step_{key}: {syncs[key]:.1f}  "
                         f"(context; compiled again after step 1: {recompiles[key]})")
    over = "the MoE with activation checkpointing" if only_moe_recompute else \
        "dense and MoE, with and without activation checkpointing"
    return [*lines,
            f"{prefix}host_syncs_per_step: {max(syncs.values()):.1f}  (target <= 3; the most of the trainer's "
            f"compiled step on {device} over {over})",
            f"{prefix}recompiles_after_step_1: {max(recompiles.values())}  (target 0; the same {len(syncs)}, "
            f"backend {backend})"]


def expert_layout_lines(cfg: ModelConfig, tokens: int, repeats: int) -> list[str]:
    """GFLOP/s of one MoE layer's expert matmuls (forward, input and weight gradients of both weights) at
    the step's shapes over equal groups, in each layout that could run them: ``torch._grouped_mm`` over
    contiguous per-expert blocks, ``bmm`` over a padded (E, capacity, D) layout (here exactly full), a
    loop of ``mm``; and the same FLOPs as one ungrouped matmul, and the square matmul, for scale. Timed
    round-robin, medians."""
    moe = cfg.moe
    E, rows = moe.num_experts, tokens * moe.top_k
    group = rows // E
    ends = torch.arange(group, rows + 1, group, dtype=torch.int32)
    shapes = [(cfg.d_model, 2 * moe.d_expert), (moe.d_expert, cfg.d_model)]
    pairs = [(torch.randn(rows, d), torch.randn(E, d, f), torch.randn(rows, f)) for d, f in shapes]

    def grouped() -> None:
        for x, w, g in pairs:
            torch._grouped_mm(x, w, offs=ends), torch._grouped_mm(g, w.transpose(-2, -1), offs=ends)
            torch._grouped_mm(x.t(), g, offs=ends)

    def batched() -> None:
        for x, w, g in pairs:
            xb, gb = x.view(E, group, -1), g.view(E, group, -1)
            torch.bmm(xb, w), torch.bmm(gb, w.transpose(-2, -1)), torch.bmm(xb.transpose(-2, -1), gb)

    def looped() -> None:
        for x, w, g in pairs:
            for e in range(E):
                xe, ge = x[e * group:(e + 1) * group], g[e * group:(e + 1) * group]
                xe @ w[e], ge @ w[e].t(), xe.t() @ ge

    def ungrouped() -> None:
        for x, w, g in pairs:
            x @ w[0], g @ w[0].t(), x.t() @ g

    a = torch.randn(2048, 2048)
    fns = {"torch._grouped_mm": grouped, "bmm (padded capacity)": batched, "loop of mm": looped,
           "one ungrouped mm, same FLOPs": ungrouped, "2048² matmul": lambda: a @ a}
    flops = sum(3 * 2 * rows * d * f for d, f in shapes)
    seconds = round_robin_seconds(fns, repeats, "cpu")
    median = {name: sorted(s)[len(s) // 2] for name, s in seconds.items()}
    return [f"  {name}: {(2 * 2048**3 if name.startswith('2048') else flops) / median[name] / 1e9:.0f} GFLOP/s"
            for name in fns]


def profile_steps(smoke: bool, compile: bool, repeats: int = 5, steps: int = 2) -> None:
    """Print where an eager training step of our MoE and of transformers' Qwen3-MoE (the bench's pair)
    spends its time, by part (``bench/step_profile.py``), and with ``compile`` our compiled step's too
    (compiled code runs outside the parts' scopes, so there only op names split it: the experts'
    ``_grouped_mm``, other matmuls, attention's kernel, the optimiser, and the rest, fused kernels included).
    ``repeats`` profiles of ``steps`` steps per side, the sides in turn, after a warm-up step each; per part
    its median milliseconds per step and its median share of the step with that share's spread (under
    load the absolute times are noise, the shares within one profile are not). Then the experts' matmuls
    in each layout that could run them (:func:`expert_layout_lines`)."""
    import transformers.integrations.moe as hf_moe
    from step_profile import part_table, scoped, seconds_by_part
    from torch.profiler import ProfilerActivity, profile
    from transformers.models.qwen3_moe import modeling_qwen3_moe as qwen3

    from glasslab.model import moe, transformer
    from glasslab.model.balancing import Balancer

    cfg, batch, seq = (SMOKE_MOE, 2, 32) if smoke else (MOE_CPU, BATCH, SEQ)
    eager = {"ours": ours_step_fn(cfg, batch, seq, "cpu"), "transformers": hf_step_fn(cfg, batch, seq, "grouped_mm")}
    compiled = {"ours compiled": ours_step_fn(cfg, batch, seq, "cpu", compile=True)} if compile else {}
    module_scopes = {"RMSNorm": "norm", "Attention": "attention", "MoEFeedForward": "dispatch", "Router": "router",
                     "GroupedExperts": "swiglu", "Qwen3MoeRMSNorm": "norm", "Qwen3MoeAttention": "attention",
                     "Qwen3MoeRotaryEmbedding": "attention", "Qwen3MoeSparseMoeBlock": "dispatch",
                     "Qwen3MoeExperts": "dispatch", "Qwen3MoeTopKRouter": "router"}
    function_scopes = [(moe, "grouped_mm", "experts"), (moe.MoEFeedForward, "_after_routing", "router"),
                       (Balancer, "update", "router"), (transformer, "head_cross_entropy", "loss"),
                       (transformer, "rope_rotations", "attention"), (hf_moe, "_grouped_linear", "experts"),
                       (qwen3.Qwen3MoeExperts, "_apply_gate", "swiglu")]

    def profiled(step: Callable[[], None]) -> dict[str, float]:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                step()
        return {part: seconds / steps for part, seconds in seconds_by_part(prof.events()).items()}

    for step in compiled.values():
        step()  # compiles, outside the scopes
    parts: dict[str, list[dict[str, float]]] = {side: [] for side in (*eager, *compiled)}
    for round_ in range(repeats):
        for side, step in compiled.items():
            parts[side].append(profiled(step))
        with scoped(module_scopes, function_scopes):
            for side, step in eager.items():
                if round_ == 0:
                    step()
                parts[side].append(profiled(step))
    print(f"MoE {cfg.size_name()}, batch {batch}x{seq}, {repeats} profiles of {steps} steps per side, "
          f"{torch.get_num_threads()} threads: ms per step (median) and share of the step (median, spread)")
    print("\n".join(part_table(parts)))
    rows = batch * seq * cfg.moe.top_k
    print(f"one layer's expert matmuls, {cfg.moe.num_experts} equal groups of {rows // cfg.moe.num_experts} rows, "
          "forward and both gradients, by layout (median of the rounds):")
    print("\n".join(expert_layout_lines(cfg, batch * seq, repeats=3 if smoke else 20)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", type=int, default=10,
        help="timed rounds (round-robin; headlines the median, context lines the best); a compiled step "
             "reaches its speed only after a few"
    )
    parser.add_argument("--compile", action="store_true",
                        help="also time our models under torch.compile (train.compile=true; compiles first)")
    parser.add_argument("--smoke", action="store_true", help="tiny models, one step: check that the bench runs")
    parser.add_argument("--gpu-only", action="store_true", help="only the CUDA section (bench/gpu_check.sh)")
    parser.add_argument("--device", default="cuda",
                        help="the device of the GPU section (cpu with --smoke: walk it on tiny sizes)")
    parser.add_argument("--compile-backend", default=None,
                        help="torch.compile backend of the GPU section (default inductor; aot_eager for a dry run)")
    parser.add_argument("--profile", action="store_true",
                        help="only print where an eager step of our MoE and of transformers' spends its time, by part")
    args = parser.parse_args()
    if args.profile:
        profile_steps(args.smoke, args.compile, repeats=1 if args.smoke else 5)
        return
    if args.smoke:
        args.steps = 1
    with LoadWatch():
        if not args.gpu_only:
            print("\n".join(cpu_section(args.steps, args.compile, args.smoke)), flush=True)
            print("\n".join(trainer_check_lines("cpu", "aot_eager")), flush=True)
        if args.device == "cuda" and not torch.cuda.is_available():
            if args.gpu_only:
                raise SystemExit("model_bench --gpu-only: torch.cuda.is_available() is False")
            return
        gpu_section(args.steps, args.smoke, args.compile, args.device, args.compile_backend)


if __name__ == "__main__":
    main()
