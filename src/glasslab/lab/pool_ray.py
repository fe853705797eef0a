"""The pool on Ray: each call is a Ray task asking for its CPUs and GPUs (see pool.py for the contract).

Ray is joined the one way (``ray_join.py``): at ``address``, or a Ray already up in this process, or a local
one started here and shut down at :meth:`RayPool.close`. Ray never retries a task itself
(``max_retries=0``): what a failure means is the caller's. A task's own exception comes back as the call's
``error``; a worker Ray lost (crashed, its node died, unschedulable, cancelled) as ``lost``; anything else
Ray raises is Ray itself failing, a :class:`~glasslab.lab.pool.PoolFailure`. Work folders and the lab root
must be on storage every node sees.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import ray

from glasslab.errors import UserError
from glasslab.lab.pool import Outcome, PoolFailure
from glasslab.lab.ray_join import join_ray

_LOST = (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError, ray.exceptions.ObjectLostError,
         ray.exceptions.TaskUnschedulableError, ray.exceptions.TaskCancelledError)


class RayPool:
    """Submits calls as Ray tasks; ``size`` 0 means as many at once as the cluster has CPUs."""

    kind = "ray"

    def __init__(self, size: int, address: str | None, local_cpus: int, local_gpus: int = 0) -> None:
        self.started_here = join_ray(address, num_cpus=local_cpus, num_gpus=local_gpus)
        self.size = size or max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._remotes: dict[Callable, Any] = {}

    def submit(self, fn: Callable, *args: Any, cpus: float = 1, gpus: float = 0, name: str = "") -> Any:
        remote = self._remotes.get(fn)
        if remote is None:
            remote = self._remotes[fn] = ray.remote(max_retries=0)(fn)
        return remote.options(num_cpus=cpus, num_gpus=gpus, name=name or fn.__name__).remote(*args)

    def pid(self, handle: Any) -> int | None:
        return None  # the task may run on another host; Ray stops it if this process dies

    def wait(self, handles: Sequence[Any], timeout_s: float) -> list[Any]:
        if not handles:
            return []
        ready, _ = ray.wait(list(handles), num_returns=1, timeout=timeout_s)
        return ready

    def poll(self, handle: Any) -> Outcome | None:
        ready, _ = ray.wait([handle], num_returns=1, timeout=0)
        if not ready:
            return None
        try:
            return Outcome(value=ray.get(handle))
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause if isinstance(exc.cause, BaseException) else exc
            return Outcome(error=UserError(str(cause)) if isinstance(cause, UserError) else cause)
        except _LOST as exc:
            return Outcome(lost=f"Ray lost its worker ({type(exc).__name__})")
        except ray.exceptions.RayError as exc:
            return Outcome(error=PoolFailure(exc))

    def terminate(self, handle: Any) -> None:
        """Cancel the task: it sees ``KeyboardInterrupt`` (a step passes SIGTERM on)."""
        ray.cancel(handle, force=False)

    def kill(self, handle: Any) -> None:
        ray.cancel(handle, force=True)

    def close(self, wait: bool = True) -> None:
        if self.started_here:
            ray.shutdown()
