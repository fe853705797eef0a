"""A lab root that is a URL: which values are URLs, opening one through fsspec, and one line for a
root the lab cannot use.

Only object stores (``s3://``, and ``gs://`` through the same fsspec interface, untested here) are
opened as URLs; ``file:///x`` is the local folder ``/x``. Credentials and the endpoint come from the
store's usual environment (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``,
``~/.aws``; gcsfs's own for ``gs://``): nothing here reads, writes or logs them. Every transient error
is retried by botocore's standard mode (exponential backoff with jitter, ``GLASSLAB_STORE_ATTEMPTS``
tries, default 4); each request gives up after ``GLASSLAB_STORE_TIMEOUT_S`` seconds (default 30).
"""

from __future__ import annotations

import logging
import os
import sys
import uuid
from dataclasses import dataclass
from typing import Any

from glasslab.errors import UserError
from glasslab.layout import TEMP_PREFIX, put_object_atomic

OBJECT_STORES = ("s3", "gs")
"""URL schemes opened as object-store lab roots."""


def is_url(value: str) -> bool:
    """Whether a ``--lab`` value is a URL (``scheme://…``) rather than a local folder."""
    return "://" in str(value)


def local_folder(value: str) -> str:
    """The local folder a ``--lab`` value names (``file:///x`` → ``/x``); a one-line UserError for an
    object-store URL or another scheme."""
    scheme, sep, rest = str(value).partition("://")
    if not sep:
        return str(value)
    if scheme == "file":
        return rest
    raise UserError(
        f"{value}: this command takes a local lab folder (or file://); object-store labs "
        "are taken by glasslab train, run, data build and publish"
    )


@dataclass(frozen=True)
class ObjectRoot:
    """An object-store lab root: ``url`` as given, the fsspec filesystem and the key prefix under it."""

    url: str
    fs: Any
    prefix: str

    def key(self, relative: str) -> str:
        """The store key of ``relative`` (a path under the lab root, ``/``-separated)."""
        return f"{self.prefix}/{relative}" if relative else self.prefix

    def relative(self, key: str) -> str:
        """The lab-relative path of store key ``key``."""
        return key[len(self.prefix) :].lstrip("/")

    def put(self, relative: str, data: bytes, *, if_absent: bool = False) -> bool:
        """One atomic PUT (``layout.put_object_atomic``); with ``if_absent`` False when it exists."""
        return self.call(f"write {relative}", put_object_atomic, self.fs, self.key(relative), data, if_absent=if_absent)

    def get(self, relative: str) -> bytes | None:
        """The object's bytes, or None when there is none."""
        try:
            return self.call(f"read {relative}", self.fs.cat_file, self.key(relative))
        except MissingObject:
            return None

    def call(self, what: str, function: Any, *args: Any, **kwargs: Any) -> Any:
        """``function(*args, **kwargs)`` with a store failure turned into one line naming the URL."""
        try:
            return function(*args, **kwargs)
        except FileNotFoundError as exc:
            if "bucket does not exist" in str(exc).lower() or "NoSuchBucket" in str(exc):
                raise UserError(f"{self.url}: cannot {what}: the bucket does not exist") from None
            raise MissingObject(str(exc)) from None
        except FileExistsError:
            raise
        except Exception as exc:  # botocore, aiohttp and s3fs errors have no common base but Exception
            raise UserError(f"{self.url}: cannot {what}: {describe_store_error(exc)}") from None


class MissingObject(Exception):
    """An object that does not exist (not a failure of the store)."""


def describe_store_error(exc: BaseException) -> str:
    """What failed, in words, for an exception raised by an fsspec object store."""
    name = type(exc).__name__
    text = str(exc).splitlines()[0] if str(exc) else ""
    if "Credential" in name or "credential" in text.lower():
        return f"no credentials ({text or name}); set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
    if isinstance(exc, PermissionError) or "AccessDenied" in text or "Forbidden" in text:
        return f"access denied ({text or name})"
    if "Timeout" in name or "timed out" in text.lower():
        return f"the store timed out ({text or name})"
    if "Connect" in name or "connect" in text.lower():
        return f"the store cannot be reached ({text or name})"
    return f"{name}: {text}"


def open_root(url: str) -> ObjectRoot:
    """Open the object-store lab root ``url`` and prove it usable: a conditional create of a probe key,
    then its removal. A one-line UserError naming the URL when it cannot be used (no fsspec backend
    installed, no credentials, no bucket, a denied write, a store that does not answer)."""
    scheme, _, rest = url.partition("://")
    if scheme not in OBJECT_STORES:
        raise UserError(f"{url}: unknown lab root scheme {scheme!r}; expected a folder, file://, s3:// or gs://")
    if not rest.strip("/"):
        raise UserError(f"{url}: expected a bucket (s3://bucket/prefix)")
    import fsspec

    try:
        fs = fsspec.filesystem(scheme, skip_instance_cache=True, **_store_options(scheme))  # credentials as now
    except ImportError as exc:
        raise UserError(f'{url}: the {scheme}:// backend is not installed ({exc}); pip install -e ".[cloud]"') from None
    root = ObjectRoot(url=url, fs=fs, prefix=rest.strip("/"))
    say_retries_once(url)
    probe = f"{TEMP_PREFIX}probe-{uuid.uuid4().hex}"
    # The probe has a deadline of its own (fsspec's): a store that accepts a connection and never answers
    # is otherwise waited on past botocore's read timeout.
    deadline = _timeout_s() * (_attempts() + 1)
    root.call(f"write {probe}", put_object_atomic, fs, root.key(probe), b"", if_absent=True, timeout=deadline)
    root.call(f"remove {probe}", fs.rm_file, root.key(probe), timeout=deadline)
    return root


def _store_options(scheme: str) -> dict[str, Any]:
    """fsspec options: timeouts and botocore's retry with backoff; never credentials (the environment's)."""
    timeout, attempts = _timeout_s(), _attempts()
    if scheme == "s3":
        return {
            "config_kwargs": {
                "connect_timeout": timeout,
                "read_timeout": timeout,
                "retries": {"max_attempts": attempts, "mode": "standard"},
            }
        }
    return {"timeout": timeout}


def _timeout_s() -> float:
    return float(os.environ.get("GLASSLAB_STORE_TIMEOUT_S", "30"))


def _attempts() -> int:
    return int(os.environ.get("GLASSLAB_STORE_ATTEMPTS", "4"))


class _RetrySaidOnce(logging.Handler):
    """Says on stderr, once per lab root and process, that the store gave a transient error and botocore
    is retrying (the root being the one opened last)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.url, self.said = "", set()

    def emit(self, record: logging.LogRecord) -> None:
        if self.url not in self.said and record.getMessage().startswith("Retry needed, retrying"):
            self.said.add(self.url)
            print(f"{self.url}: a transient error from the store; retrying with backoff (said once)", file=sys.stderr)


def say_retries_once(url: str) -> None:
    """Listen to botocore's retry decisions (its ``botocore.retries.standard`` logger, which aiobotocore
    shares) and say the first retry for ``url`` in one line; the logger's records stop there (not
    propagated), so raising it to DEBUG prints nothing else."""
    logger = logging.getLogger("botocore.retries.standard")
    handler = next((h for h in logger.handlers if isinstance(h, _RetrySaidOnce)), None)
    if handler is None:
        handler = _RetrySaidOnce()
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
    handler.url = url
