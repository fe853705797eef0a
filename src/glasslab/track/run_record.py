"""``run.json``: what a run is, written once before its first step and never changed after.

It holds the resolved config (secrets redacted), the git commit and a hash of any uncommitted diff,
package versions, host, Python, start time, and whatever the caller adds (size name, parameter
counts, data manifest hash, the pre-registered prediction).
"""

from __future__ import annotations

import importlib.metadata
import platform
import socket
import sys
import time
from pathlib import Path
from typing import Any

from glasslab.config import redact
from glasslab.layout import RUN_RECORD, code_version, read_json, write_json_atomic

TRACKED_PACKAGES = (
    "glasslab", "torch", "numpy", "scipy", "tokenizers", "safetensors", "pyarrow", "datasketch",
    "transformers", "ray", "starlette", "uvicorn",
)


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


def write_record(run_dir: str | Path, record: dict[str, Any]) -> None:
    """Write ``run.json`` atomically; refuses to replace an existing one (it is immutable)."""
    path = Path(run_dir) / RUN_RECORD
    if path.exists():
        raise FileExistsError(f"{path} exists and is immutable")
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, record)


def read_record(run_dir: str | Path) -> dict[str, Any] | None:
    """The run's record, or None when it has none yet."""
    return read_json(Path(run_dir) / RUN_RECORD)
