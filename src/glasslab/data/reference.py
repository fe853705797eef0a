"""A step's dataset named by what it is: a data build step's output, or a folder's manifest hash.

A training step's config (and a data map's) holds a :class:`DatasetRef`, not a path to strip from its run
config and put back:

- ``DatasetRef.of_build(step)``: the dataset is the output of the data build ``step`` (a dependency the
  executor runs first and whose folder it fills in, ``lab.inputs``); hashed as that step's name;
- ``DatasetRef.of_folder(path)``: a folder built by ``glasslab data build``, named by its manifest's sha256
  (which holds every shard's and the tokenizer's); where the folder lies is recorded, not hashed.

:meth:`DatasetRef.open` gives the dataset's handle (``data.handle``), checked against the hash it was planned on.
The reference's fields sit in the step's config beside its other fields (``config.INLINE``) under the names
``data_from``, ``data_manifest`` and ``data_path``, so a step's hash and ``step.json`` are what they were
when these were three fields of the training step's config (a map's, under the names its fields had:
``data/map.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from glasslab.config import UNVERSIONED
from glasslab.data.handle import DatasetHandle, open_dataset
from glasslab.errors import UserError
from glasslab.lab.inputs import NO_OUTPUT, StepOutput, output_of

if TYPE_CHECKING:
    from glasslab.lab.step import Step


@dataclass(frozen=True)
class DatasetRef:
    """A dataset: a build step's output (``data_from``), or a folder (``data_path``) with its manifest's hash."""

    data_from: StepOutput = NO_OUTPUT
    """The data build step whose output folder is the dataset (empty: a folder named by path)."""
    data_manifest: str = ""
    """sha256 of the folder's manifest: what the dataset is, and what the step's hash covers."""
    data_path: str = field(default="", metadata=UNVERSIONED)
    """Where that folder lies: recorded, not hashed (a lab moved whole keeps its runs' identities)."""

    def __bool__(self) -> bool:
        return bool(self.data_from or self.data_path)

    @classmethod
    def of_build(cls, step: Step) -> DatasetRef:
        return cls(data_from=output_of(step))

    @classmethod
    def of_folder(cls, path: str, dataset: DatasetHandle | None = None) -> DatasetRef:
        """The dataset built in ``path`` (``dataset``: its handle, when the caller opened it already), named by
        its manifest's hash; one line when the folder holds no dataset."""
        return cls(data_manifest=(dataset or open_dataset(path)).manifest_hash, data_path=path)

    @property
    def location(self) -> str:
        """Where the dataset lies: the build step's folder (the executor resolves it) or the path as given."""
        return str(self.data_from.folder) if self.data_from else self.data_path

    def open(self) -> DatasetHandle:
        """The dataset's handle, at :attr:`location`; a folder must still hold the dataset the step was planned on."""
        dataset = open_dataset(self.location)
        if self.data_manifest and dataset.manifest_hash != self.data_manifest:
            raise UserError(f"{dataset.path}: not the dataset this step was planned on (its manifest's sha256 "
                            "differs); rebuilt or replaced since?")
        return dataset


NO_DATASET = DatasetRef()
"""No dataset named by reference: the run config's own ``data.path`` names the folder (a bare RunConfig step)."""
