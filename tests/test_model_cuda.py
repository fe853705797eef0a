"""What only a CUDA device can show: the grouped-matmul kernel's layouts run there, the MoE on the GPU
equals the same MoE on the CPU (values and gradients, fp32 and bf16), the kernel probe leaves the CUDA
generator alone, a compiled MoE step runs, the experts run the kernel in bf16 under autocast, the
loader hands over pinned batches, and a trainer step synchronises with the device at most three times
by CUDA's own count. Skipped without CUDA; ``bench/gpu_check.sh`` runs them (``pytest -m cuda``)."""

from __future__ import annotations

import warnings

import pytest
import torch

from glasslab.data.config import DataConfig, MixtureConfig
from glasslab.data.loader import Loader
from glasslab.model import ModelConfig, MoEConfig, Transformer
from glasslab.model import grouped_mm as grouped_mm_module
from glasslab.train.config import TrainConfig
from glasslab.train.distributed import DistContext
from train_fakes import make_trainer

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

CFG = ModelConfig(vocab_size=128, d_model=64, n_layers=2, n_heads=4, d_ff=128,
                  moe=MoEConfig(num_experts=8, top_k=2, d_expert=64, num_shared_experts=1))


def test_grouped_mm_probe_leaves_the_cuda_generator_alone():
    grouped_mm_module.kernel_runs.cache_clear()
    before = torch.cuda.get_rng_state()
    runs = grouped_mm_module.kernel_runs("cuda", torch.bfloat16)
    assert torch.equal(torch.cuda.get_rng_state(), before)
    print(f"cuda_grouped_mm_kernel_bf16: {runs}")


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-4), (torch.bfloat16, 3e-2)])
def test_moe_on_cuda_equals_cpu_values_and_gradients(dtype, tol):
    torch.manual_seed(0)
    cpu_model = Transformer(CFG)
    gpu_model = Transformer(CFG).cuda().to(dtype)
    gpu_model.load_state_dict(cpu_model.state_dict())
    cpu_model.to(dtype)  # the same rounded weights on both sides
    tokens = torch.randint(0, CFG.vocab_size, (4, 33))
    cpu_logits = cpu_model(tokens).float()
    gpu_logits = gpu_model(tokens.cuda()).float()
    torch.testing.assert_close(gpu_logits.cpu(), cpu_logits, atol=tol, rtol=tol)
    cpu_logits.logsumexp(-1).mean().backward()
    gpu_logits.logsumexp(-1).mean().backward()
    for (name, a), b in zip(cpu_model.named_parameters(), gpu_model.parameters(), strict=True):
        torch.testing.assert_close(b.grad.float().cpu(), a.grad.float(), atol=tol, rtol=tol, msg=name)


def test_compiled_moe_training_step_on_cuda_matches_eager():
    torch.manual_seed(0)
    eager = Transformer(CFG).cuda()
    compiled = Transformer(CFG).cuda()
    compiled.load_state_dict(eager.state_dict())
    tokens = torch.randint(0, CFG.vocab_size, (4, 33), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        a = eager(tokens[:, :-1]).float()
        b = torch.compile(compiled, fullgraph=True)(tokens[:, :-1]).float()
    torch.testing.assert_close(b, a, atol=5e-2, rtol=5e-2)
    b.logsumexp(-1).mean().backward()
    assert compiled.blocks[0].ffn.experts.gate_up_EDF2.grad.abs().sum() > 0


def test_experts_compute_in_bf16_under_autocast():
    """In bf16 the experts can use torch's grouped-matmul kernel (where this build and GPU have it: the
    environment section of bench/gpu_check.sh says) instead of one matmul per expert."""
    x = torch.randn(64, 32, device="cuda")
    w = torch.randn(4, 32, 16, device="cuda", requires_grad=True)
    ends = torch.tensor([16, 32, 48, 64], device="cuda", dtype=torch.int32)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = grouped_mm_module.grouped_mm(x, w, ends)
    assert y.dtype == torch.bfloat16
    reference = torch.cat([x[16 * e : 16 * (e + 1)] @ w[e] for e in range(4)])
    torch.testing.assert_close(y.float(), reference, atol=5e-2, rtol=5e-2)
    y.float().sum().backward()
    assert w.grad.dtype == torch.float32


def test_the_loader_pins_its_batches_for_the_gpu(tmp_path):
    from data_helpers import build_small

    cfg = DataConfig(path=str(build_small(tmp_path)), mixture=MixtureConfig(weights={"alpha": 1.0}))
    loader = Loader(cfg, seq_len=32, global_batch=4, pin_memory=True)
    batches = [loader.next_batch() for _ in range(3)]
    assert all(b.is_pinned() for b in batches)
    plain = Loader(cfg, seq_len=32, global_batch=4, prefetch=False)
    assert all(torch.equal(b, plain.next_batch()) for b in batches)


@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
def test_a_trainer_step_synchronises_at_most_three_times(tmp_path, moe):
    """CUDA's sync detector sees what the host-side counter cannot (syncs inside kernels, blocking copies)."""
    cfg = TrainConfig(seq_len=32, global_batch_tokens=32 * 8, micro_batch_size=4, max_steps=10,
                      checkpoint_interval=100)
    trainer = make_trainer(tmp_path, cfg, moe=moe, log=False, ctx=DistContext(device=torch.device("cuda")))
    trainer.train_step()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(3):
                trainer.train_step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [str(w.message) for w in caught if "synchroniz" in str(w.message)]
    print(f"cuda_host_syncs_per_step_{'moe' if moe else 'dense'}: {len(syncs) / 3:.1f}")
    assert len(syncs) <= 3 * 3, syncs
