"""A text traced to the training documents it copies: its spans as character offsets into the text.

:meth:`TokenIndex.trace <glasslab.data.token_index.TokenIndex.trace>` works on token ids; the pages and the
terminal show text. :class:`TextTracer` tokenizes a text with the dataset's tokenizer (keeping each token's
character offsets), traces the ids and answers each span with where it sits in the text, how often the
training data holds it (and the held-out split), and its documents: domain, index, provenance (the source
reference) and the document's text around the match — and, asked, the spans the held-out split holds, with
its documents (a text the model was not trained on says so). ``glasslab trace``, ``glasslab chat --trace``, the run
page's samples and the SFT page's replies all trace through it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from glasslab.data.token_index import Span, TokenIndex, default_cutoff

CONTEXT_TOKENS = 32
"""Tokens of a document shown on either side of a match."""
SHARD_SPLIT = {"train": "train", "heldout": "eval"}
"""The dataset's shard split that each of the index's splits was built from."""


def build_command(target: str, lab: str) -> str:
    """The command that builds the trace index of ``target``'s dataset (a run id or a dataset folder)."""
    return f"glasslab trace {target} --lab {lab}"


class TextTracer:
    """A dataset's index, tokenizer and provenance, opened once: :meth:`trace` for any number of texts."""

    def __init__(self, dataset_dir: str | Path, index: TokenIndex) -> None:
        from glasslab.data.provenance import ProvenanceIndex
        from glasslab.data.shards import read_manifest
        from glasslab.data.tokenizer import load_tokenizer, shard_encoder

        self.dataset = Path(dataset_dir)
        self.index = index
        self.tokenizer = shard_encoder(load_tokenizer(self.dataset))
        self.provenance = ProvenanceIndex(self.dataset) if "provenance" in read_manifest(self.dataset) else None

    def trace(self, text: str, min_tokens: int = 8, max_docs: int = 3,
              max_log10_unigram_prob: float | None = None, heldout: bool = False) -> dict[str, Any]:
        """``{"tokens", "min_tokens", "max_log10_unigram_prob", "spans", "dropped_common"}`` for ``text``
        (see :meth:`TokenIndex.trace` for the cutoff). Each span: ``char_start``/``char_end`` (characters of
        ``text``, end exclusive), ``start``/``end`` (its tokens), ``text``, ``count``, ``heldout_count``,
        ``log10_unigram_prob`` and ``documents`` — each ``{"domain", "document", "source", "before", "after"}``,
        ``source`` the provenance record (None for a dataset built without it), ``before``/``after`` the
        document's text next to the match. With ``heldout``, also ``"heldout_spans"``: the spans the held-out
        split holds, the same way (``count`` there, ``documents`` held-out documents)."""
        if max_log10_unigram_prob is None:
            max_log10_unigram_prob = default_cutoff(min_tokens, self.index.typical_log10)
        encoding = self.tokenizer.encode(text, add_special_tokens=False)
        ids, offsets = encoding.ids, encoding.offsets
        spans, dropped = self.index.trace(ids, min_tokens, max_docs, max_log10_unigram_prob)
        traced = {"tokens": len(ids), "min_tokens": min_tokens,
                  "max_log10_unigram_prob": round(max_log10_unigram_prob, 3),
                  "spans": self._described(text, offsets, spans, "train"), "dropped_common": dropped}
        if heldout:
            held, _ = self.index.trace(ids, min_tokens, max_docs, max_log10_unigram_prob, split="heldout")
            traced["heldout_spans"] = self._described(text, offsets, held, "heldout")
        return traced

    def _described(self, text: str, offsets: list, spans: list[Span], split: str) -> list[dict[str, Any]]:
        """Spans found in ``split`` (``train`` or ``heldout``) as characters of ``text`` with their documents."""
        found = self.index.split(split)
        out = []
        for span in spans:
            char_start, char_end = offsets[span.start][0], offsets[span.end - 1][1]
            documents = []
            for (domain, document), hit in zip(span.documents, span.hits, strict=True):
                before, after = found.around(hit, span.end - span.start, CONTEXT_TOKENS)
                documents.append({
                    "domain": domain, "document": document,
                    "source": self.provenance.record(domain, SHARD_SPLIT[split], document) if self.provenance else None,
                    "before": self.tokenizer.decode(before.tolist()), "after": self.tokenizer.decode(after.tolist())})
            out.append({"char_start": char_start, "char_end": char_end, "start": span.start, "end": span.end,
                        "text": text[char_start:char_end], "count": span.count, "heldout_count": span.heldout_count,
                        "log10_unigram_prob": round(span.log10_unigram_prob, 2), "documents": documents})
        return out
