"""What leaves the lab: the same records with no local path and no host name in them.

A lab's files say where they live (``data.path`` in a run's config, ``dataset.path`` and ``parent.run_dir``
in ``run.json``, the ``host`` of every step and lease) because the lab's own tools need it. What is
published — the static site, an export's manifest and model card — names data and runs the way anyone
holding the published record can find them again: by folder name (relative to the lab) and manifest hash.
The records on disk stay as written (``run.json`` is immutable); this module makes the public copy:

- an absolute path inside the lab becomes the lab's folder name and the path below it (``lab/data-1a2b3c4d``,
  as the run page's Reproduce box writes commands to run beside the lab);
- any other absolute path becomes its last name (``/home/me/corpus/web.jsonl`` → ``web.jsonl``);
- a ``host`` field is dropped, and a host name named in the lab's records is replaced in free text.

Live pages served to the lab's own user keep the paths; only what is copied out goes through here.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

HOST_KEYS = frozenset({"host", "hostname"})
"""Fields that name a machine; a public record drops them."""
HIDDEN_HOST = "<host>"
ABSOLUTE_PATH = re.compile(r"(?<![\w.:/~<-])~?(?:/[\w.@+=,%-]+){2,}/?")
"""An absolute path in free text: two or more ``/name`` parts (after ``~`` or not), not inside a word, a
URL (``http://host/run/x``), a relative path (``tokens/s``, ``a/b``) or markup (``</script>``)."""


class Publicizer:
    """Makes public copies of a lab's records (plain JSON data or text) rooted at ``lab_root``."""

    def __init__(self, lab_root: str | Path, hosts: Iterable[str] = ()) -> None:
        root = Path(lab_root)
        self.name = root.resolve().name
        # Both spellings: a record may hold the path as given or resolved (symlinks, /tmp → /private/tmp).
        self.roots = sorted({str(root.absolute()).rstrip("/"), str(root.resolve()).rstrip("/")}, key=len, reverse=True)
        names = {h for h in (*hosts, socket.gethostname()) if h and h not in ("localhost",)}
        self.hosts = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(names, key=len, reverse=True)))
                                + r")\b") if names else None

    def path(self, text: str) -> str:
        """One absolute path as published: the lab's name and the path below it inside the lab, else its
        last name."""
        for root in self.roots:
            if text == root or text.startswith(root + "/"):
                return self.name + text[len(root):]
        return Path(text.rstrip("/")).name or "."

    def text(self, text: str) -> str:
        """Free text with every absolute path made public and host names hidden."""
        if "/" in text or "~" in text:
            text = ABSOLUTE_PATH.sub(lambda m: self.path(m.group(0)), text)
        if self.hosts is not None:
            text = self.hosts.sub(HIDDEN_HOST, text)
        return text

    def data(self, value: Any) -> Any:
        """A public copy of plain data (dicts, lists, strings, numbers): host fields dropped, every
        string through :meth:`text`. Keys are rewritten too (a dict keyed by a path)."""
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self.data(v)
                    for k, v in value.items() if k not in HOST_KEYS}
        if isinstance(value, (list, tuple)):
            return [self.data(v) for v in value]
        if isinstance(value, str):
            return self.text(value)
        return value
