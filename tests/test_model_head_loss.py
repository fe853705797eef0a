"""The LM head's loss in token chunks: the same values and gradients as through full logits, for a
fraction of the peak memory (measured as the resident set of a fresh process)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from cli_runner import subprocess_env
from glasslab.model import ModelConfig, Transformer
from glasslab.model.head_loss import head_cross_entropy


@pytest.mark.parametrize("with_z", [False, True])
def test_chunks_give_the_full_logits_loss_and_gradients(with_z):
    torch.manual_seed(0)
    h = torch.randn(100, 16, requires_grad=True)
    w = torch.randn(50, 16, requires_grad=True)
    targets = torch.randint(0, 50, (100,))
    targets[::7] = -100  # ignored (SFT's non-assistant tokens)
    logits = F.linear(h, w)
    full = F.cross_entropy(logits, targets, reduction="sum")
    full_z = torch.logsumexp(logits, -1).square().sum() if with_z else torch.zeros(())
    (full + full_z).backward()
    grads = h.grad.clone(), w.grad.clone()
    h.grad = w.grad = None
    nats, z = head_cross_entropy(h, w, targets, chunk=16, with_z=with_z)  # 7 chunks, the last one short
    (nats + z).backward()
    torch.testing.assert_close(nats, full, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(z, full_z, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(h.grad, grads[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w.grad, grads[1], rtol=1e-5, atol=1e-5)


def test_the_model_given_targets_returns_the_summed_loss_of_its_logits():
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=2, d_ff=64, logit_z_loss_coef=1e-3)
    torch.manual_seed(0)
    model = Transformer(cfg)
    tokens = torch.randint(0, 64, (3, 17))
    logits = model(tokens[:, :-1])
    z_from_logits = model.aux_loss()
    nats = model(tokens[:, :-1], targets_BT=tokens[:, 1:])
    expected = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten(), reduction="sum")
    torch.testing.assert_close(nats, expected, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(model.aux_loss(), z_from_logits, rtol=1e-6, atol=1e-8)


PEAK = """
import resource, sys, threading
import torch
from glasslab.model.head_loss import head_cross_entropy

def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()

tokens, width, vocab, chunk = map(int, sys.argv[1:])
torch.set_num_threads(1)
torch.manual_seed(0)
h = torch.randn(tokens, width, requires_grad=True)
w = (torch.randn(vocab, width) * 0.02).requires_grad_()
targets = torch.randint(0, vocab, (tokens,))
# Once to warm up: the first pass also sets up the allocator's arenas and BLAS buffers, which stay.
head_cross_entropy(h, w, targets, chunk=chunk)[0].backward()
h.grad = w.grad = None
before, peak, done = resident(), [0], threading.Event()

def sample():
    while not done.wait(0.0005):
        peak[0] = max(peak[0], resident())

sampler = threading.Thread(target=sample)
sampler.start()
nats, _ = head_cross_entropy(h, w, targets, chunk=chunk)
nats.backward()
done.set()
sampler.join()
print(peak[0] - before, nats.item())
"""


def _peak_growth(tokens: int, width: int, vocab: int, chunk: int) -> tuple[int, float]:
    """(bytes by which the resident set, sampled every 0.5 ms, rises above its level before one forward
    and backward of the loss; the loss), in a fresh process warmed up by the same pass."""
    # Blocks from 64 KiB up are mapped and unmapped one by one, so the resident set follows what is live
    # (glibc's default keeps freed blocks of a few MB for reuse, and how many it keeps varies).
    done = subprocess.run([sys.executable, "-c", PEAK, *map(str, (tokens, width, vocab, chunk))],
                          env=subprocess_env(MALLOC_MMAP_THRESHOLD_="65536"), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    grown, loss = done.stdout.split()
    return int(grown), float(loss)


@pytest.mark.skipif(sys.platform != "linux", reason="reads the resident set from /proc")
def test_chunked_loss_peaks_at_a_fraction_of_the_full_logits_memory():
    """2,048 tokens at an 8,192 vocabulary: 64 MB per copy of the logits, of which training through
    full logits keeps several; in chunks of 256 tokens a copy is 8 MB."""
    full, full_loss = _peak_growth(2048, 64, 8192, chunk=2048)
    chunked, chunked_loss = _peak_growth(2048, 64, 8192, chunk=256)
    assert full > 128 * 2**20, full  # at least two copies of the logits were resident
    assert chunked < 0.25 * full, (chunked, full)
    assert chunked_loss == pytest.approx(full_loss, rel=1e-5)
