"""Model benchmark: training-step throughput of our MoE vs transformers' Qwen3-MoE, and model FLOP/s.

Everything is measured side by side in one run on this machine, so ratios are meaningful even on a
shared, noisy CPU (absolute numbers are not):

- CPU, fp32, batch 8 × 256 tokens: tokens/s of a full training step (forward, backward, fused AdamW)
  for our MoE and for ``Qwen3MoeForCausalLM`` with the same dimensions (vocab 8,192, d_model 256, 8
  layers, 4 heads, 16 experts of hidden size 256, top-2, softmax routing, QK-norm — the same function:
  our model exports to that class exactly). transformers 5.x runs experts with ``grouped_mm`` by
  default; its ``eager`` experts (a Python loop with one-hot masks, what older releases ran) are
  measured too;
- model FLOP/s (``cfg.flops_per_token`` × tokens/s) of our dense and MoE models as a fraction of this
  machine's fp32 2048×2048 matmul FLOP/s measured in the same run (the same for transformers' eager
  experts, which bounds any speed-up over them: 5× needs five times their fraction); with
  ``--compile`` also for our models under ``torch.compile`` (``train.compile=true``);
- with CUDA: the same fraction ("MFU") for a ~1B-total MoE and a dense model of similar active size in
  bf16, against a bf16 8192×8192 matmul measured in the same run.

Run: ``python bench/model_bench.py [--steps N] [--compile]``. Ends with ``name: value  (target …)`` lines.
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch
import torch.nn.functional as F

from glasslab.model import ModelConfig, MoEConfig, Transformer
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


def train_tokens_per_s(steps_by_name: dict, repeats: int, tokens_per_step: int, device: str) -> dict:
    """Tokens/s of each ``step()`` after one warm-up step each: best of ``repeats`` timed steps, taken
    round-robin so that load from others on a shared machine hits every model alike."""
    for step in steps_by_name.values():
        step()
    best = dict.fromkeys(steps_by_name, float("inf"))
    for _ in range(repeats):
        for name, step in steps_by_name.items():
            synchronize(device)
            t0 = time.perf_counter()
            step()
            synchronize(device)
            best[name] = min(best[name], time.perf_counter() - t0)
    return {name: tokens_per_step / seconds for name, seconds in best.items()}


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


def cpu_section(steps: int, compile: bool) -> list[str]:
    peak = matmul_flops_per_s("cpu", torch.float32, 2048, repeats=30)
    steps_by_name = {
        "ours": ours_step_fn(MOE_CPU, BATCH, SEQ, "cpu", torch.float32),
        "dense": ours_step_fn(DENSE_CPU, BATCH, SEQ, "cpu", torch.float32),
        "hf": hf_step_fn(MOE_CPU, BATCH, SEQ, "grouped_mm"),
        "hf_eager": hf_step_fn(MOE_CPU, BATCH, SEQ, "eager"),
    }
    if compile:
        steps_by_name["ours_compiled"] = ours_step_fn(MOE_CPU, BATCH, SEQ, "cpu", torch.float32, compile=True)
        steps_by_name["dense_compiled"] = ours_step_fn(DENSE_CPU, BATCH, SEQ, "cpu", torch.float32, compile=True)
    rate = train_tokens_per_s(steps_by_name, steps, BATCH * SEQ, "cpu")
    ours, dense, hf, hf_eager = rate["ours"], rate["dense"], rate["hf"], rate["hf_eager"]
    peak = max(peak, matmul_flops_per_s("cpu", torch.float32, 2048, repeats=30))  # best seen, before and after
    frac = {name: (DENSE_CPU if name.startswith("dense") else MOE_CPU).flops_per_token(SEQ) * rate[name] / peak
            for name in steps_by_name}
    print(f"cpu threads {torch.get_num_threads()}, fp32 2048² matmul {peak / 1e9:.1f} GFLOP/s")
    print(f"MoE {MOE_CPU.size_name()}: {ours:.0f} tok/s; dense {DENSE_CPU.size_name()}: {dense:.0f} tok/s")
    print(f"transformers Qwen3-MoE: {hf:.0f} tok/s (experts 'grouped_mm', default), {hf_eager:.0f} ('eager')")
    lines = [
        f"cpu_moe_train_speedup_vs_qwen3moe_eager_experts: {ours / hf_eager:.2f}x  (target >= 5x)",
        f"cpu_moe_train_speedup_vs_qwen3moe_grouped_mm_experts: {ours / hf:.2f}x  (context: their default)",
        f"cpu_qwen3moe_eager_experts_model_flops_fraction_of_matmul: {frac['hf_eager']:.2f}  "
        f"(context: 5x over it would need {5 * frac['hf_eager']:.2f})",
        f"cpu_dense_model_flops_fraction_of_matmul: {frac['dense']:.2f}  (target >= 0.5)",
        f"cpu_moe_model_flops_fraction_of_matmul: {frac['ours']:.2f}  (target >= 0.35)",
    ]
    if compile:
        lines += [
            f"cpu_dense_compiled_model_flops_fraction_of_matmul: {frac['dense_compiled']:.2f}  (target >= 0.5)",
            f"cpu_moe_compiled_model_flops_fraction_of_matmul: {frac['ours_compiled']:.2f}  (target >= 0.35)",
        ]
    return lines


def gpu_section(steps: int) -> list[str]:
    peak = matmul_flops_per_s("cuda", torch.bfloat16, 8192, repeats=50)
    moe = ModelConfig(
        vocab_size=32768,
        d_model=1024,
        n_layers=16,
        n_heads=16,
        d_ff=2816,
        moe=MoEConfig(num_experts=32, top_k=2, d_expert=704, num_shared_experts=1, first_k_dense=1),
    )
    dense = ModelConfig(vocab_size=32768, d_model=1024, n_layers=12, n_heads=16, d_ff=2816)
    batch, seq = 16, 2048
    lines = [f"gpu bf16 8192² matmul: {peak / 1e12:.0f} TFLOP/s"]
    out = []
    models = {"moe": (moe, 0.25), "dense": (dense, 0.45)}
    steps_by_name = {
        name: ours_step_fn(cfg, batch, seq, "cuda", torch.bfloat16) for name, (cfg, _) in models.items()
    }
    rate = train_tokens_per_s(steps_by_name, steps, batch * seq, "cuda")
    for name, (cfg, target) in models.items():
        lines.append(f"gpu {name} {cfg.size_name()}: {rate[name]:.0f} tok/s")
        out.append(
            f"gpu_{name}_mfu_bf16: {cfg.flops_per_token(seq) * rate[name] / peak:.2f}  (target >= {target})"
        )
    print("\n".join(lines))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", type=int, default=4, help="timed training steps per model (best of, round-robin)"
    )
    parser.add_argument("--compile", action="store_true",
                        help="also time our models under torch.compile (train.compile=true; compiles first)")
    args = parser.parse_args()
    headline = cpu_section(args.steps, args.compile)
    if torch.cuda.is_available():
        headline += gpu_section(args.steps)
    print("\n".join(headline))


if __name__ == "__main__":
    main()
