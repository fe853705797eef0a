"""What only a CUDA device can show: the grouped-matmul kernel's layouts run there, the MoE on the GPU
equals the same MoE on the CPU (values and gradients, fp32 and bf16), the kernel probe leaves the CUDA
generator alone, and a compiled MoE step runs. Skipped without CUDA; ``bench/gpu_check.sh`` runs them
(``pytest -m cuda``)."""

from __future__ import annotations

import pytest
import torch

from glasslab.model import ModelConfig, MoEConfig, Transformer
from glasslab.model import grouped_mm as grouped_mm_module

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
