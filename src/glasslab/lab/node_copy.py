"""A step attempt in the working copy of the node it runs on, for a lab on object storage.

On an object-store lab (``--lab s3://…``) every node works in a local working copy of the root
(``store/mirror.py``), and the executor names a step's folders in its own. A step that a Ray cluster
places on another node, which shares no disk with the executor, runs in that node's copy instead
(``$GLASSLAB_WORK`` of that node's Ray processes, else the default for the URL): :func:`on_this_node`
moves the attempt's folders over (the config's resolved inputs follow when the step process unpickles
it, ``WorkerSpec.moved_from``) and pulls from the root the step's inputs and its own folder, so a retry
resumes from the checkpoints an earlier attempt pushed, on whatever node it ran. The trainer pushes its
folder at every checkpoint; the caller pushes the folder once more when the step process has ended
(:func:`push_folder`), and the executor pulls it into its own copy when the attempt ends.

On the executor's own working copy (the local pool; a Ray task placed on the executor's node with the
same ``$GLASSLAB_WORK``) nothing moves: the executor's lock pulled the folder and its release pushes it.
Only the step's dependencies and its own folder are pulled: a run named in a config by id that is not a
dependency of the step is not.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from glasslab.lab.attempt import WorkerSpec
from glasslab.lab.inputs import moved_under
from glasslab.store.mirror import LAB_URL_ENV, WORK_ENV, Mirror, mirror_for, work_folder


@dataclasses.dataclass(frozen=True)
class NodeAttempt:
    """``spec`` as it runs on this node, the environment its step process needs, and the mirror that pushes
    its folder when it ends (None where the executor's own copy is used: the executor pushes)."""

    spec: WorkerSpec
    env: dict[str, str]
    mirror: Mirror | None = None


def on_this_node(spec: WorkerSpec) -> NodeAttempt:
    """The attempt ``spec`` moved into this node's working copy of its object-store lab (a local lab: as is)."""
    if not spec.lab_url:
        return NodeAttempt(spec, {})
    work = work_folder(spec.lab_url)
    env = {LAB_URL_ENV: spec.lab_url, WORK_ENV: str(work)}
    old = Path(spec.lab_root)
    if work == old.resolve():
        return NodeAttempt(spec, env)
    spec = dataclasses.replace(spec, output_dir=moved_under(spec.output_dir, old, work), lab_root=str(work),
                               moved_from=str(old),
                               inputs={name: moved_under(path, old, work) for name, path in spec.inputs.items()})
    mirror = mirror_for(spec.lab_url, str(work))
    for folder in (*spec.inputs.values(), spec.output_dir):
        if Path(folder).is_relative_to(work):
            Path(folder).mkdir(parents=True, exist_ok=True)
            mirror.pull(Path(folder))
    return NodeAttempt(spec, env, mirror)


def push_folder(attempt: NodeAttempt) -> None:
    """Send the step's folder from this node's copy to the root (nothing where the executor's copy was used)."""
    if attempt.mirror is not None:
        attempt.mirror.push(Path(attempt.spec.output_dir))
