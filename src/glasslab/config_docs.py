"""A config as commented YAML: every key with its value and its field's docstring as the comment.

Config classes document each field with a docstring right below it (see :mod:`glasslab.config`). Python
keeps no such docstrings at run time, so they are read from the class's source with :mod:`ast`; a
commented config made from them cannot drift from the code. ``glasslab train --example`` prints one.
Like ``config``, this module imports no other part.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import json
import textwrap
import typing
from collections.abc import Mapping
from typing import Any

import yaml

from glasslab.config import to_dict

COMMENT_WIDTH = 100


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Field name → its docstring collapsed to one line, for a dataclass (inherited fields included)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        for node, after in zip(body, body[1:], strict=False):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                docs[node.target.id] = " ".join(after.value.value.replace("``", "`").split())
    return docs


def commented_yaml(cfg: Any, header: str = "") -> str:
    """``cfg`` (a config dataclass instance) as YAML that loads back to an equal config, each key preceded
    by its field's docstring as a ``#`` comment; ``header`` (plain text) opens the file as a comment."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    _emit(cfg, 0, lines)
    return "\n".join(lines) + "\n"


def _emit(cfg: Any, indent: int, lines: list[str]) -> None:
    docs = field_docs(type(cfg))
    hints = typing.get_type_hints(type(cfg))
    pad = " " * indent
    for field in dataclasses.fields(cfg):
        value = getattr(cfg, field.name)
        doc = docs.get(field.name)
        if doc:
            lines += [pad + "# " + line for line in textwrap.wrap(doc, COMMENT_WIDTH - indent)]
        if dataclasses.is_dataclass(value):
            lines.append(f"{pad}{field.name}:")
            _emit(value, indent + 2, lines)
            continue
        if _holds_dataclasses(value):
            lines.append(f"{pad}{field.name}:")
            lines += [f"{pad}  - {_flow(to_dict(item))}" for item in value]
            continue
        unused = _dataclass_in(hints[field.name]) if value is None or value == () else None
        if unused is not None:  # an empty section or list still shows its keys, as comments
            what = "Each item" if value == () else "Set it to a mapping"
            lines.append(f"{pad}# {what} with these keys (defaults shown):")
            _emit_commented(unused, indent, lines)
        lines.append(f"{pad}{field.name}: {_flow(to_dict(value))}")


def _emit_commented(cls: type, indent: int, lines: list[str]) -> None:
    """Every key of the config class ``cls`` as a comment line ``#   key: default  # doc`` (the defaults
    are read from the fields, not from an instance: a class may refuse its own defaults, as a task that
    must name a built-in or a file does)."""
    docs = field_docs(cls)
    for field in dataclasses.fields(cls):
        default = field.default_factory() if field.default is dataclasses.MISSING else field.default
        doc = docs.get(field.name, "")
        value = json.dumps(to_dict(default), ensure_ascii=False)  # JSON is YAML flow, on one line ("\n" escaped)
        lines.append(f"{' ' * indent}#   {field.name}: {value}  # {doc}".rstrip())


def _dataclass_in(annotation: Any) -> type | None:
    """The dataclass an annotation such as ``X | None`` or ``tuple[X, ...]`` holds, if any."""
    candidates = [annotation, *typing.get_args(annotation)]
    return next((c for c in candidates if dataclasses.is_dataclass(c) and isinstance(c, type)), None)


def _holds_dataclasses(value: Any) -> bool:
    return isinstance(value, tuple) and bool(value) and all(dataclasses.is_dataclass(v) for v in value)


def _flow(value: Any) -> str:
    """One value in YAML flow style on one line (mappings and lists inline)."""
    if isinstance(value, Mapping):
        value = dict(value)
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 16, sort_keys=False).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()
