"""The data map's pretrained embedders: a lab model's mean-pooled hidden states (``model:RUN@STEP``) and a local
sentence-transformers folder (a tiny one this test builds and saves; nothing is downloaded)."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from glasslab.cli import main as cli_main
from glasslab.config import from_dict
from glasslab.data.map import DOCUMENTS_FILE, decode_documents, map_plan, read_map
from glasslab.evals.map_model import ModelEmbedder, model_map_plan
from glasslab.lab import run_one_step
from glasslab.train.run import train
from glasslab.train.run_config import RunConfig
from train_data import build_tiny_dataset, tiny_run_config


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """The tiny dataset and a 4-step run trained on it, in one lab."""
    root = tmp_path_factory.mktemp("embedders")
    dataset = build_tiny_dataset(root)
    train(from_dict(RunConfig, tiny_run_config(dataset, max_steps=4, sample_prompts=[], checkpoint_interval=2)),
          root / "tiny")
    return root, dataset


def test_a_lab_model_maps_the_data_the_same_on_one_and_two_workers(lab, tmp_path, capsys):
    root, dataset = lab
    one = run_one_step(model_map_plan(dataset, "model:tiny", root, k=3, num_workers=1, progress=False), root)
    two = run_one_step(model_map_plan(dataset, "model:tiny@4", root, k=3, num_workers=2, progress=False,
                                      backend="local"), tmp_path)
    assert one.folder.name == two.folder.name  # named by run and step: the newest checkpoint is step 4
    assert pq.read_table(one.folder / DOCUMENTS_FILE).equals(pq.read_table(two.folder / DOCUMENTS_FILE))
    capsys.readouterr()
    assert cli_main(["data", "map", str(dataset), "--lab", str(root), "--k", "3", "--embedder", "model:tiny",
                     "--quiet"]) == 0  # the command plans the very same step
    assert "(mapped before: cached)" in capsys.readouterr().out
    summary = read_map(one.folder, dataset)
    assert summary["settings"]["embedder"] == "model:tiny@4" and summary["settings"]["dims"] == 32  # d_model
    assert 2 <= summary["k"] <= 3 and sum(c["documents"] for c in summary["clusters"]) == summary["documents"]
    other = run_one_step(model_map_plan(dataset, "model:tiny@2", root, k=3, num_workers=2, progress=False,
                                        backend="local"), root)
    assert other.folder != one.folder  # another checkpoint, another map
    assert pq.read_table(other.folder / DOCUMENTS_FILE).num_rows == pq.read_table(one.folder / DOCUMENTS_FILE).num_rows


def test_a_documents_vector_does_not_depend_on_its_batch(lab):
    root, dataset = lab
    embedder = ModelEmbedder(str(root / "tiny"))
    texts = decode_documents(str(dataset), [("code", "train", 0), ("prose", "train", 0), ("code", "train", 1)])
    together = embedder.embed(texts)
    alone = np.concatenate([embedder.embed([t]) for t in texts])
    assert together.shape == (3, 32) and np.allclose(np.linalg.norm(together, axis=1), 1, atol=1e-5)
    assert np.allclose(together, alone, atol=1e-5)  # right padding changes nothing it pools
    assert not np.allclose(together[0], together[1], atol=1e-3)


def test_a_local_sentence_transformers_folder_embeds_the_map(lab, tmp_path, monkeypatch):
    pytest.importorskip("sentence_transformers")
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import BertConfig, BertModel, BertTokenizerFast

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing may be fetched
    _, dataset = lab
    hf = tmp_path / "bert"
    hf.mkdir()
    words = ["def", "self", "return", "the", "of", "and", "import", "class", "in", "is", "to", "a", "if", "for"]
    (hf / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]))
    BertTokenizerFast(vocab_file=str(hf / "vocab.txt")).save_pretrained(hf)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=5 + len(words), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32, max_position_embeddings=128)).save_pretrained(hf)
    folder = tmp_path / "tiny-st"
    modules = [Transformer(str(hf), max_seq_length=128), Pooling(16, "mean")]
    SentenceTransformer(modules=modules).save(str(folder))
    done = run_one_step(map_plan(dataset, k=3, embedder=str(folder), num_workers=1, progress=False), tmp_path / "lab")
    summary = read_map(done.folder, dataset)
    assert summary["settings"]["embedder"] == "st:tiny-st" and summary["settings"]["dims"] == 16
    assert done.value["documents"] == summary["documents"]
    step = map_plan(dataset, k=3, embedder=str(folder), progress=False)
    assert len(step.config.embedder_hash) == 64
    (folder / "README.md").write_text("changed")  # another folder's files: another map
    changed = map_plan(dataset, k=3, embedder=str(folder), progress=False)
    assert changed.config.embedder_hash != step.config.embedder_hash
