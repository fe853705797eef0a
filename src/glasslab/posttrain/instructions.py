"""The built-in instruction set: conversations made from the built-in corpora (Python's own distribution).

Three kinds of question, each answered by text a person wrote for people:

- ``describe``: "What does `json.dumps` do?" → the first paragraph of its docstring (public functions,
  classes and methods of public standard-library modules);
- ``explain``: "Explain `assert` in Python." → the first prose paragraph of a pydoc reference topic, and of
  each titled section inside one;
- ``write``: "Write a Python function `name(args)`: <docstring summary>" → the function's source.

About a quarter of the functions that have both a summary and short source become one two-turn
conversation instead (describe, then "Show me its code."), and about one conversation in six opens
with a system message, so the set has multi-turn and system examples. The choices hash the function's
name, so the set is the same on every machine with the same Python version.
"""

from __future__ import annotations

import ast
import re
import zlib
from collections.abc import Iterator
from pathlib import Path

from glasslab.data.builtin import stdlib_dir, stdlib_modules

SYSTEM_PROMPT = "You are a helpful assistant who knows Python and its standard library."
MIN_SUMMARY_CHARS, MAX_SUMMARY_CHARS = 20, 400
MAX_CODE_CHARS = 600
"""Longer functions are left out of ``write``: at the demo's context they would not fit one sequence."""
KINDS = ("describe", "explain", "write", "describe+write")


def instruction_conversations(max_modules: int = 0) -> Iterator[dict]:
    """Records ``{"messages": [...], "kind": ...}``: the pydoc topics first, then module by module.

    ``max_modules`` > 0 reads only the first that many standard-library modules (sorted by path);
    parsing all of them takes tens of seconds on a small CPU.
    """
    yield from _topic_conversations()
    modules = _public_modules()
    for path, module in modules[:max_modules] if max_modules else modules:
        yield from _module_conversations(path, module)


def _conversation(kind: str, turns: list[tuple[str, str]], key: str) -> dict:
    messages = [{"role": "system", "content": SYSTEM_PROMPT}] if _bucket(key, "system") < 17 else []
    for question, answer in turns:
        messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    return {"messages": messages, "kind": kind}


def _bucket(key: str, salt: str) -> int:
    """A stable number in [0, 100) for ``key``."""
    return zlib.crc32(f"{salt}:{key}".encode()) % 100


# --- explain: pydoc reference topics ----------------------------------------------------------------

_UNDERLINE = re.compile(r"^([*=\-^~])\1{2,}$")


def _topic_conversations() -> Iterator[dict]:
    from pydoc_data.topics import topics

    for key in sorted(topics):
        sections = _sections(topics[key])
        for i, (title, paragraph) in enumerate(sections):
            if paragraph is None:
                continue
            subject = f"`{key}`" if i == 0 else _lower_first(title)
            yield _conversation("explain", [(f"Explain {subject} in Python.", paragraph)], f"{key}/{title}")


def _sections(text: str) -> list[tuple[str, str | None]]:
    """(title, first prose paragraph or None) of every underlined section of a reference topic."""
    lines = text.splitlines()
    found: list[tuple[str, str | None]] = []
    i = 0
    while i < len(lines):
        if i + 1 < len(lines) and lines[i].strip() and _UNDERLINE.match(lines[i + 1].strip()):
            title, i = lines[i].strip(), i + 2
            found.append((title, None))
            continue
        if found and found[-1][1] is None and lines[i].strip() and not lines[i].startswith(" "):
            block = []
            while i < len(lines) and lines[i].strip():
                block.append(lines[i])
                i += 1
            paragraph = " ".join(" ".join(block).split())
            if paragraph.endswith(":"):
                paragraph = paragraph[:-1] + "."
            if MIN_SUMMARY_CHARS <= len(paragraph) <= MAX_SUMMARY_CHARS and not block[0].startswith("*"):
                found[-1] = (found[-1][0], paragraph)
            continue
        i += 1
    return found


def _lower_first(title: str) -> str:
    """'Augmented assignment statements' → 'augmented assignment statements' (but 'JSON' stays)."""
    return title[0].lower() + title[1:] if len(title) > 1 and title[1].islower() else title


# --- describe and write: standard-library modules ------------------------------------------------------


def _public_modules() -> list[tuple[Path, str]]:
    """(file, dotted module name) of every public standard-library module, in path order."""
    root = stdlib_dir()
    out = []
    for path in stdlib_modules():
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts and not any(p.startswith("_") for p in parts):
            out.append((path, ".".join(parts)))
    return out


def _summary(node: ast.AST) -> str | None:
    """The first paragraph of a definition's docstring on one line, when it reads like a sentence."""
    doc = ast.get_docstring(node, clean=True)
    if not doc:
        return None
    summary = " ".join(doc.strip().split("\n\n")[0].split())
    if not MIN_SUMMARY_CHARS <= len(summary) <= MAX_SUMMARY_CHARS or not summary[0].isalpha():
        return None
    if "->" in summary or summary.count(" ") < 3:  # a signature line, or a fragment
        return None
    return summary


def _module_conversations(path: Path, module: str) -> Iterator[dict]:
    source = path.read_text(encoding="utf-8", errors="replace")
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            yield from _function_conversations(node, source, f"{module}.{node.name}")
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            name = f"{module}.{node.name}"
            summary = _summary(node)
            if summary:
                yield _conversation("describe", [(f"What is `{name}` for?", summary)], name)
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and not item.name.startswith("_"):
                    method = f"{name}.{item.name}"
                    summary = _summary(item)
                    if summary:
                        yield _conversation("describe", [(f"What does `{method}` do?", summary)], method)


def _function_conversations(node: ast.FunctionDef | ast.AsyncFunctionDef, source: str, name: str) -> Iterator[dict]:
    summary = _summary(node)
    if summary is None:
        return
    describe = (f"What does `{name}` do?", summary)
    code = ast.get_source_segment(source, node)
    if code is None or len(code) > MAX_CODE_CHARS or node.decorator_list:
        yield _conversation("describe", [describe], name)
        return
    answer = f"```python\n{code}\n```"
    if _bucket(name, "turns") < 25:
        yield _conversation("describe+write", [describe, ("Show me its code.", answer)], name)
        return
    yield _conversation("describe", [describe], name)
    signature = f"{node.name}({ast.unparse(node.args)})"
    yield _conversation("write", [(f"Write a Python function `{signature}`: {summary}", answer)], name)
