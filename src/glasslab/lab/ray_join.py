"""The one way this lab joins Ray, for the lab's steps and the data build's tasks alike.

``join_ray`` joins the cluster at ``address`` (checked first, so a wrong one is one line, not a minute
of retries), reuses a Ray session already up in this process, or starts a local one (no dashboard).
Workers get this process's import path (``PYTHONPATH`` in the runtime env).
"""

from __future__ import annotations

import os
import socket

from glasslab.errors import UserError
from glasslab.lab.modules import user_pythonpath


def join_ray(address: str | None, num_cpus: int, num_gpus: int = 0) -> bool:
    """Join or start Ray; True when this call started (or joined) it, False when it was already up."""
    try:
        import ray
    except ImportError:
        raise UserError("--backend ray: Ray is not installed; pip install 'glasslab[ray]'") from None
    if ray.is_initialized():
        return False
    runtime_env = {"env_vars": {"PYTHONPATH": user_pythonpath()}}
    if address:
        _check_reachable(address)
        try:
            with _quiet_stderr():
                ray.init(address=address, runtime_env=runtime_env, log_to_driver=False)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise UserError(f"--address {address}: cannot join a Ray cluster there ({exc})") from None
    else:
        with _quiet_stderr():
            ray.init(num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False, runtime_env=runtime_env,
                     log_to_driver=False)
    return True


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    host, _, port = address.rpartition(":")
    if address == "auto" or not port.isdigit():
        return  # "auto" and Ray's own address forms: ray.init says what is wrong
    try:
        socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise UserError(f"--address {address}: no Ray cluster reachable there "
                        f"({exc.strerror or type(exc).__name__}); start one with `ray start --head` "
                        "or drop --address to start a local Ray") from None


class _quiet_stderr:
    """Ray's C++ core prints retry warnings straight to file descriptor 2 while it connects; what went wrong
    is said in one line instead."""

    def __enter__(self) -> None:
        import sys

        sys.stderr.flush()
        self._saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)

    def __exit__(self, *exc: object) -> None:
        os.dup2(self._saved, 2)
        os.close(self._saved)
