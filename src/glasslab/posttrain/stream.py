"""The stream a tuning loader serves: one fixed set of items (SFT rows, DPO pairs), epoch after epoch.

The stream is global, as in the pretraining loader: epoch ``e`` serves every item once in an order the
subclass draws from ``(seed, e)``; step ``s`` takes the next ``global_batch`` items (running into the next
epoch when one ends) and each data-parallel rank its slice. Its state is (epoch, item, step) and whatever
a subclass counts beside it; a resume checks that the set and the batch are the ones the state was saved
with. No mixture: ``weights_at`` is empty and ``epochs`` names the one set.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from glasslab.errors import UserError

STATE_VERSION = 1


class EpochStream:
    """The trainer's loader interface (``next_batch``, ``skip``, ``weights_at``, ``epochs``,
    ``state_dict``/``load_state_dict``) over a fixed set; a subclass gives :meth:`items_of_epoch`,
    :meth:`next_batch` (from :meth:`draw` and :meth:`mine`) and the state it adds."""

    name: ClassVar[str]
    """The set as ``mixture/epochs/<name>`` and error messages call it (``sft``, ``dpo``)."""

    def __init__(self, global_batch: int, seed: int, rank: int, world_size: int) -> None:
        if global_batch < 1 or world_size < 1 or global_batch % world_size:
            raise UserError(f"global batch {global_batch} does not split evenly over {world_size} rank(s)")
        self.global_batch, self.seed = global_batch, seed
        self.rank, self.per_rank = rank, global_batch // world_size
        self.epoch, self.row, self.step = 0, 0, 0

    def items_of_epoch(self, epoch: int) -> list[Any]:
        """Every item of ``epoch``, in the order they are served."""
        raise NotImplementedError

    def next_batch(self) -> Any:
        raise NotImplementedError

    def draw(self) -> list[Any]:
        """The items of the next step (every rank's); advances the position."""
        chosen: list[Any] = []
        while len(chosen) < self.global_batch:
            items = self.items_of_epoch(self.epoch)
            take = items[self.row : self.row + self.global_batch - len(chosen)]
            chosen.extend(take)
            self.row += len(take)
            if self.row >= len(items):
                self.epoch, self.row = self.epoch + 1, 0
        self.step += 1
        return chosen

    def mine(self, chosen: list[Any]) -> list[Any]:
        """This rank's slice of a step's items."""
        return chosen[self.rank * self.per_rank : (self.rank + 1) * self.per_rank]

    def __iter__(self) -> Iterator[Any]:
        while True:
            yield self.next_batch()

    def skip(self, n_steps: int) -> None:
        """Advance past ``n_steps`` optimiser steps without serving them."""
        for _ in range(n_steps):
            self.draw()

    def weights_at(self, step: int) -> dict[str, float]:
        """No mixture: one set."""
        return {}

    def epochs(self) -> dict[str, float]:
        """Passes over the set so far (as ``mixture/epochs/<name>``)."""
        return {self.name: self.epoch + self.row / len(self.items_of_epoch(self.epoch))}

    def identity(self) -> dict[str, Any]:
        """What a saved state must match to be resumed here (the subclass adds its set's size and shape)."""
        return {"seed": self.seed, "global_batch": self.global_batch}

    def counters(self) -> dict[str, int]:
        """The position: epoch, item within it, step (the subclass adds what it counts)."""
        return {"epoch": self.epoch, "row": self.row, "step": self.step}

    def state_dict(self) -> dict:
        return {"version": STATE_VERSION, **self.counters(), **self.identity()}

    def load_state_dict(self, state: dict) -> None:
        for key, value in self.identity().items():
            if state.get(key) != value:
                raise UserError(f"{self.name.upper()} loader state: {key}={state.get(key)!r} does not match this "
                                f"run's {value!r}")
        for key in self.counters():
            setattr(self, key, int(state[key]))
