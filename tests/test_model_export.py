"""The Hugging Face export loads offline in `transformers` and reproduces our logits (fp32, ≤ 1e-4); read back
as our model (``model.load``) it is the model it was made from, bit for bit."""

import json
import warnings

import pytest
import torch
import transformers

from glasslab.errors import UserError
from glasslab.model import ModelConfig, MoEConfig, Transformer, export_hf
from glasslab.model.load import find_model, load_model

BASE = dict(vocab_size=96, d_model=32, n_heads=4, n_kv_heads=2, d_ff=48, init_std=0.2, rope_theta=500.0)
CASES = {
    "LlamaForCausalLM": ModelConfig(**BASE, n_layers=2, qk_norm=False),
    "Qwen3ForCausalLM": ModelConfig(**BASE, n_layers=2, tie_embeddings=True),
    "Glm4MoeForCausalLM": ModelConfig(
        **BASE,
        n_layers=3,
        moe=MoEConfig(num_experts=6, top_k=2, d_expert=16, first_k_dense=1, routed_scaling_factor=2.5),
    ),
    "Glm4MoeForCausalLM-no-shared": ModelConfig(
        **BASE,
        n_layers=2,
        qk_norm=False,
        moe=MoEConfig(num_experts=4, top_k=3, d_expert=16, num_shared_experts=0),
    ),
    "Qwen3MoeForCausalLM": ModelConfig(
        **BASE,
        n_layers=3,
        moe=MoEConfig(
            num_experts=6,
            top_k=2,
            d_expert=16,
            num_shared_experts=0,
            router="softmax",
            balancing="none",
            first_k_dense=1,
        ),
    ),
}


def _tokenizer_dir(path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(96)} | {"[UNK]": 95}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(path)
    return path


@pytest.mark.parametrize("name", sorted(CASES))
def test_export_loads_offline_and_logits_match(name, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = CASES[name]
    torch.manual_seed(0)
    model = Transformer(cfg)
    if cfg.moe is not None and cfg.moe.balancing != "none":
        for block in model.blocks[cfg.moe.first_k_dense :]:
            block.ffn.router.bias.copy_(torch.randn(cfg.moe.num_experts) * 0.1)  # as if balanced for a while
    out = tmp_path / "hf"
    tokens = torch.randint(0, 96, (2, 24))
    manifest = export_hf(model, cfg, _tokenizer_dir(tmp_path / "tok"), out, check_tokens=tokens[:1])
    assert manifest["architecture"] == name.split("-")[0]
    assert 0 <= manifest["max_logit_diff"] <= 1e-4
    assert set(manifest["files"]) >= {"config.json", "model.safetensors", "tokenizer.json"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert type(hf).__name__ == name.split("-")[0]
    with torch.no_grad():
        ours, theirs = model.eval()(tokens), hf(tokens).logits
    assert ours.abs().max() > 1.0  # logits large enough that a wrong mapping would show
    assert (ours - theirs).abs().max().item() <= 1e-4
    assert transformers.AutoTokenizer.from_pretrained(out)("w3 w7")["input_ids"] == [3, 7]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp folder left
    # And back: what SFT or chat from an export loads is the model itself (the mapping's exact inverse).
    source = find_model(str(out))
    assert (source.kind, source.model_config, source.tokenizer) == ("export", cfg, out)
    back = load_model(source).state_dict()
    assert all(torch.equal(t, back[k]) for k, t in model.state_dict().items())


@pytest.mark.parametrize(
    ("moe", "why"),
    [
        (MoEConfig(capacity_factor=1.25), "model.moe.capacity_factor=1.25"),
        (MoEConfig(router="softmax", num_shared_experts=0), "model.moe.balancing='sign'"),
        (MoEConfig(router="softmax", balancing="none"), "model.moe.num_shared_experts=1"),
    ],
)
def test_configs_no_class_represents_are_refused_in_one_line(moe, why, tmp_path):
    cfg = ModelConfig(vocab_size=32, d_model=16, n_layers=1, n_heads=2, d_ff=8, moe=moe)
    with pytest.raises(UserError) as err:
        export_hf(Transformer(cfg), cfg, None, tmp_path / "hf")
    assert why in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "hf").exists()


def _tiny():
    cfg = ModelConfig(vocab_size=96, d_model=16, n_layers=1, n_heads=2, d_ff=16)
    return Transformer(cfg), cfg


def test_export_refuses_a_folder_of_unrelated_files_and_leaves_it_as_it_was(tmp_path):
    model, cfg = _tiny()
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    with pytest.raises(UserError) as err:
        export_hf(model, cfg, None, out)
    assert "not empty and not an earlier export" in str(err.value) and "notes.txt" in str(err.value)
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "my notes"
    assert [p.name for p in tmp_path.iterdir()] == ["mine"]  # no staging folder left beside it


def test_exporting_again_over_an_earlier_export_replaces_only_its_files(tmp_path):
    from glasslab.layout import EXPORT_MANIFEST
    from glasslab.model.export import copy_export

    model, cfg = _tiny()
    out = tmp_path / "hf"
    first = export_hf(model, cfg, None, out, record={"run": "a"})
    (out / "user-notes.md").write_text("kept")
    (out / "extra.bin").write_bytes(b"x")
    torch.nn.init.normal_(model.embed.weight)
    second = export_hf(model, cfg, None, out, record={"run": "b"})
    assert second["files"]["model.safetensors"]["sha256"] != first["files"]["model.safetensors"]["sha256"]
    assert (out / "user-notes.md").read_text() == "kept" and (out / "extra.bin").exists()
    assert json.loads((out / EXPORT_MANIFEST).read_text())["run"] == "b"
    copied = copy_export(out, tmp_path / "copy")
    assert copied == second and sorted(p.name for p in (tmp_path / "copy").iterdir()) == sorted(
        [*second["files"], EXPORT_MANIFEST])
