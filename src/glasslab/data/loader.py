"""The training loader: a deterministic, resumable stream of packed sequences, split across ranks.

The global stream is defined without reference to ranks. For optimiser step ``s`` a generator seeded
by ``(seed, s)`` draws a domain for each of the ``global_batch`` sequences from the weights in force
(domains at their epoch cap drop out). A domain's stream is its documents (each ending in
``<|endoftext|>``) concatenated in an order shuffled afresh every epoch, cut into windows of
``seq_len + 1`` tokens, so sequences pack documents back to back and span document boundaries. A
domain's next sequence is the next window in a second per-epoch shuffle, of the windows: read in
order, one long unusual document (a table of numbers, a codec map) filled the rows of several
consecutive batches, each out of the spike guard's band, and rolled small runs back; shuffled, its
windows are spread over the epoch. A domain's cursor is the number of its stream tokens consumed;
sequences do not overlap, and the few tokens after an epoch's last whole window are not read.

State is therefore global — the step and one cursor per domain — and every rank computes the whole
step's draw and takes rows ``[rank * B, (rank + 1) * B)``. Ranks get disjoint, gap-free slices of the
same global batch, and a resume may change ``world_size`` as long as ``global_batch`` stays.

While the trainer computes a step, a background thread already reads the next one (``prefetch``),
into pinned host memory when the batches go to a GPU (``pin_memory``: the copy to the device then
runs asynchronously). The read-ahead is of the step that follows the loader's state, never part of
it: ``state_dict()`` counts only the batches returned, and a read-ahead that no longer follows the
state (after ``load_state_dict`` or ``skip``) is dropped, so resume stays exact.
"""

from __future__ import annotations

import bisect
import itertools
import zlib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from glasslab.data.buckets import plan_buckets
from glasslab.data.config import DataConfig
from glasslab.data.handle import DatasetHandle, open_dataset
from glasslab.data.mixture import check_mixture, weights_at
from glasslab.data.shards import Shard, open_shard
from glasslab.errors import UserError

STATE_VERSION = 1


class DataExhausted(UserError):
    """Every domain with weight has reached its epoch cap; no further batch can be drawn."""


class DomainStream:
    """One bucket's training tokens as an endless stream, its documents reshuffled each epoch: a domain's
    documents, or a subset of them (``documents``: a content cluster's, ``data/buckets.py``)."""

    def __init__(self, shard: Shard, seed: int, domain: str, documents: np.ndarray | None = None) -> None:
        self.shard = shard
        self._documents = documents
        self.document_lengths = shard.lengths
        """Tokens of each document of the domain's shard (end-of-text included), by index in the shard."""
        self._starts = shard.ends - self.document_lengths
        self._lengths = self.document_lengths if documents is None else self.document_lengths[documents]
        self.tokens_per_epoch = shard.num_tokens if documents is None else int(self._lengths.sum())
        self._key = zlib.crc32(domain.encode())
        self._seed = seed
        self._orders: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._window_orders: dict[tuple[int, int], np.ndarray] = {}

    def _order(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """Document permutation of ``epoch`` (positions in the bucket) and the cumulative token ends in that order."""
        if epoch not in self._orders:
            if len(self._orders) >= 2:
                self._orders.pop(min(self._orders))
            perm = np.random.default_rng([self._seed, self._key, epoch]).permutation(len(self._lengths))
            self._orders[epoch] = (perm, np.cumsum(self._lengths[perm]))
        return self._orders[epoch]

    def epoch_documents(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """The documents of ``epoch`` in stream order (indices in the domain's shard) and their token ends."""
        perm, cum_ends = self._order(epoch)
        return (perm if self._documents is None else self._documents[perm]), cum_ends

    def read_window(self, index: int, window: int) -> np.ndarray:
        """The ``index``-th sequence of ``window`` tokens: a window of its epoch's stream, in the epoch's
        shuffled window order."""
        return self.read(self.window_start(index, window), window)

    def window_order(self, epoch: int, window: int) -> np.ndarray:
        """The order in which ``epoch``'s whole windows of ``window`` tokens are read (window indices)."""
        key = (epoch, window)
        if key not in self._window_orders:
            if len(self._window_orders) >= 2:
                self._window_orders.pop(min(self._window_orders))
            rng = np.random.default_rng([self._seed, self._key, epoch, window])
            self._window_orders[key] = rng.permutation(self.tokens_per_epoch // window)
        return self._window_orders[key]

    def window_start(self, index: int, window: int) -> int:
        """Stream position of the ``index``-th sequence of ``window`` tokens."""
        epoch, rank = divmod(index, self.tokens_per_epoch // window)
        return epoch * self.tokens_per_epoch + int(self.window_order(epoch, window)[rank]) * window

    def tokens_read(self, consumed: int, window: int) -> np.ndarray:
        """Tokens of each document of the domain's shard (by index) held by the windows of ``window`` tokens
        a cursor at ``consumed`` stream tokens has read: exact, from the per-epoch orders alone."""
        per_epoch = self.tokens_per_epoch // window
        read = np.zeros(len(self.document_lengths), np.int64)
        windows = consumed // window
        for epoch in range(-(-windows // per_epoch)):
            starts = np.sort(self.window_order(epoch, window)[: min(per_epoch, windows - epoch * per_epoch)]) * window
            documents, ends = self.epoch_documents(epoch)
            held = _covered(ends, starts, window) - _covered(ends - self.document_lengths[documents], starts, window)
            np.add.at(read, documents, held)
        return read

    def pieces(self, position: int, count: int) -> Iterator[tuple[int, int, int]]:
        """``(document, offset in it, tokens)`` of each document the ``count`` tokens of the stream from
        ``position`` run through, in order; ``document`` is its index in the domain's shard."""
        while count > 0:
            epoch, offset = divmod(position, self.tokens_per_epoch)
            perm, cum_ends = self._order(epoch)
            k = int(np.searchsorted(cum_ends, offset, side="right"))
            local = int(perm[k])
            within = offset - (int(cum_ends[k]) - int(self._lengths[local]))
            take = min(count, int(self._lengths[local]) - within)
            yield (local if self._documents is None else int(self._documents[local])), within, take
            count -= take
            position += take

    def read(self, position: int, count: int) -> np.ndarray:
        """``count`` tokens of the stream starting at stream position ``position``."""
        out = np.empty(count, dtype=np.int64)
        filled = 0
        for doc, within, take in self.pieces(position, count):
            start = int(self._starts[doc]) + within
            out[filled : filled + take] = self.shard.tokens[start : start + take]
            filled += take
        return out


def _covered(positions: np.ndarray, starts: np.ndarray, window: int) -> np.ndarray:
    """Tokens before each of ``positions`` inside the disjoint windows of ``window`` tokens at sorted ``starts``."""
    before = np.searchsorted(starts, positions, side="left")  # windows starting before the position
    last = starts[np.maximum(before - 1, 0)] if len(starts) else np.zeros_like(positions)
    return np.where(before > 0, window * (before - 1) + np.minimum(positions - last, window), 0)


@dataclass
class _ReadAhead:
    """The batch of the step after (``step``, ``cursors``), being read by the loader's thread."""

    step: int
    cursors: dict[str, int]
    future: Future  # -> (batch, domains of its rows, cursors after the step)


class Loader:
    """Batches of ``(global_batch // world_size, seq_len + 1)`` token ids for one data-parallel rank.

    ``prefetch``: read the next step's batch in a background thread while this one trains;
    ``pin_memory``: return batches in pinned host memory (for an asynchronous copy to a GPU; needs CUDA);
    ``dataset``: the handle of ``data_cfg.path`` when the caller holds it (else it is opened here).
    Raises :class:`~glasslab.errors.UserError` at construction for a missing dataset, an empty
    mixture, an unknown domain, or a batch that does not split evenly over ranks.
    """

    def __init__(
        self, data_cfg: DataConfig, seq_len: int, global_batch: int, rank: int = 0, world_size: int = 1,
        *, prefetch: bool = True, pin_memory: bool = False, dataset: DatasetHandle | None = None,
    ) -> None:
        if not data_cfg.path:
            raise UserError("data.path: empty; point it at a folder built by `glasslab data build`")
        if global_batch < 1 or world_size < 1 or global_batch % world_size:
            raise UserError(f"global batch {global_batch} does not split evenly over {world_size} rank(s)")
        if not 0 <= rank < world_size:
            raise UserError(f"rank {rank} is outside 0..{world_size - 1}")
        if seq_len < 1:
            raise UserError(f"seq_len={seq_len}: expected a positive number of tokens")
        self.cfg = data_cfg
        self.path = Path(data_cfg.path)
        dataset = dataset if dataset is not None else open_dataset(self.path)
        manifest = dataset.manifest
        check_mixture(data_cfg.mixture, manifest["domains"])
        self.manifest_hash = dataset.manifest_hash
        self.vocab_size: int = manifest["vocab_size"]
        self.eot_id: int = manifest["eot_id"]
        self.seq_len, self.global_batch = seq_len, global_batch
        self.rank, self.world_size = rank, world_size
        self.rows_per_rank = global_batch // world_size
        self.buckets = plan_buckets(data_cfg, {d: e["train"]["tokens"] for d, e in manifest["domains"].items()},
                                    seq_len + 1)
        """The streams drawn from (a domain's documents, or a content cluster's in it: ``data/buckets.py``)."""
        self._streams = self._open_streams(manifest)
        self.domains = sorted({b.domain for b in self.buckets.buckets})
        """The domains drawn from (the held-out evals' domains)."""
        self._domain_of = {b.name: b.domain for b in self.buckets.buckets}
        self._cap_tokens = {
            b.name: data_cfg.mixture.epoch_caps.get(b.domain, float("inf")) * self._streams[b.name].tokens_per_epoch
            for b in self.buckets.buckets
        }
        self.step = 0
        self.cursors = dict.fromkeys(self._streams, 0)
        """Stream tokens consumed, per bucket."""
        self.last_batch_domains: list[str] = []
        """Domain of each row of the last batch this rank returned."""
        self.pin_memory = pin_memory
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="glasslab-loader") if prefetch else None
        self._ahead: _ReadAhead | None = None

    def _open_streams(self, manifest: dict) -> dict[str, DomainStream]:
        """A stream per bucket, in draw order; one line for a domain shorter than one sequence."""
        streams, shards = {}, {}
        for bucket in self.buckets.buckets:
            if bucket.domain not in shards:
                shards[bucket.domain] = open_shard(self.path, bucket.domain, "train", manifest)
            shard = shards[bucket.domain]
            if shard.num_tokens < self.seq_len + 1:
                raise UserError(f"{self.path}: domain {bucket.domain!r} has {shard.num_tokens} training tokens, "
                                f"fewer than one sequence of {self.seq_len + 1}")
            streams[bucket.name] = DomainStream(shard, self.cfg.seed, bucket.name, bucket.documents)
        return streams

    # --- the global stream --------------------------------------------------------------------

    def weights_at(self, step: int) -> dict[str, float]:
        """Normalised domain weights in force at optimiser step ``step`` (configured, before caps); with
        cluster weights, each domain's summed bucket weight."""
        if self.cfg.mixture.clusters:
            return self.buckets.domain_weights_at(step)
        return weights_at(self.cfg.mixture, step)

    def domain_of(self, bucket: str) -> str:
        """The domain a bucket's documents are in."""
        return self._domain_of[bucket]

    def _draw(self) -> list[tuple[str, int]]:
        """(domain, stream position) of every sequence of the current step; advances the cursors.

        The cursors change only once the whole step is drawn, so a :class:`DataExhausted` leaves
        the state at the last complete step.
        """
        plan, self.cursors = self._plan(self.step, self.cursors)
        self.step += 1
        return plan

    def _plan(self, step: int, start: dict[str, int]) -> tuple[list[tuple[str, int]], dict[str, int]]:
        """(domain, stream position) of every sequence of ``step`` from cursors ``start``, and the
        cursors after it; changes nothing."""
        weights = self.buckets.weights_at(step)
        window = self.seq_len + 1
        uniforms = np.random.default_rng([self.cfg.seed, step]).random(self.global_batch)
        active = self._active(weights, start, step)
        # Every row at once, when no domain reaches its cap within the step (the rows would then be
        # drawn among the same domains one by one: the same picks, the same positions). A rebuilt
        # batch replays every earlier step's draw, so this is most of what `glasslab batch` costs.
        cumulative = np.add.accumulate([weights[d] for d in active])  # in order, as the loop sums
        picks = np.minimum(np.searchsorted(cumulative, uniforms * cumulative[-1], side="right"), len(active) - 1)
        counts = np.bincount(picks, minlength=len(active))
        if all(start[d] + (int(n) + 1) * window <= self._cap_tokens[d] for d, n in zip(active, counts, strict=True)):
            order = np.argsort(picks, kind="stable")
            rank_in_domain = np.empty(len(picks), dtype=np.int64)
            rank_in_domain[order] = np.arange(len(picks)) - np.repeat(np.cumsum(counts) - counts, counts)
            firsts = np.array([start[d] for d in active], dtype=np.int64)
            positions = (firsts[picks] + rank_in_domain * window).tolist()
            plan = [(active[j], p) for j, p in zip(picks.tolist(), positions, strict=True)]
            cursors = dict(start) | {d: start[d] + int(n) * window for d, n in zip(active, counts, strict=True)}
            return plan, cursors
        return self._plan_row_by_row(step, start, weights, uniforms)

    def _active(self, weights: dict[str, float], cursors: dict[str, int], step: int) -> list[str]:
        """The weighted domains with a whole window left before their cap."""
        window = self.seq_len + 1
        active = [d for d in self._streams if weights.get(d, 0.0) > 0 and cursors[d] + window <= self._cap_tokens[d]]
        if not active:
            raise DataExhausted(f"data exhausted at step {step}: every weighted domain reached its "
                                f"epoch cap ({dict(self.cfg.mixture.epoch_caps)})")
        return active

    def _plan_row_by_row(self, step: int, start: dict[str, int], weights: dict[str, float],
                         uniforms: np.ndarray) -> tuple[list[tuple[str, int]], dict[str, int]]:
        """:meth:`_plan` for a step in which a domain reaches its cap: the rows after it are drawn among
        the domains left."""
        window = self.seq_len + 1
        cursors = dict(start)
        plan: list[tuple[str, int]] = []
        active: list[str] = []
        for u in uniforms:
            if not active:  # (re)computed at the start and whenever a domain reaches its cap
                active = self._active(weights, cursors, step)
                cumulative = list(itertools.accumulate(weights[d] for d in active))
            index = min(bisect.bisect_right(cumulative, u * cumulative[-1]), len(active) - 1)
            domain = active[index]
            plan.append((domain, cursors[domain]))
            cursors[domain] += window
            if cursors[domain] + window > self._cap_tokens[domain]:
                active = []
        return plan, cursors

    def next_plan(self) -> list[tuple[str, int]]:
        """(domain, stream position) of every sequence of the next step, all ranks' rows; changes nothing."""
        return self._plan(self.step, self.cursors)[0]

    def row_documents(self, domain: str, position: int) -> list[tuple[int, int, np.ndarray]]:
        """The sequence a plan draws at ``position`` of ``domain``'s stream, as ``(document, offset in it,
        tokens)`` for each document it runs through."""
        stream, window = self._streams[domain], self.seq_len + 1
        pieces = stream.pieces(stream.window_start(position // window, window), window)
        return [(doc, within, np.asarray(stream.shard.document(doc)[within : within + take]))
                for doc, within, take in pieces]

    def tokens_read(self) -> dict[str, np.ndarray]:
        """Per domain, the tokens of each training document (by index) that the stream has read so far."""
        window = self.seq_len + 1
        read = {}
        for name, stream in self._streams.items():
            mine = stream.tokens_read(self.cursors[name], window)
            domain = self._domain_of[name]
            read[domain] = read[domain] + mine if domain in read else mine
        return read

    def document_tokens(self, domain: str, document: int) -> int:
        """Length of a training document of ``domain``, its end-of-text token included."""
        return int(self._streams[domain].document_lengths[document])

    def _read_step(self, step: int, cursors: dict[str, int]) -> tuple[torch.Tensor, list[str], dict[str, int]]:
        """This rank's batch of ``step`` from ``cursors``, its rows' domains, and the cursors after it."""
        plan, after = self._plan(step, cursors)
        mine = plan[self.rank * self.rows_per_rank : (self.rank + 1) * self.rows_per_rank]
        window = self.seq_len + 1
        batch = torch.from_numpy(np.stack([self._streams[d].read_window(pos // window, window) for d, pos in mine]))
        return (batch.pin_memory() if self.pin_memory else batch), [self._domain_of[d] for d, _ in mine], after

    def next_batch(self) -> torch.Tensor:
        """This rank's rows of the next step: LongTensor ``(global_batch // world_size, seq_len + 1)``."""
        ahead = self._take_read_ahead()
        if ahead is not None and (ahead.step, ahead.cursors) == (self.step, self.cursors):
            batch, self.last_batch_domains, cursors = ahead.future.result()  # its DataExhausted, if any
        else:
            batch, self.last_batch_domains, cursors = self._read_step(self.step, self.cursors)
        self.step, self.cursors = self.step + 1, cursors
        if self._reader is not None:
            self._ahead = _ReadAhead(self.step, dict(cursors),
                                     self._reader.submit(self._read_step, self.step, dict(cursors)))
        return batch

    def _take_read_ahead(self) -> _ReadAhead | None:
        """The read-ahead, once its thread is done with it: one reader at a time, so the streams'
        caches are never touched by two threads at once."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.future.exception()  # waits; an error is raised by whoever uses the batch
        return ahead

    def __iter__(self) -> Iterator[torch.Tensor]:
        while True:
            yield self.next_batch()

    def skip(self, n_steps: int) -> None:
        """Advance past ``n_steps`` optimiser steps without reading their tokens (e.g. past bad data)."""
        self._take_read_ahead()
        for _ in range(n_steps):
            self._draw()

    def epochs(self) -> dict[str, float]:
        """Passes taken over each domain's training tokens so far."""
        read, tokens = dict.fromkeys(self.domains, 0), dict.fromkeys(self.domains, 0)
        for name, stream in self._streams.items():
            read[self._domain_of[name]] += self.cursors[name]
            tokens[self._domain_of[name]] += stream.tokens_per_epoch
        return {d: read[d] / tokens[d] for d in self.domains}

    # --- resume -------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Global position of the stream (independent of rank and world size)."""
        return {
            "version": STATE_VERSION,
            "step": self.step,
            "cursors": dict(self.cursors),
            "seed": self.cfg.seed,
            "seq_len": self.seq_len,
            "global_batch": self.global_batch,
            "manifest_hash": self.manifest_hash,
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue the global stream from ``state``; refuses a state from another dataset or shape."""
        for key, mine in (
            ("manifest_hash", self.manifest_hash),
            ("seq_len", self.seq_len),
            ("global_batch", self.global_batch),
            ("seed", self.cfg.seed),
        ):
            if state.get(key) != mine:
                raise UserError(f"loader state: {key}={state.get(key)!r} does not match this run's {mine!r}")
        self._take_read_ahead()
        self.step = int(state["step"])
        self.cursors = dict.fromkeys(self._streams, 0) | {d: int(c) for d, c in state["cursors"].items()}


# --- evaluation -------------------------------------------------------------------------------


def eval_batches(
    dataset_dir: str | Path, domain: str, seq_len: int, batch_size: int, max_tokens: int = 0
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Held-out batches of ``domain``: (tokens, scored), LongTensor and BoolTensor ``(B, seq_len + 1)``,
    B <= ``batch_size``; ``scored`` says which tokens a held-out loss counts as targets (all of them in a
    dataset built without the flags).

    Consecutive non-overlapping windows of the eval shard in stored order, up to ``max_tokens``
    tokens (0 = all of it); the same every call. Fails when the eval shard is shorter than a window.
    """
    shard = open_shard(dataset_dir, domain, "eval")
    window = seq_len + 1
    num_windows = shard.num_tokens // window
    if max_tokens:
        num_windows = min(num_windows, max(max_tokens // window, 1))
    if num_windows == 0:
        raise UserError(
            f"{dataset_dir}: eval split of {domain!r} has {shard.num_tokens} tokens, "
            f"fewer than one window of {window}"
        )
    for first in range(0, num_windows, batch_size):
        rows = min(batch_size, num_windows - first)
        span = slice(first * window, (first + rows) * window)
        flat = np.asarray(shard.tokens[span], dtype=np.int64)
        scored = np.ones(len(flat), dtype=bool) if shard.scored is None else np.array(shard.scored[span])
        yield torch.from_numpy(flat.reshape(rows, window)), torch.from_numpy(scored.reshape(rows, window))


def eval_bytes_per_token(dataset_dir: str | Path, domain: str) -> float:
    """UTF-8 bytes of eval text per eval token (end-of-text ids counted as tokens).

    Bits per byte = loss (nats/token) / ln 2 / this.
    """
    shard = open_shard(dataset_dir, domain, "eval")
    return shard.bytes / max(shard.num_tokens, 1)
