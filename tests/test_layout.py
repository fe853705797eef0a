"""The lab-root file contract: atomic writes leave the old file or the whole new one, never a part."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from glasslab import layout

SRC = Path(__file__).resolve().parents[1] / "src" / "glasslab"


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "run.json"
    layout.write_json_atomic(target, {"a": 1})
    with pytest.raises(RuntimeError), layout.atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert layout.read_json(target) == {"a": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def test_a_folder_is_replaced_whole(tmp_path):
    target = tmp_path / "checkpoints" / "step-0000001"
    for value in ("old", "new"):
        with layout.atomic_path(target) as tmp:
            tmp.mkdir()
            (tmp / "model.pt").write_text(value)
    assert (target / "model.pt").read_text() == "new"
    assert [p.name for p in target.parent.iterdir()] == ["step-0000001"]
    with pytest.raises(FileExistsError), layout.atomic_path(target, replace=False) as tmp:
        tmp.mkdir()
    assert [p.name for p in target.parent.iterdir()] == ["step-0000001"]


def test_lab_file_names_and_renames_live_only_in_layout():
    """No other module under src/ spells a lab-root file name or renames files itself."""
    names = {getattr(layout, n) for n in dir(layout) if n.isupper() and isinstance(getattr(layout, n), str)
             and "." in getattr(layout, n)}
    offenders = []
    for path in SRC.rglob("*.py"):
        if path.name == "layout.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in names:
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno}: {node.value!r}")
            if isinstance(node, ast.Attribute) and node.attr in ("mkstemp", "replace", "rename") and \
                    isinstance(node.value, ast.Name) and node.value.id in ("os", "tempfile"):
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno}: {node.value.id}.{node.attr}")
    assert offenders == []
