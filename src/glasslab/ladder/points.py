"""Rungs from a file of measured points, so a ladder trained elsewhere (or a published one) can be refit.

A points file is a CSV with a header, or a JSON list of records, with one row per trained run:

    flops,loss[,seed][,params][,tokens]      (training FLOPs, final loss in nats per token, ...)
    params,tokens,loss[,seed]                (the end-point law's points, ``--law nd``)

Rows with the same ``(flops, params, tokens)`` are seeds of one rung (``seed``, when given, must not
repeat within a rung). ``params`` (active parameters, N) and ``tokens`` (training tokens, D) are what
approach 3 and the end-point law need; when only one of them is given the other is taken from the
dense-training count C = 6·N·D, and when both are given without ``flops`` so is C; the caller is told
so. Columns other than these are left out, and the caller is told
which. Every value is checked, with one line naming the file, the row and the field on bad input.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from glasslab.errors import UserError
from glasslab.ladder.rungs import Rung
from glasslab.layout import write_text_atomic

FIELDS = ("flops", "loss", "seed", "params", "tokens")
REQUIRED = ("loss",)
WRITTEN = ("params", "tokens", "loss", "seed", "flops")
"""The columns a fit writes its points in (``write_points``); ``run`` (the run folder) follows, left out on reading."""
POINT_SUFFIXES = (".csv", ".json")
DENSE_FLOPS_PER_PARAM_TOKEN = 6.0
"""C = 6·N·D: forward and backward matmuls of a dense model, the count Chinchilla's data uses."""


def is_points_file(path: str | Path) -> bool:
    return Path(path).suffix.lower() in POINT_SUFFIXES and Path(path).is_file()


def read_points(path: str | Path) -> tuple[list[Rung], list[str]]:
    """The rungs in the points file at ``path`` (smallest compute first) and notes for the console
    (columns left out, values derived)."""
    path = Path(path)
    rows, columns = _read_rows(path)
    missing = [f for f in REQUIRED if f not in columns]
    if "flops" not in columns and not {"params", "tokens"} <= set(columns):
        missing.insert(0, "flops")
    if missing:
        raise UserError(f"{path}: no {', '.join(missing)} column; expected flops, loss (or params, tokens, loss) and "
                        "optionally seed, params, tokens")
    notes = []
    ignored = [c for c in columns if c not in FIELDS]
    if ignored:
        notes.append(f"{path.name}: columns left out: {', '.join(ignored)}")
    points = [_point(path, where, row) for where, row in rows]
    if not points:
        raise UserError(f"{path}: no points")
    for column in ("flops", "params", "tokens", "seed"):
        given = [p[column] is not None for p in points]
        if any(given) and not all(given):
            where = rows[given.index(False)][0]
            raise UserError(f"{path}: {where}: {column} is empty while other rows give it; expected it in every "
                            "row or in none")
    if points[0]["flops"] is None:
        if points[0]["params"] is None or points[0]["tokens"] is None:
            raise UserError(f"{path}: {rows[0][0]}: flops is empty and params or tokens too; expected flops, or "
                            "params and tokens")
        for p in points:
            p["flops"] = DENSE_FLOPS_PER_PARAM_TOKEN * p["params"] * p["tokens"]
        notes.append(f"{path.name}: no flops column; flops taken as 6 · params · tokens")
    elif points[0]["params"] is not None and points[0]["tokens"] is None:
        for p in points:
            p["tokens"] = p["flops"] / (DENSE_FLOPS_PER_PARAM_TOKEN * p["params"])
        notes.append(f"{path.name}: no tokens column; tokens taken as flops / (6 · params)")
    elif points[0]["tokens"] is not None and points[0]["params"] is None:
        for p in points:
            p["params"] = p["flops"] / (DENSE_FLOPS_PER_PARAM_TOKEN * p["tokens"])
        notes.append(f"{path.name}: no params column; params taken as flops / (6 · tokens)")
    return rungs_of(points, path), notes


def _read_rows(path: Path) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """(``where``, row) pairs and the column names, from a CSV or a JSON list of records."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read ({type(exc).__name__}: {exc})") from None
    if path.suffix.lower() == ".json":
        try:
            records = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise UserError(f"{path}: expected a JSON list of records like {{\"flops\": 1e18, \"loss\": 2.9}}")
        columns = list(dict.fromkeys(k for r in records for k in r))
        return [(f"record {i}", r) for i, r in enumerate(records)], columns
    reader = csv.DictReader(text.splitlines())
    columns = [c.strip() for c in reader.fieldnames or []]
    rows = []
    for line, row in enumerate(reader, start=2):
        if None in row:
            raise UserError(f"{path}: line {line}: more values than the {len(columns)} columns of the header")
        rows.append((f"line {line}", {k.strip(): v for k, v in row.items()}))
    return rows, columns


def _point(path: Path, where: str, row: dict[str, Any]) -> dict[str, Any]:
    point: dict[str, Any] = {}
    for name in FIELDS:
        value = row.get(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            if name in REQUIRED:
                raise UserError(f"{path}: {where}: {name} is empty; expected a positive number")
            point[name] = None
            continue
        point[name] = _number(path, where, name, value)
    return point


def _number(path: Path, where: str, name: str, value: Any) -> float | int:
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if name == "seed":
        if not (math.isfinite(number) and number == int(number)):
            raise UserError(f"{path}: {where}: seed={value!r}: expected an integer")
        return int(number)
    if not (math.isfinite(number) and number > 0):
        raise UserError(f"{path}: {where}: {name}={value!r}: expected a finite positive number")
    return number


def rungs_of(points: Iterable[dict[str, Any]], where: str | Path) -> list[Rung]:
    """Points (``flops``, ``loss``, ``seed``, ``params``, ``tokens``) grouped into rungs, smallest compute first,
    each rung's losses in the order given: a points file's, and a grid fit's end points (``grid_ends``), go
    through this one function, so a fit refitted from the file it wrote sees its points in the same order."""
    path = where
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for p in points:
        groups.setdefault((p["flops"], p["params"], p["tokens"]), []).append(p)
    rungs, names = [], set()
    for (flops, params, tokens), seeds in sorted(groups.items(), key=lambda g: (g[0][0], g[0][1] or 0.0)):
        given = [p["seed"] for p in seeds if p["seed"] is not None]
        if len(given) != len(set(given)):
            raise UserError(f"{path}: seed repeated among the rows with flops={flops:g}"
                            + (f", params={params:g}" if params else "") + "; expected one row per seed")
        base = f"N{params:.3g}-C{flops:.3g}" if params else f"C{flops:.3g}"
        name, k = base, 2
        while name in names:
            name, k = f"{base}#{k}", k + 1
        names.add(name)
        rungs.append(Rung(name=name, flops=flops, losses=tuple(p["loss"] for p in seeds),
                          params_active=params or 0.0, tokens=tokens or 0.0))
    return rungs


def write_points(path: str | Path, points: Iterable[dict[str, Any]]) -> None:
    """A points file (CSV) of ``points`` (dicts with :data:`FIELDS` and optionally ``run``), each number as
    Python writes it back exactly (``repr``), so ``read_points`` of the file gives the same floats."""
    columns = (*WRITTEN, "run")
    lines = [",".join(columns)]
    for p in points:
        lines.append(",".join("" if p.get(c) is None else (str(p[c]) if c in ("run", "seed") else repr(float(p[c])))
                              for c in columns))
    write_text_atomic(Path(path), "\n".join(lines) + "\n")
