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
  ``--compile`` the compiled ones too;
- with CUDA: the same fraction ("MFU") for a ~1B-total MoE and a dense model of similar active size in
  bf16, against a bf16 8192×8192 matmul measured in the same run.

Run: ``python bench/model_bench.py [--steps N] [--compile] [--gpu-only] [--smoke]``. Ends with
``name: value  (target …)`` lines. ``--smoke`` (tiny models, one step) only checks that the bench runs;
``--gpu-only`` is the CUDA section alone (``bench/gpu_check.sh``).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F

from glasslab.model import ModelConfig, MoEConfig, Transformer
from glasslab.model.grouped_mm import grouped_mm, grouped_mm_weight_grad
from glasslab.model.moe import GroupedExperts, Router
from glasslab.train.compile_rule import CompileChoice, choose_compile
from glasslab.train.throughput import matmul_flops_per_s, synchronize

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


def best_seconds(fns: dict, repeats: int, device: str) -> dict:
    """Seconds of each ``fn()`` after one warm-up call each: best of ``repeats`` timed calls, taken
    round-robin so that load from others on a shared machine hits every entry alike."""
    for fn in fns.values():
        fn()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):
        for name, fn in fns.items():
            synchronize(device)
            t0 = time.perf_counter()
            fn()
            synchronize(device)
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def ours_step_fn(cfg: ModelConfig, batch: int, seq: int, device: str, dtype: torch.dtype, compile: bool = False):
    """One training step of our model; ``compile`` runs the model through ``torch.compile`` as the
    trainer's ``train.compile`` does (the first call compiles)."""
    torch.manual_seed(0)
    model = Transformer(cfg).to(device=device, dtype=dtype)
    net = torch.compile(model) if compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(0, cfg.vocab_size, (batch, seq + 1), device=device)

    def step() -> None:
        logits = net(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), tokens[:, 1:].reshape(-1))
        (loss + model.aux_loss()).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        model.balancer.step()

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
    timed = {name: ours_step_fn(cfg, batch, seq, "cpu", torch.float32) for name, cfg in cfgs.items()}
    timed["hf"] = hf_step_fn(moe_cfg, batch, seq, "grouped_mm")
    compiled = [name for name in cfgs if compile or default[name].compile]
    for name in compiled:
        timed[f"{name}_compiled"] = ours_step_fn(cfgs[name], batch, seq, "cpu", torch.float32, compile=True)
    models = list(timed)
    a, b = torch.randn(matmul, matmul), torch.randn(matmul, matmul)
    timed["matmul"] = lambda: a @ b
    ceiling_flops = {}
    for name, cfg in cfgs.items():
        timed[f"{name}_ceiling"], ceiling_flops[name] = matmul_ceiling(cfg, batch, seq)
    seconds = best_seconds(timed, steps, "cpu")
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
    lines = [
        f"cpu_moe_model_flops_fraction_of_matmul: {frac[path['moe']]:.2f}  "
        "(target >= 0.50; the trainer's default path)",
        f"cpu_moe_train_speedup_vs_qwen3moe_grouped_mm_experts: {rate[path['moe']] / rate['hf']:.2f}x  "
        "(target >= 1.35x)",
        f"cpu_dense_model_flops_fraction_of_matmul: {frac[path['dense']]:.2f}  (target >= 0.51, must not drop)",
        f"cpu_moe_vs_dense_model_flops_fraction_ratio: {frac[path['moe']] / frac[path['dense']]:.2f}  "
        "(target 1.0: an MoE step as efficient as a dense one)",
        f"cpu_moe_eager_model_flops_fraction_of_matmul: {frac['moe']:.2f}  (context: train.compile=false)",
        f"cpu_dense_eager_model_flops_fraction_of_matmul: {frac['dense']:.2f}  (context: train.compile=false)",
        f"cpu_moe_matmul_ceiling_fraction_of_matmul: {ceiling['moe']:.2f}  (context: its weight matmuls alone)",
        f"cpu_dense_matmul_ceiling_fraction_of_matmul: {ceiling['dense']:.2f}  (context: its weight matmuls alone)",
        f"cpu_moe_fraction_of_its_matmul_ceiling: {frac[path['moe']] / ceiling['moe']:.2f}  "
        f"(context: dense {frac[path['dense']] / ceiling['dense']:.2f})",
    ]
    lines += [f"cpu_{name}_compiled_model_flops_fraction_of_matmul: {frac[f'{name}_compiled']:.2f}  "
              "(context: train.compile=true)" for name in compiled]
    return lines


def gpu_section(steps: int, smoke: bool, compile: bool) -> list[str]:
    """bf16 MFU of a ~1B MoE and a dense model of similar active size; with ``compile`` also what
    compiling the MoE costs (seconds to the first step) and buys (speed-up), the compile rule's inputs."""
    matmul = 1024 if smoke else 8192
    peak = matmul_flops_per_s("cuda", torch.bfloat16, matmul, repeats=50)
    moe = SMOKE_MOE if smoke else ModelConfig(
        vocab_size=32768,
        d_model=1024,
        n_layers=16,
        n_heads=16,
        d_ff=2816,
        moe=MoEConfig(num_experts=32, top_k=2, d_expert=704, num_shared_experts=1, first_k_dense=1),
    )
    dense = SMOKE_DENSE if smoke else ModelConfig(vocab_size=32768, d_model=1024, n_layers=12, n_heads=16, d_ff=2816)
    batch, seq = (2, 64) if smoke else (16, 2048)
    lines = [f"gpu bf16 {matmul}² matmul: {peak / 1e12:.0f} TFLOP/s"]
    out = []
    models = {"moe": (moe, 0.25), "dense": (dense, 0.45)}
    steps_by_name = {
        name: ours_step_fn(cfg, batch, seq, "cuda", torch.bfloat16) for name, (cfg, _) in models.items()
    }
    if compile:
        compiled_step = ours_step_fn(moe, batch, seq, "cuda", torch.bfloat16, compile=True)
        synchronize("cuda")
        start = time.perf_counter()
        compiled_step()  # compiles, then runs one step
        synchronize("cuda")
        out.append(f"gpu_moe_compile_seconds: {time.perf_counter() - start:.0f}  "
                   "(context: train/compile_rule.py assumes ~90)")
        steps_by_name["moe_compiled"] = compiled_step
    rate = {name: batch * seq / sec for name, sec in best_seconds(steps_by_name, steps, "cuda").items()}
    if compile:
        out.append(f"gpu_moe_compiled_speedup_vs_eager: {rate['moe_compiled'] / rate['moe']:.2f}x  "
                   "(context: train/compile_rule.py assumes 1.25x)")
    for name, (cfg, target) in models.items():
        lines.append(f"gpu {name} {cfg.size_name()}: {rate[name]:.0f} tok/s")
        out.append(
            f"gpu_{name}_mfu_bf16: {cfg.flops_per_token(seq) * rate[name] / peak:.2f}  (target >= {target})"
        )
    print("\n".join(lines))
    return out


def profile_moe_step(smoke: bool, rows: int = 25) -> None:
    """Print torch.profiler's per-op table (self CPU time, forward and backward ops alike) of three
    eager training steps of the bench's MoE, after one warm-up step."""
    from torch.profiler import ProfilerActivity, profile

    cfg, batch, seq = (SMOKE_MOE, 2, 32) if smoke else (MOE_CPU, BATCH, SEQ)
    step = ours_step_fn(cfg, batch, seq, "cpu", torch.float32)
    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            step()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=48))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", type=int, default=10,
        help="timed rounds (best of, round-robin); a compiled step reaches its speed only after a few"
    )
    parser.add_argument("--compile", action="store_true",
                        help="also time our models under torch.compile (train.compile=true; compiles first)")
    parser.add_argument("--smoke", action="store_true", help="tiny models, one step: check that the bench runs")
    parser.add_argument("--gpu-only", action="store_true", help="only the CUDA section (bench/gpu_check.sh)")
    parser.add_argument("--profile", action="store_true", help="only print the per-op profile of an eager MoE step")
    args = parser.parse_args()
    if args.profile:
        profile_moe_step(args.smoke)
        return
    if args.smoke:
        args.steps = 1
    headline = []
    if not args.gpu_only:
        headline += cpu_section(args.steps, args.compile, args.smoke)
    if torch.cuda.is_available():
        headline += gpu_section(args.steps, args.smoke, args.compile)
    elif args.gpu_only:
        raise SystemExit("model_bench --gpu-only: torch.cuda.is_available() is False")
    print("\n".join(headline))


if __name__ == "__main__":
    main()
