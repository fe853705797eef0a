"""Configs of the data part: what a dataset build reads and keeps, and what a training run mixes.

``BuildConfig`` is what ``glasslab data build CONFIG`` builds (sources → processing → tokenizer →
shards); ``DataConfig`` is the ``data`` section of a training run (a built dataset folder plus a
mixture of its domains). Both are frozen dataclasses on :mod:`glasslab.config`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from glasslab.config import UNVERSIONED, VERSIONED_WHEN_SET, apply_overrides, from_dict, read_file, require
from glasslab.data.builtin import corpus_names
from glasslab.errors import UserError
from glasslab.store.url import is_url, local_folder

DOMAIN_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


FILTER_PRESETS = ("prose", "code", "none")
"""Filter rule sets a source may pick (``SourceConfig.filters``); see :mod:`glasslab.data.filters`."""
CODE_EXTENSIONS = (".py", ".pyi", ".c", ".h", ".cc", ".cpp", ".hpp", ".java", ".js", ".ts", ".go", ".rs", ".rb",
                   ".sh", ".jl", ".scala", ".kt", ".swift", ".m", ".cs", ".php", ".lua", ".r", ".sql")
"""A ``text`` source whose ``pattern`` ends in one of these holds source code."""


@dataclass(frozen=True)
class SourceConfig:
    """One input of a build: a file set or a built-in corpus, feeding one domain."""

    name: str = ""
    """Short name shown in the report (defaults to the domain)."""
    domain: str = "text"
    """Domain the documents go to; shards and mixtures are per domain."""
    kind: Literal["jsonl", "parquet", "text", "builtin", "hf"] = "builtin"
    """jsonl (plain, .gz, .zst), parquet, text (a folder of text files), builtin, hf (a locally cached
    Hugging Face dataset)."""
    path: str = ""
    """File, folder or glob (jsonl/parquet/text); dataset name (hf); corpus name (builtin: stdlib_code,
    stdlib_prose, pydoc_topics, or <package>_code / <package>_prose of a glasslab dependency such as
    numpy_code; see glasslab.data.builtin)."""
    text_field: str = "text"
    """Field (JSONL key or Parquet column) holding the document text."""
    pattern: str = "**/*.txt"
    """Glob for files inside a text folder."""
    split: str = "train"
    """Split of an hf dataset."""
    max_documents: int = 0
    """Stop reading after this many documents (0 = no cap)."""
    max_bytes: int = 0
    """Stop reading after this many UTF-8 bytes of text (0 = no cap)."""
    filters: Literal["", "prose", "code", "none"] = ""
    """Quality rules for this source: ``prose`` (Gopher/C4 word-shape rules), ``code`` (The Stack /
    StarCoder file rules), ``none``; empty picks by what the source holds: ``code`` for a built-in
    ``*_code`` corpus, a domain named ``code``, or a text folder of source files (its pattern ends in
    ``.py``, ``.c``, ...), else ``prose``."""
    skip_filters: tuple[str, ...] = ()
    """Rules of the source's preset not applied to it (by name, e.g. ``duplicate_lines``)."""
    licence: str = "unknown"
    """Licence of the text, carried into the report."""
    provenance: str = ""
    """Where the text comes from, carried into the report (built-in corpora fill it in)."""

    def __post_init__(self) -> None:
        from glasslab.data.filters import ALL_FILTER_NAMES

        require(
            bool(DOMAIN_PATTERN.match(self.domain)),
            "source.domain",
            self.domain,
            "a name of letters, digits, '_', '-' or '.'",
        )
        require(self.max_documents >= 0, "source.max_documents", self.max_documents, "an integer >= 0")
        require(self.max_bytes >= 0, "source.max_bytes", self.max_bytes, "an integer >= 0")
        require(bool(self.path), "source.path", self.path, "a path, dataset or corpus name")
        if self.kind == "builtin":
            require(self.path in corpus_names(), "source.path", self.path, "one of " + ", ".join(corpus_names()))
        for name in self.skip_filters:
            require(name in ALL_FILTER_NAMES, "source.skip_filters", name, "one of " + ", ".join(ALL_FILTER_NAMES))

    @property
    def label(self) -> str:
        return self.name or f"{self.domain}:{self.path}"

    @property
    def preset(self) -> str:
        """The filter preset in force: ``filters`` when set, else chosen from the corpus, domain or pattern."""
        if self.filters:
            return self.filters
        code = (
            (self.kind == "builtin" and self.path.endswith("_code"))
            or self.domain == "code"
            or (self.kind == "text" and self.pattern.lower().endswith(CODE_EXTENSIONS))
        )
        return "code" if code else "prose"


@dataclass(frozen=True)
class ProseFilterConfig:
    """Gopher/C4-style quality thresholds for natural language; a document failing one is dropped and counted
    under its name."""

    min_words: int = 20
    """length: fewer words than this is dropped."""
    max_words: int = 200_000
    """length: more words than this is dropped."""
    min_mean_word_length: float = 3.0
    """mean_word_length: lower bound in characters."""
    max_mean_word_length: float = 10.0
    """mean_word_length: upper bound in characters."""
    max_symbol_ratio: float = 0.1
    """symbol_ratio: ('#' and '...') per word."""
    min_alpha_ratio: float = 0.7
    """alpha_ratio: fraction of words with at least one letter."""
    max_duplicate_line_fraction: float = 0.3
    """duplicate_lines: fraction of lines that repeat an earlier line."""
    max_top_ngram_fraction: float = 0.2
    """top_ngram: characters covered by the most frequent word 2-gram (Gopher's 2-gram bound)."""
    max_duplicate_ngram_fraction: float = 0.15
    """duplicate_ngrams: characters inside repeated word 5-grams."""

    def __post_init__(self) -> None:
        require(
            0 <= self.min_words <= self.max_words,
            "filters.prose.min_words",
            self.min_words,
            "0 <= min_words <= max_words",
        )
        for name in (
            "max_symbol_ratio",
            "min_alpha_ratio",
            "max_duplicate_line_fraction",
            "max_top_ngram_fraction",
            "max_duplicate_ngram_fraction",
        ):
            value = getattr(self, name)
            require(0.0 <= value <= 1.0, f"filters.prose.{name}", value, "a fraction in [0, 1]")


@dataclass(frozen=True)
class CodeFilterConfig:
    """Source-file rules after The Stack and StarCoder; a file failing one is dropped and counted under its name."""

    min_lines: int = 3
    """code_size: fewer non-blank lines than this is dropped (an empty ``__init__.py`` teaches nothing)."""
    max_bytes: int = 1_000_000
    """code_size: a file larger than this (UTF-8 bytes) is dropped (The Stack's 1 MB bound)."""
    autogenerated_lines: int = 5
    """autogenerated: a generator's note ("auto-generated", "do not edit", ...) in this many first lines drops
    the file (StarCoder)."""
    max_line_length: int = 1000
    """max_line_length: a line longer than this (characters) drops the file (minified or data)."""
    max_mean_line_length: float = 100.0
    """mean_line_length: mean characters per line above this drops the file."""
    min_alphanumeric_fraction: float = 0.25
    """alphanumeric_fraction: fewer letters and digits than this share of the characters drops the file."""
    max_encoded_fraction: float = 0.5
    """encoded_data: base64, hex or escaped-byte runs covering more than this share of the characters drop
    the file (StarCoder)."""
    max_encoded_run: int = 1024
    """encoded_data: one such run longer than this (characters) drops the file."""

    def __post_init__(self) -> None:
        require(self.min_lines >= 0, "filters.code.min_lines", self.min_lines, "an integer >= 0")
        require(self.max_bytes > 0, "filters.code.max_bytes", self.max_bytes, "a positive byte count")
        require(self.max_line_length > 0, "filters.code.max_line_length", self.max_line_length, "an integer > 0")
        for name in ("min_alphanumeric_fraction", "max_encoded_fraction"):
            value = getattr(self, name)
            require(0.0 <= value <= 1.0, f"filters.code.{name}", value, "a fraction in [0, 1]")


@dataclass(frozen=True)
class FilterConfig:
    """The thresholds of each filter preset (a source picks its preset: ``SourceConfig.filters``)."""

    prose: ProseFilterConfig = field(default_factory=ProseFilterConfig)
    """Natural-language rules (Gopher, C4)."""
    code: CodeFilterConfig = field(default_factory=CodeFilterConfig)
    """Source-code rules (The Stack, StarCoder)."""


@dataclass(frozen=True)
class DedupConfig:
    """Exact (content hash) and near (MinHash LSH candidates, verified word-shingle Jaccard) duplicate removal."""

    exact: bool = True
    """Drop documents whose normalised text another document has (the first in canonical order stays)."""
    near: bool = True
    """Drop documents joined to an earlier one by pairs whose word-shingle Jaccard reaches ``threshold``."""
    threshold: float = 0.8
    """Jaccard similarity of two documents' word-shingle sets at which they are duplicates; LSH finds the
    candidate pairs, the exact Jaccard of their shingles decides."""
    num_perm: int = 64
    """MinHash permutations per signature; the LSH bands and rows are derived from it and ``threshold``
    (:func:`glasslab.data.dedup.lsh_bands`)."""
    shingle_words: int = 5
    """Words per shingle."""

    def __post_init__(self) -> None:
        require(0.0 < self.threshold <= 1.0, "dedup.threshold", self.threshold, "a number in (0, 1]")
        require(self.num_perm >= 16, "dedup.num_perm", self.num_perm, "an integer >= 16")
        require(self.shingle_words >= 1, "dedup.shingle_words", self.shingle_words, "an integer >= 1")


@dataclass(frozen=True)
class EvalSplitConfig:
    """The held-out split per domain, and which of its tokens overlap training (left out of its loss)."""

    fraction: float = 0.05
    """Share of each domain's documents held out (chosen by a seeded hash of the text)."""
    min_documents: int = 2
    """At least this many eval documents per domain."""
    min_bytes: int = 50_000
    """Keep adding eval documents (in split-key order) until they hold this much UTF-8 text, so even a
    domain of a few documents gives enough eval windows; bounded by ``max_documents``."""
    max_documents: int = 200
    """At most this many eval documents per domain."""
    ngram_words: int = 13
    """Eval tokens inside a word n-gram of this length that a training document holds too are left out of
    the held-out loss (the training document stays)."""
    common_ngram_documents: int = 10
    """An eval n-gram found in more than this many training documents is boilerplate (a licence header,
    a generated docstring), not a leak, and stays counted (0: every shared n-gram is left out)."""

    def __post_init__(self) -> None:
        require(0.0 <= self.fraction < 1.0, "eval.fraction", self.fraction, "a fraction in [0, 1)")
        require(
            0 <= self.min_documents <= self.max_documents,
            "eval.min_documents",
            self.min_documents,
            "0 <= min_documents <= max_documents",
        )
        require(self.ngram_words >= 4, "eval.ngram_words", self.ngram_words, "an integer >= 4")
        require(self.common_ngram_documents >= 0, "eval.common_ngram_documents", self.common_ngram_documents,
                "an integer >= 0")


@dataclass(frozen=True)
class TokenizerConfig:
    """The byte-level BPE trained on a sample of the processed training text."""

    vocab_size: int = 4096
    """Total vocabulary including the 256 byte symbols and the special tokens."""
    sample_bytes: int = 4_000_000
    """UTF-8 bytes of training text the BPE is trained on, split evenly over domains."""
    min_frequency: int = 2
    """Pairs seen fewer times are not merged."""

    def __post_init__(self) -> None:
        require(
            300 <= self.vocab_size <= 2**32 - 1, "tokenizer.vocab_size", self.vocab_size, "an integer >= 300"
        )
        require(self.sample_bytes > 0, "tokenizer.sample_bytes", self.sample_bytes, "a positive byte count")


def _demo_sources() -> tuple[SourceConfig, ...]:
    return (
        SourceConfig(domain="code", kind="builtin", path="stdlib_code"),
        SourceConfig(domain="prose", kind="builtin", path="stdlib_prose"),
        SourceConfig(domain="reference", kind="builtin", path="pydoc_topics"),
    )


@dataclass(frozen=True)
class BuildConfig:
    """What ``glasslab data build`` makes: sources → processing → tokenizer → shards (+ report)."""

    sources: tuple[SourceConfig, ...] = field(default_factory=_demo_sources)
    """Inputs; the default is the demo build (three built-in domains from Python's own distribution)."""
    filters: FilterConfig = field(default_factory=FilterConfig)
    """Quality filter thresholds of each preset."""
    dedup: DedupConfig = field(default_factory=DedupConfig)
    """Exact and near duplicate removal."""
    eval: EvalSplitConfig = field(default_factory=EvalSplitConfig)
    """Held-out split per domain and decontamination."""
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    """Byte-level BPE."""
    seed: int = 0
    """Seeds the eval split, the report's samples and nothing else (the build is otherwise ordered)."""
    samples_per_domain: int = 3
    """Random documents per domain shown in the report."""
    num_workers: int = field(default=0, metadata=UNVERSIONED)
    """Tasks run at once in every stage (0 = the CPUs available: this process's CPU affinity, or the Ray
    cluster's CPUs); 1 runs every task in this process."""
    backend: Literal["", "local", "ray"] = field(default="", metadata=UNVERSIONED)
    """Where the tasks run: ``local`` processes or ``ray`` tasks; empty: Ray when this build is a step the
    lab's Ray backend runs (``glasslab run ... --backend ray``), else local processes."""
    ray_address: str = field(default="", metadata=UNVERSIONED)
    """With ``backend: ray``, the cluster to join (what ``ray.init(address=...)`` takes); empty starts a local
    Ray (or joins the one the lab's step runs on)."""
    strict: bool = field(default=False, metadata=UNVERSIONED)
    """Fail on the first malformed record (or invalid UTF-8) instead of skipping (replacing) and counting it."""
    skip_bad_files: bool = field(default=False, metadata=UNVERSIONED)
    """Leave a damaged input file (truncated .gz/.zst, unreadable Parquet, UTF-16) out whole, and say
    so, instead of failing the build; such files are checked whole before they are read."""
    progress: bool = field(default=True, metadata=UNVERSIONED)
    """Progress lines on stderr; what the build skipped or replaced is said either way."""

    def __post_init__(self) -> None:
        require(len(self.sources) > 0, "sources", list(self.sources), "at least one source")
        require(self.num_workers >= 0, "num_workers", self.num_workers, "an integer >= 0 (0: the CPUs available)")
        require(not self.ray_address or self.backend != "local", "ray_address", self.ray_address,
                "no address with backend 'local'")
        require(
            self.samples_per_domain >= 0, "samples_per_domain", self.samples_per_domain, "an integer >= 0"
        )
        labels = [s.label for s in self.sources]
        require(len(set(labels)) == len(labels), "sources", labels, "distinct source names")


@dataclass(frozen=True)
class PhaseConfig:
    """From optimiser step ``start_step`` on, the mixture uses ``weights``."""

    start_step: int = 0
    """First optimiser step of the phase."""
    weights: dict[str, float] = field(default_factory=dict)
    """Domain → weight (normalised over domains; a domain left out gets 0)."""

    def __post_init__(self) -> None:
        require(self.start_step >= 0, "mixture.phases.start_step", self.start_step, "an integer >= 0")
        _check_weights(self.weights, f"mixture.phases[start_step={self.start_step}].weights")


@dataclass(frozen=True)
class MixtureConfig:
    """Domains with weights, optional phases that change them, and per-domain epoch caps."""

    weights: dict[str, float] = field(default_factory=dict)
    """Domain → weight in force until the first phase starts (normalised over domains); when empty,
    the first phase's weights apply from step 0."""
    phases: tuple[PhaseConfig, ...] = ()
    """Later weight sets, in increasing ``start_step``."""
    epoch_caps: dict[str, float] = field(default_factory=dict)
    """Domain → most epochs over its training tokens; a capped-out domain drops out of the mixture."""
    clusters: dict[str, float] = field(default_factory=dict, metadata=VERSIONED_WHEN_SET)
    """Content cluster of the run's data map (``data.map``) → weight, in every phase: a cluster's id (``"3"``),
    its name or one of its top terms, or ``"*"`` for every cluster not named (``{"*": 1}``: uniform over
    clusters). Without domain weights a cluster's weight is split over the domains holding it by its tokens
    there; with them, each domain's weight is split over its clusters by these (``data/buckets.py``)."""

    def __post_init__(self) -> None:
        _check_weights(self.weights, "mixture.weights")
        _check_weights(self.clusters, "mixture.clusters")
        starts = [p.start_step for p in self.phases]
        require(starts == sorted(set(starts)), "mixture.phases", starts, "strictly increasing start_step")
        for domain, cap in self.epoch_caps.items():
            require(cap > 0, f"mixture.epoch_caps.{domain}", cap, "a number of epochs > 0")

    def weight_sets(self) -> list[tuple[int, dict[str, float]]]:
        """(start_step, weights) pairs in force over training, the base weights first."""
        sets = [(0, dict(self.weights))] if self.weights else []
        for phase in self.phases:
            if sets and sets[0][0] == phase.start_step:
                sets.pop(0)
            sets.append((phase.start_step, dict(phase.weights)))
        return sets

    def domains(self) -> set[str]:
        """Every domain the mixture names anywhere."""
        names = set(self.weights) | set(self.epoch_caps)
        for phase in self.phases:
            names |= set(phase.weights)
        return names


@dataclass(frozen=True)
class DataConfig:
    """The ``data`` section of a training run: which dataset (a build to run, or a built folder) and how
    to mix its domains."""

    build: str = ""
    """A data build to train on, run first as a dependency step unless already built: ``demo`` (the
    built-in three domains) or a build config file (relative to the run config's folder)."""
    path: str = ""
    """Or: a dataset folder already built by ``glasslab data build`` (holds manifest.json)."""
    mixture: MixtureConfig = field(default_factory=MixtureConfig)
    """Domain weights, phases and epoch caps."""
    seed: int = 0
    """Seeds document order per epoch and the domain drawn for each sequence."""
    map: str = field(default="", metadata=VERSIONED_WHEN_SET)
    """The data map whose clusters ``mixture.clusters`` weights: a map step's folder name (``map-<hash8>``,
    what ``glasslab data map`` prints) beside the dataset's folder, or a path to one."""

    def __post_init__(self) -> None:
        require(not (self.mixture.clusters and not self.map), "data.mixture.clusters", dict(self.mixture.clusters),
                "a data.map to take the clusters from (glasslab data map DATASET)")
        require(not (self.build and self.path), "data.build", self.build,
                f"either data.build or data.path, not both (data.path={self.path!r})")


def _check_weights(weights: dict[str, float], key: str) -> None:
    for domain, weight in weights.items():
        require(weight >= 0, f"{key}.{domain}", weight, "a weight >= 0")


FILE_KINDS = ("jsonl", "parquet", "text")
"""Source kinds whose ``path`` names files (the others name a dataset or a built-in corpus)."""


def load_build_config(path: str | Path | None, overrides: Iterable[str] = ()) -> BuildConfig:
    """A BuildConfig from a YAML/JSON file plus dotted overrides (None: the defaults).

    A relative source ``path`` in the file (a file, folder or glob of the ``jsonl``, ``parquet`` and
    ``text`` kinds) is taken relative to the config file's folder, not to the current folder, so a
    config and its data can move together and be built from anywhere.
    """
    data: dict[str, Any] = {}
    if path is not None:
        data = read_file(path)
        folder = Path(path).resolve().parent
        sources = data.get("sources")
        if isinstance(sources, list):
            data["sources"] = [_resolve_source(source, folder, f"{path}: sources[{i}].path")
                               for i, source in enumerate(sources)]
    return from_dict(BuildConfig, apply_overrides(data, overrides))


def _resolve_source(source: Any, folder: Path, field: str) -> Any:
    if not isinstance(source, dict) or source.get("kind", "builtin") not in FILE_KINDS:
        return source
    where = source.get("path")
    if isinstance(where, str) and where.startswith("file://"):
        return {**source, "path": local_folder(where)}
    if isinstance(where, str) and is_url(where):
        raise UserError(f"{field}: {where!r} is on object storage, which a build does not read its sources from "
                        "yet; expected a local file, folder or glob (copy the files to a local folder first)")
    if not isinstance(where, str) or not where or Path(where).expanduser().is_absolute():
        return source
    return {**source, "path": str(folder / where)}
