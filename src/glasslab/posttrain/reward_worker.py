"""The process a user's reward file runs in: ``python -m glasslab.posttrain.reward_worker FILE TIMEOUT_S``.

It imports FILE, says ``{"ready": true}`` (or ``{"error": ...}``), then reads one JSON line per sample,
``{"prompt": record, "completion": text}``, and answers one line: ``{"value": ...}`` (with ``repr`` when the
value is not JSON's), or ``{"error": "FILE:LINE: what"}`` naming the innermost line of FILE where the call
raised or, after TIMEOUT_S seconds (SIGALRM), where it was when interrupted.
"""

from __future__ import annotations

import importlib.util
import json
import math
import signal
import sys
import traceback
from pathlib import Path


class RewardTimeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise RewardTimeout


def where_in(path: Path, exc: BaseException) -> str:
    """``FILE:LINE`` of the innermost frame of ``exc``'s traceback inside ``path`` (the file alone if none)."""
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).resolve() == path]
    return f"{path}:{lines[-1]}" if lines else str(path)


def _load(path: Path):
    spec = importlib.util.spec_from_file_location("glasslab_user_reward", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    reward = getattr(module, "reward", None)
    if not callable(reward):
        raise TypeError("defines no function reward(prompt, completion) -> float")
    return reward


def _answer(reward, path: Path, timeout_s: float, ask: dict) -> dict:
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        value = reward(ask["prompt"], ask["completion"])
    except RewardTimeout as exc:
        return {"error": f"{where_in(path, exc)}: reward did not return within {timeout_s:g} s"}
    except Exception as exc:  # noqa: BLE001 - any error of the user's code is reported, not raised
        return {"error": f"{where_in(path, exc)}: reward raised {type(exc).__name__}: {exc}"}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return {"value": value}
    return {"value": None, "repr": repr(value)[:80]}


def main() -> None:
    path, timeout_s = Path(sys.argv[1]).resolve(), float(sys.argv[2])
    out = sys.stdout
    sys.stdout = sys.stderr  # the user's prints must not reach the protocol's pipe
    signal.signal(signal.SIGALRM, _on_alarm)
    try:
        reward = _load(path)
    except Exception as exc:  # noqa: BLE001
        out.write(json.dumps({"error": f"{where_in(path, exc)}: {type(exc).__name__}: {exc}"}) + "\n")
        out.flush()
        return
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        out.write(json.dumps(_answer(reward, path, timeout_s, json.loads(line))) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
