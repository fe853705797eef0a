"""The data map by a lab model: each document embedded as the mean of a model's final hidden states.

``glasslab data map DATASET --embedder model:RUN[@STEP]`` maps the data "as the model sees it": the run's
checkpoint (``model/load.py``; default its newest) reads each document's first tokens (its own tokenizer, up to
the context it trained at), and the final norm's output, averaged over the document's tokens and scaled to
unit length, is the document's vector. The map step is the data part's (``data/map.py``), handed this loader;
this module lives above both the data and the model parts, which may not import each other.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from glasslab.data.map import map_plan, map_step
from glasslab.data.map_cluster import unit_rows
from glasslab.data.map_pretrained import MODEL
from glasslab.data.tokenizer import EOT, load_tokenizer
from glasslab.lab import Step
from glasslab.model.load import find_model, load_model

BATCH_DOCUMENTS = 8


class ModelEmbedder:
    """``embed(texts) -> float32 (n, d_model)`` unit rows: a lab model's mean-pooled final hidden states."""

    def __init__(self, ref: str) -> None:
        source = find_model(ref)
        self.model = load_model(source)
        self.tokenizer = load_tokenizer(source.tokenizer)
        self.context = source.context or 512
        self.eot_id = self.tokenizer.token_to_id(EOT)

    @torch.no_grad()
    def embed(self, texts: list[str]) -> np.ndarray:
        ids = [encoding.ids[: self.context] or [self.eot_id] for encoding in self.tokenizer.encode_batch(texts)]
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # the same floats whatever the cores, as the other embedders
        try:
            pooled = [self._pooled(ids[i : i + BATCH_DOCUMENTS]) for i in range(0, len(ids), BATCH_DOCUMENTS)]
        finally:
            torch.set_num_threads(threads)
        return unit_rows(np.concatenate(pooled).astype(np.float32)) if pooled else np.zeros((0, 1), np.float32)

    def _pooled(self, batch: list[list[int]]) -> np.ndarray:
        """Mean final hidden state of each document of ``batch``, right-padded (causal: padding changes nothing
        before it, and is left out of the mean)."""
        longest = max(len(row) for row in batch)
        tokens_BT = torch.zeros(len(batch), longest, dtype=torch.long)
        real_BT = torch.zeros(len(batch), longest, dtype=torch.bool)
        for b, row in enumerate(batch):
            tokens_BT[b, : len(row)], real_BT[b, : len(row)] = torch.tensor(row), True
        captured = []
        hook = self.model.final_norm.register_forward_hook(lambda _m, _i, out: captured.append(out))
        try:
            self.model(tokens_BT, real_BT=real_BT)
        finally:
            hook.remove()
        hidden_BTD = captured[0].float()
        weights_BT1 = real_BT[:, :, None].float()
        return ((hidden_BTD * weights_BT1).sum(dim=1) / weights_BT1.sum(dim=1)).numpy()


def load_model_embedder(cfg) -> ModelEmbedder:
    """A map config's model embedder (``cfg.embedder_path``: the checkpoint reference)."""
    return ModelEmbedder(cfg.embedder_path)


def model_map_step(ctx) -> dict:
    """The map step with a lab model as its embedder."""
    return map_step(ctx, pretrained=load_model_embedder)


def model_map_plan(dataset_dir: str | Path, embedder: str, lab: str | Path | None, **settings) -> Step:
    """The map step of ``dataset_dir`` by the model ``embedder`` names (``model:RUN[@STEP]``, a run under ``lab``
    or a run folder): named by its run and step, hashed by its checkpoint's manifest."""
    source = find_model(embedder.removeprefix(MODEL), lab)
    return map_plan(dataset_dir, function=model_map_step, embedder=f"{MODEL}{source.name}",
                    embedder_path=source.ref, embedder_hash=source.sha256, **settings)
