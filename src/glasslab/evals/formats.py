"""Task files on disk: glasslab's JSONL layout and adapters for the common public layouts.

Every layout becomes :class:`~glasslab.evals.task.Item` ``{context, choices, answer}``:

- ``glasslab``: ``context``, ``choices`` (list of strings), ``answer`` (index);
- ``hellaswag``: ``ctx`` → context, ``endings`` → choices, ``label`` (index, or its digits) → answer;
- ``arc``: ``question`` → context, ``choices`` = {``text``: [...], ``label``: [...]} → the texts,
  ``answerKey`` → the position of that label;
- ``piqa``: ``goal`` → context, [``sol1``, ``sol2``] → choices, ``label`` (0 or 1) → answer.

The adapters take the fields as they are (no cleaning of HellaSwag's ``[title]`` markers, no
activity label), so what is scored is what is in the file. Each layout has the prompt lm-eval's
task of that family uses: ARC and PIQA ask ``Question: …\\nAnswer:``, the others the context alone.

A bad row stops the load with one line naming ``file:line``, the field and what was expected.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from glasslab.errors import UserError
from glasslab.evals.task import Item
from glasslab.layout import write_text_atomic

LAYOUT_FIELDS = {
    "glasslab": ("context", "choices", "answer"),
    "hellaswag": ("ctx", "endings", "label"),
    "arc": ("question", "choices", "answerKey"),
    "piqa": ("goal", "sol1", "sol2", "label"),
}
DEFAULT_TEMPLATES = {
    "glasslab": "{context}",
    "hellaswag": "{context}",
    "arc": "Question: {context}\nAnswer:",
    "piqa": "Question: {context}\nAnswer:",
}


class RowError(ValueError):
    """A row does not fit its layout: ``field`` names the field, the message says what was expected."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def detect_layout(row: dict[str, Any]) -> str:
    """The layout whose fields the row has (glasslab's first); raises RowError when none fits."""
    for layout, fields in LAYOUT_FIELDS.items():
        if all(f in row for f in fields):
            return layout
    known = "; ".join(f"{name}: {', '.join(fields)}" for name, fields in LAYOUT_FIELDS.items())
    raise RowError("", f"fields {', '.join(sorted(row)) or 'none'} fit no known layout ({known})")


def read_items(path: str | Path, layout: str = "auto") -> tuple[list[Item], str]:
    """The items of a JSONL task file and the layout they were read with.

    Blank lines are skipped; anything else that is not a row of the layout raises a one-line
    :class:`UserError` ``"<file>:<line>: field '<f>': <what was expected>"``.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: task file not found")
    items: list[Item] = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{path}:{number}: not valid JSON ({exc.msg} at column {exc.colno})") from None
            try:
                if not isinstance(row, dict):
                    raise RowError("", f"expected a JSON object, got {type(row).__name__}")
                if layout == "auto":
                    layout = detect_layout(row)
                items.append(ADAPTERS[layout](row))
            except RowError as exc:
                where = f" field '{exc.field}':" if exc.field else ""
                raise UserError(f"{path}:{number}:{where} {exc}") from None
    if not items:
        raise UserError(f"{path}: no items (expected one JSON object per line)")
    return items, layout


def _text(row: dict[str, Any], field: str) -> str:
    if field not in row:
        raise RowError(field, "missing")
    value = row[field]
    if not isinstance(value, str):
        raise RowError(field, f"{value!r}: expected a string")
    return value


def _choices(values: Any, field: str) -> tuple[str, ...]:
    if not isinstance(values, list) or len(values) < 2:
        raise RowError(field, f"{values!r}: expected a list of at least 2 strings")
    for i, value in enumerate(values):
        if not isinstance(value, str) or not value:
            raise RowError(field, f"choice {i} is {value!r}: expected a non-empty string")
    return tuple(values)


def _index(value: Any, field: str, num_choices: int) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < num_choices:
        raise RowError(field, f"{value!r}: expected an index from 0 to {num_choices - 1} into the choices")
    return value


def _glasslab(row: dict[str, Any]) -> Item:
    choices = _choices(row.get("choices"), "choices")
    return Item(_text(row, "context"), choices, _index(row.get("answer"), "answer", len(choices)))


def _hellaswag(row: dict[str, Any]) -> Item:
    choices = _choices(row.get("endings"), "endings")
    return Item(_text(row, "ctx"), choices, _index(row.get("label"), "label", len(choices)))


def _arc(row: dict[str, Any]) -> Item:
    block = row.get("choices")
    if not isinstance(block, dict) or not isinstance(block.get("label"), list):
        raise RowError("choices", f"{block!r}: expected {{\"text\": [...], \"label\": [...]}}")
    choices = _choices(block.get("text"), "choices.text")
    labels = [str(label) for label in block["label"]]
    if len(labels) != len(choices):
        raise RowError("choices.label", f"{len(labels)} labels for {len(choices)} texts: expected one label each")
    key = str(row.get("answerKey"))
    if key not in labels:
        raise RowError("answerKey", f"{row.get('answerKey')!r}: expected one of the labels {labels}")
    return Item(_text(row, "question"), choices, labels.index(key))


def _piqa(row: dict[str, Any]) -> Item:
    choices = (_text(row, "sol1"), _text(row, "sol2"))
    for field, choice in zip(("sol1", "sol2"), choices, strict=True):
        if not choice:
            raise RowError(field, "empty: expected a non-empty solution")
    return Item(_text(row, "goal"), choices, _index(row.get("label"), "label", 2))


ADAPTERS: dict[str, Callable[[dict[str, Any]], Item]] = {
    "glasslab": _glasslab,
    "hellaswag": _hellaswag,
    "arc": _arc,
    "piqa": _piqa,
}


def write_items(path: str | Path, items: list[Item]) -> Path:
    """Write items in glasslab's layout, one JSON object per line (UTF-8, not escaped)."""
    lines = [json.dumps({"context": it.context, "choices": list(it.choices), "answer": it.answer},
                        ensure_ascii=False) for it in items]
    return write_text_atomic(path, "\n".join(lines) + "\n")
