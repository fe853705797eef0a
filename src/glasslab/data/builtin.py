"""Built-in corpora from what every glasslab install already has: Python's standard library and the
packages glasslab itself depends on. They need no network.

The same Python and package versions yield the same documents everywhere: files are visited in sorted
order and nothing depends on the machine beyond the installed versions, which the dataset manifest
records with each corpus's licence. Corpora (``SourceConfig.path`` of a ``builtin`` source):

- ``stdlib_code``: standard-library modules, one document per source file;
- ``stdlib_prose``: English prose from docstrings and comment blocks of standard-library modules;
- ``pydoc_topics``: the language reference topics that ``help()`` shows (``pydoc_data.topics``);
- ``<package>_code`` and ``<package>_prose`` for each of glasslab's own dependencies
  (:data:`PACKAGES`: ``numpy_code``, ``torch_prose``, …): the package's Python source files as its
  installation lists them (its RECORD), and the docstrings and comment blocks of those files.

Tests, files describing how this particular interpreter was built (``_sysconfigdata*``, ``config-*/``),
anything installed into the standard library's site-packages, and machine-generated modules (a
generator's note in the first lines: the codec tables of ``encodings/``, ``pydoc_data/topics.py``,
serialized patterns) are left out. Generated tables are not language, and the loader reads a document
as consecutive sequences: a 13 KB codec table filled every code row of three consecutive batches of a
tiny rung, out of the spike guard's band each time, and rolled it back. Code and prose of one
package come from disjoint halves of its module list, so a held-out docstring cannot leak into the
training code domain (and the other way round) and decontamination has nothing to remove there.

A corpus whose files are not there fails in one line: some distributions ship parts of the standard
library (``pydoc_data``, tests, docs) as separate packages, and a dependency may be missing from a
hand-made environment.
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
import platform
import re
import sysconfig
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from glasslab.errors import UserError

STDLIB_LICENCE = "PSF-2.0"
STDLIB_CORPORA = ("stdlib_code", "stdlib_prose", "pydoc_topics")
PACKAGES = {
    "datasketch": "datasketch",
    "matplotlib": "matplotlib",
    "numpy": "numpy",
    "pyarrow": "pyarrow",
    "pyyaml": "PyYAML",
    "rich": "rich",
    "safetensors": "safetensors",
    "scipy": "scipy",
    "starlette": "starlette",
    "tokenizers": "tokenizers",
    "torch": "torch",
    "uvicorn": "uvicorn",
    "zstandard": "zstandard",
}
"""Corpus prefix → distribution name: glasslab's required dependencies (pyproject.toml), so every
install that can run glasslab has their sources."""
EXCLUDED_DIRS = {
    "test",
    "tests",
    "testing",
    "idle_test",
    "site-packages",
    "dist-packages",
    "__pycache__",
    "lib2to3",
    "ensurepip",
    "turtledemo",
}
KIND_WORDS = {
    "code": "source files",
    "prose": "docstrings and comments",
    "topics": "pydoc_data.topics (language reference topics)",
}
GENERATED_NOTE = re.compile(r"auto-?generated|automatically generated|generated (from|by) \S+\.(py|txt)\b|"
                            r"with gencodec\.py|do not edit", re.IGNORECASE)
"""How generators mark their output near the top of a module."""
GENERATED_HEAD_CHARS = 600
MIN_PROSE_CHARS = 200
"""Prose documents shorter than this (a module with one short docstring) are skipped."""


def corpus_names() -> tuple[str, ...]:
    """Every built-in corpus name, the standard library's first."""
    packages = tuple(f"{prefix}_{kind}" for prefix in PACKAGES for kind in ("code", "prose"))
    return STDLIB_CORPORA + packages


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_modules() -> list[Path]:
    """Every standard-library ``.py`` file outside test and vendored folders, sorted by relative path."""
    root = stdlib_dir()
    files = []
    for folder, subfolders, names in os.walk(root):
        # Pruning here, not filtering afterwards: site-packages alone can be hundreds of MB.
        subfolders[:] = [d for d in subfolders if d not in EXCLUDED_DIRS and not d.startswith("config-")]
        # _sysconfigdata* records how this interpreter was built (paths, flags): machine-specific.
        files.extend(
            Path(folder) / name
            for name in names
            if name.endswith(".py") and not name.startswith("_sysconfigdata")
        )
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def _distribution(corpus: str) -> importlib.metadata.Distribution:
    name = PACKAGES[corpus.rpartition("_")[0]]
    try:
        return importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        raise UserError(f"built-in corpus {corpus}: package {name} is not installed "
                        f"(pip install {name}, or drop the source)") from None


def package_modules(corpus: str) -> list[tuple[str, Path]]:
    """(path inside site-packages, file) of every ``.py`` file the package's installation lists, tests
    left out, sorted by that path. A listed file that is missing fails: the install is damaged."""
    dist = _distribution(corpus)
    if dist.files is None:
        raise UserError(f"built-in corpus {corpus}: {dist.metadata['Name']} {dist.version} lists no files "
                        "(no RECORD in its installation); reinstall it with pip")
    modules = []
    for file in dist.files:
        parts = file.parts
        if file.suffix != ".py" or parts[0] == ".." or set(parts[:-1]) & EXCLUDED_DIRS:
            continue
        path = Path(file.locate())
        if not path.is_file():
            raise UserError(f"built-in corpus {corpus}: {path} is listed by {dist.metadata['Name']} "
                            f"{dist.version} but missing; reinstall it")
        modules.append((file.as_posix(), path))
    if not modules:
        raise UserError(f"built-in corpus {corpus}: {dist.metadata['Name']} {dist.version} has no Python files")
    return sorted(modules)


def _stdlib_files() -> list[tuple[str, Path]]:
    root = stdlib_dir()
    files = [(p.relative_to(root).as_posix(), p) for p in stdlib_modules()]
    if not files:
        raise UserError(f"built-in corpus stdlib_code/stdlib_prose: no standard-library sources under {root} "
                        "(this Python ships without them)")
    return files


def _generated(source: str) -> bool:
    """Whether a module says near its top that a program wrote it."""
    return GENERATED_NOTE.search(source[:GENERATED_HEAD_CHARS]) is not None


def _half(relative: str, which: int) -> bool:
    """Whether a file belongs to half ``which`` (0 = code, 1 = prose) by a stable hash of its path."""
    return zlib.crc32(relative.encode()) % 2 == which


def _docstrings(source: str) -> list[str]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    nodes = [tree] + [
        n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    ]
    found = []
    for node in nodes:
        text = ast.get_docstring(node, clean=True)
        if text:
            found.append(text)
    return found


def _comment_blocks(source: str) -> list[str]:
    """Runs of at least two consecutive full-line comments, joined into paragraphs."""
    blocks, current = [], []
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") and not stripped.startswith("#!"):
            current.append(stripped.lstrip("#").strip())
            continue
        if len(current) >= 2:
            blocks.append(" ".join(w for w in current if w))
        current = []
    return blocks


def _prose_of(source: str) -> str | None:
    text = "\n\n".join(_docstrings(source) + _comment_blocks(source))
    return text if len(text) >= MIN_PROSE_CHARS else None


def _topics() -> dict[str, str]:
    try:
        from pydoc_data.topics import topics
    except ImportError:
        raise UserError("built-in corpus pydoc_topics: this Python has no pydoc_data module (some "
                        "distributions ship it as a separate package); install it or drop the source") from None
    return topics


def _check(corpus: str) -> None:
    if corpus not in corpus_names():
        raise UserError(f"built-in corpus {corpus!r}: expected one of {', '.join(corpus_names())}")


@dataclass(frozen=True)
class Unit:
    """One input of a built-in corpus that gives at most one document: a module file, or a reference topic."""

    name: str
    """The module (``json.encoder``) or topic (``pydoc_data.topics:assert``) the document comes from."""
    path: str
    """The file (empty for a topic)."""
    size: int
    """Bytes to read (the file's size, or the topic's text), for cutting the corpus into tasks."""


def module_name(relative: str) -> str:
    """``json/encoder.py`` → ``json.encoder``; a package's ``__init__.py`` is the package."""
    parts = relative.removesuffix(".py").split("/")
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def units(corpus: str) -> list[Unit]:
    """The corpus's units in its fixed order: the files of its half (code or prose) of the module list, or
    the reference topics by name."""
    _check(corpus)
    if corpus == "pydoc_topics":
        topics = _topics()
        return [Unit(f"pydoc_data.topics:{name}", "", len(topics[name].encode())) for name in sorted(topics)]
    files = _stdlib_files() if corpus in STDLIB_CORPORA else package_modules(corpus)
    which = 0 if corpus.endswith("_code") else 1
    return [Unit(module_name(relative), str(path), path.stat().st_size)
            for relative, path in files if _half(relative, which)]


def unit_document(corpus: str, unit: Unit) -> str | None:
    """The document ``unit`` gives, or None: a machine-generated module, or prose too short to keep."""
    if not unit.path:
        return _topics()[unit.name.partition(":")[2]]
    source = Path(unit.path).read_text(encoding="utf-8", errors="replace")
    if _generated(source):
        return None
    return source if corpus.endswith("_code") else _prose_of(source)


def documents(corpus: str) -> Iterator[str]:
    """Documents of built-in ``corpus`` (see the module docstring), in a fixed order."""
    for unit in units(corpus):
        text = unit_document(corpus, unit)
        if text is not None:
            yield text


def describe(corpus: str) -> dict[str, str]:
    """``{"package", "version", "licence", "provenance"}`` of a built-in corpus: what the manifest records
    so the corpus can be rebuilt (same package versions, same documents). Never where the package is
    installed: the manifest's hash names the dataset, and the same build on another machine must match."""
    _check(corpus)
    contents = KIND_WORDS[corpus.rpartition("_")[2]]
    if corpus in STDLIB_CORPORA:
        version = platform.python_version()
        contents = contents if corpus == "pydoc_topics" else f"standard-library {contents}"
        return {"package": "python", "version": version, "licence": STDLIB_LICENCE,
                "provenance": f"CPython {version} {contents}"}
    dist = _distribution(corpus)
    name = dist.metadata["Name"]
    return {"package": name, "version": dist.version, "licence": _licence(dist),
            "provenance": f"{name} {dist.version} {contents}"}


def _licence(dist: importlib.metadata.Distribution) -> str:
    """The distribution's SPDX ``License-Expression``, else a one-line ``License`` field, else its licence
    classifier (some projects paste the whole licence text into ``License``)."""
    meta = dist.metadata
    if meta.get("License-Expression"):
        return meta["License-Expression"]
    field = (meta.get("License") or "").strip()
    if field and "\n" not in field and len(field) <= 64:
        return field
    classifiers = [c.rpartition(" :: ")[2] for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
    return "; ".join(classifiers) or "unknown"
