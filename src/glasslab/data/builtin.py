"""Built-in corpora taken only from Python's own distribution, so they need no network.

The same Python version yields the same documents everywhere: files are visited in sorted order and
nothing depends on the machine beyond the standard library that ships with the interpreter (the
version is recorded in the dataset manifest). Three domains of real text:

- ``stdlib_code``: standard-library modules, one document per source file;
- ``stdlib_prose``: English prose from docstrings and comment blocks of standard-library modules;
- ``pydoc_topics``: the language reference topics that ``help()`` shows (``pydoc_data.topics``).

Files describing how this particular interpreter was built (``_sysconfigdata*``, ``config-*/``)
are left out, as are tests and anything installed into site-packages.

Code and prose come from disjoint halves of the module list, so a held-out docstring cannot leak into
the training code domain (and the other way round) and decontamination has nothing to remove there.
"""

from __future__ import annotations

import ast
import os
import platform
import sysconfig
import zlib
from collections.abc import Iterator
from pathlib import Path

LICENCE = "PSF-2.0"
EXCLUDED_DIRS = {
    "test",
    "tests",
    "idle_test",
    "site-packages",
    "dist-packages",
    "__pycache__",
    "lib2to3",
    "ensurepip",
    "turtledemo",
}
MIN_PROSE_CHARS = 200
"""Prose documents shorter than this (a module with one short docstring) are skipped."""


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def provenance(corpus: str) -> str:
    where = {
        "stdlib_code": "standard-library source files",
        "stdlib_prose": "standard-library docstrings and comments",
        "pydoc_topics": "pydoc_data.topics (language reference topics)",
    }[corpus]
    return f"CPython {platform.python_version()} {where} ({stdlib_dir()})"


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


def _half(path: Path, which: int) -> bool:
    """Whether ``path`` belongs to half ``which`` (0 = code, 1 = prose) by a stable hash of its name."""
    return zlib.crc32(path.relative_to(stdlib_dir()).as_posix().encode()) % 2 == which


def code_documents() -> Iterator[str]:
    for path in stdlib_modules():
        if _half(path, 0):
            yield path.read_text(encoding="utf-8", errors="replace")


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


def prose_documents() -> Iterator[str]:
    for path in stdlib_modules():
        if not _half(path, 1):
            continue
        source = path.read_text(encoding="utf-8", errors="replace")
        text = "\n\n".join(_docstrings(source) + _comment_blocks(source))
        if len(text) >= MIN_PROSE_CHARS:
            yield text


def topic_documents() -> Iterator[str]:
    from pydoc_data.topics import topics

    for name in sorted(topics):
        yield topics[name]


def documents(corpus: str) -> Iterator[str]:
    """Documents of built-in ``corpus`` (stdlib_code, stdlib_prose or pydoc_topics), in a fixed order."""
    return {"stdlib_code": code_documents, "stdlib_prose": prose_documents, "pydoc_topics": topic_documents}[
        corpus
    ]()
