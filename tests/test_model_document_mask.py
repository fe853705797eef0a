"""Document-masked attention: packed documents compute exactly what they compute alone."""

import pytest
import torch

from glasslab.model import ModelConfig, MoEConfig, Transformer

CFGS = {
    "dense-gqa": ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48),
    "moe": ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, d_ff=48,
                       moe=MoEConfig(num_experts=4, top_k=2, d_expert=16)),
}


@pytest.mark.parametrize("name", sorted(CFGS))
def test_packed_documents_equal_each_document_alone(name):
    torch.manual_seed(0)
    model = Transformer(CFGS[name]).eval()
    lengths = [7, 12, 5, 8]
    docs = [torch.randint(0, 64, (n,)) for n in lengths]
    tokens = torch.cat(docs)[None]
    doc_ids = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])[None]
    with torch.no_grad():
        packed = model(tokens, doc_ids_BT=doc_ids)[0].split(lengths)
        alone = [model(doc[None])[0] for doc in docs]
        unmasked = model(tokens)[0].split(lengths)
    for p, a in zip(packed, alone, strict=True):
        torch.testing.assert_close(p, a, atol=2e-5, rtol=1e-5)
    # Without the mask the later documents do see the earlier ones: the mask is what keeps them apart.
    assert (unmasked[1] - alone[1]).abs().max() > 1e-3


def test_one_document_is_the_causal_path_and_gradients_stay_inside():
    torch.manual_seed(0)
    model = Transformer(CFGS["dense-gqa"])
    tokens = torch.randint(0, 64, (2, 16))
    torch.testing.assert_close(model(tokens, doc_ids_BT=torch.zeros(2, 16, dtype=torch.long)), model(tokens),
                               atol=1e-5, rtol=1e-5)
    doc_ids = (torch.arange(16) >= 9).long().expand(2, 16)
    embeddings = model.embed(tokens).detach().requires_grad_()
    model.embed.forward = lambda _tokens: embeddings  # differentiate with respect to the input embeddings
    model(tokens, doc_ids_BT=doc_ids)[:, 9:].sum().backward()
    assert embeddings.grad[:, :9].abs().max() == 0 and embeddings.grad[:, 9:].abs().max() > 0


def test_document_mask_refuses_a_cache():
    model = Transformer(CFGS["dense-gqa"])
    with pytest.raises(ValueError, match="one document at a time"):
        model(torch.zeros(1, 4, dtype=torch.long), model.new_kv_caches(1, 8), doc_ids_BT=torch.zeros(1, 4))
