"""``run.json``: what a run is, written once before its first step and never changed after.

It holds the resolved config (secrets redacted), the git commit and a hash of any uncommitted diff,
package versions, host, Python, start time, and whatever the caller adds (size name, parameter
counts, data manifest hash, the pre-registered prediction).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from glasslab.config import redact

RUN_RECORD = "run.json"
TRACKED_PACKAGES = (
    "glasslab", "torch", "numpy", "scipy", "tokenizers", "safetensors", "pyarrow", "datasketch",
    "transformers", "ray", "starlette", "uvicorn",
)


def code_version(path: str | Path | None = None) -> dict[str, Any]:
    """Git commit of the checkout holding ``path`` (default: this package) and a hash of its diff."""
    where = Path(path) if path is not None else Path(__file__).resolve().parent
    try:
        commit = _git(where, "rev-parse", "HEAD").strip()
        diff = _git(where, "diff", "HEAD")
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None, "diff_sha256": None}
    return {
        "commit": commit,
        "dirty": bool(diff),
        "diff_sha256": hashlib.sha256(diff.encode()).hexdigest() if diff else None,
    }


def _git(where: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=where, capture_output=True, text=True, check=True, timeout=10
    ).stdout


def package_versions() -> dict[str, str]:
    """Installed versions of the packages that decide what a run computes."""
    versions = {}
    for name in TRACKED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def build_record(config: dict[str, Any], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A fresh run record for ``config`` (plain data) plus ``extra`` fields."""
    record = {
        "config": redact(config),
        "code": code_version(),
        "packages": package_versions(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    record.update(redact(extra or {}))
    return record


def write_json_atomic(path: str | Path, data: Any) -> None:
    """Write JSON to a temp file beside ``path``, fsync, then rename over it."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=False, default=str)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_record(run_dir: str | Path, record: dict[str, Any]) -> None:
    """Write ``run.json`` atomically; refuses to replace an existing one (it is immutable)."""
    path = Path(run_dir) / RUN_RECORD
    if path.exists():
        raise FileExistsError(f"{path} exists and is immutable")
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, record)


def read_record(run_dir: str | Path) -> dict[str, Any] | None:
    """The run's record, or None when it has none yet."""
    path = Path(run_dir) / RUN_RECORD
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
