"""A ``--lab`` URL is refused in one line, exit 2, and nothing is made locally (issue 44, step 0)."""

from __future__ import annotations

import pytest

from glasslab.cli import main


@pytest.mark.parametrize("argv", [["card", "run-x"], ["trace", "run-x"], ["note", "run-x", "hello"]])
def test_url_lab_is_refused_without_a_local_folder(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--lab", "s3://bucket/x"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "s3://bucket/x" in err
    assert list(tmp_path.iterdir()) == []
