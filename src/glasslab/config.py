"""Configs as data: frozen dataclasses loaded from YAML/JSON, validated, overridden and hashed.

Every config in glasslab is a frozen dataclass. This module is the one machinery that turns plain
data (a YAML file plus ``a.b.c=value`` overrides from the command line) into such a dataclass, with a
one-line :class:`ConfigError` naming the key, the value and what was expected when anything is off.
It imports no other part of glasslab (only the shared ``errors`` leaf), so every part can build its configs on it.

Conventions for config classes:

- ``@dataclass(frozen=True)``; every field has a default; a docstring says what each field means.
- Range checks go in ``__post_init__`` through :func:`require`, which raises a one-line error.
- A field whose value must not change a step's identity (worker counts, log intervals) is declared
  with ``field(default=..., metadata=UNVERSIONED)`` and is left out of :func:`config_hash`.
- A field added to a config that already names steps in labs is declared ``metadata=VERSIONED_WHEN_SET``:
  left at its default it is out of the hash, so every existing step keeps its identity; set, it is hashed.
- A field declared ``metadata=TRANSIENT`` is held while planning only: never written, hashed or read back.
- A dataclass field declared ``metadata=INLINE`` is written with its own fields beside the parent's (not under
  its name) and read back from them: several fields become one value without moving a hash or a record.
  ``inline(keys=..., when_set=...)`` also renames some of them (the keys the parent wrote before) and hashes
  some only when set (as the parent's ``VERSIONED_WHEN_SET`` fields they replace were).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import re
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml

from glasslab.errors import UserError

T = TypeVar("T")

UNVERSIONED = {"versioned": False}
"""Field metadata for values that do not change what a step computes (see module docstring)."""
VERSIONED_WHEN_SET = {"versioned": "when_set"}
"""Field metadata for a field added later: hashed only when it differs from its default (module docstring)."""


def inline(keys: Mapping[str, str] | None = None, when_set: Iterable[str] = ()) -> dict[str, Any]:
    """Field metadata for a dataclass value whose fields sit among its parent's (module docstring). ``keys``:
    field → the key it is written, hashed and read back under (others keep their names); ``when_set``: fields
    hashed only when they differ from their default."""
    return {"inline": True, "keys": dict(keys or {}), "when_set": frozenset(when_set)}


INLINE = inline()
"""Field metadata for a dataclass value whose fields sit among its parent's under their own names."""
TRANSIENT = {"transient": True, "versioned": False}
"""Field metadata for a value held while planning only (the step a reference was made from): neither
written, hashed nor read back."""

SECRET_WORDS = frozenset({"token", "key", "apikey", "secret", "password", "passwd", "credential", "credentials"})
"""A key is secret when one of its words (split on ``_``, ``-``, ``.`` and case) is one of these, so
``wandb_api_key`` and ``hf_token`` are redacted while ``max_tokens`` and ``tokenizer`` are not. Only
string values are redacted: numbers such as ``flops_per_token`` are counts, never credentials."""
REDACTED = "***redacted***"


class ConfigError(UserError, ValueError):
    """A user's config is wrong; the message is one line naming key, value and expectation.

    ``key`` is the dotted key the message starts with, when there is one: :func:`from_dict` rewrites
    it into the full path from the root config (``mixture.weights.code`` checked inside the ``data``
    section of a run config is reported as ``data.mixture.weights.code``).
    """

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


def require(condition: bool, key: str, value: Any, expected: str) -> None:
    """Raise a :class:`ConfigError` ``"<key>=<value>: expected <expected>"`` unless ``condition``."""
    if not condition:
        raise ConfigError(f"{key}={value!r}: expected {expected}", key=key)


# --- building dataclasses from plain data -------------------------------------------------------


def from_dict(cls: type[T], data: Mapping[str, Any] | None, prefix: str = "") -> T:
    """Build config class ``cls`` from a mapping, checking keys and types recursively.

    ``prefix`` is the dotted path of ``data`` inside the root config, used in error messages.
    """
    data = {} if data is None else data
    if not isinstance(data, Mapping):
        raise ConfigError(f"{prefix or '<root>'}={data!r}: expected a mapping of {cls.__name__} fields")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init and not f.metadata.get("transient")}
    hints = get_type_hints(cls)
    inlined = {name: _inline_keys(f, hints[name]) for name, f in fields.items() if f.metadata.get("inline")}
    known = (set(fields) - set(inlined)).union(*(keys.values() for keys in inlined.values()))
    for key in data:
        if key not in known:
            raise ConfigError(_unknown_key_message(_join(prefix, str(key)), str(key), known))
    kwargs = {name: _coerce(data[name], hints[name], _join(prefix, name))
              for name in fields if name in data and name not in inlined}
    for name, keys in inlined.items():
        if set(keys.values()) & set(data):
            kwargs[name] = from_dict(hints[name], {f: data[key] for f, key in keys.items() if key in data}, prefix)
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        raise _at_path(exc, prefix, fields) from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{prefix or cls.__name__}: {exc}") from None


def _inline_keys(f: dataclasses.Field, cls: type) -> dict[str, str]:
    """An INLINE field's own fields (of class ``cls``) → the keys they sit under beside the parent's."""
    renamed = f.metadata["keys"]
    return {g.name: renamed.get(g.name, g.name) for g in dataclasses.fields(cls)
            if g.init and not g.metadata.get("transient")}


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _at_path(exc: ConfigError, prefix: str, fields: Iterable[str]) -> ConfigError:
    """``exc`` raised by the checks of a config built at ``prefix``, its key made the full dotted path.

    A class's checks name keys from wherever the class usually sits (``mixture.weights.code``,
    ``source.path``); the part from the first component that is one of the class's own fields on is
    what the class knows, so the full path is ``prefix`` plus that part.
    """
    if not prefix or exc.key is None:
        return exc
    parts = exc.key.split(".")
    for i, part in enumerate(parts):
        if part.split("[")[0] in fields:
            full = ".".join([prefix, *parts[i:]])
            return ConfigError(str(exc).replace(exc.key, full, 1), key=full)
    return exc


def _unknown_key_message(path: str, key: str, fields: Iterable[str]) -> str:
    names = sorted(fields)
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else f"; known keys: {', '.join(names)}"
    return f"{path}: unknown key{hint}"


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp))
    if tp is type(None):
        return "null"
    if origin is not None:
        return str(tp).replace("typing.", "")
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, path: str) -> Any:
    """Check ``value`` against annotation ``tp``; return it converted (lists to tuples, ints to floats)."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if isinstance(tp, type) and hasattr(tp, "from_config_value"):
        return value if isinstance(value, tp) else tp.from_config_value(value, path)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if value is None and len(args) < len(get_args(tp)):
            return None
        if len(args) == 1:
            return _coerce(value, args[0], path)
        for arg in args:
            try:
                return _coerce(value, arg, path)
            except ConfigError:
                continue
        raise ConfigError(f"{path}={value!r}: expected {_type_name(tp)}")
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed:
            close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{path}={value!r}: expected {_type_name(tp)}{hint}")
        return value
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        return from_dict(tp, value, path)
    if origin is tuple:
        args = get_args(tp)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path}={value!r}: expected a list")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, args[0], f"{path}[{i}]") for i, v in enumerate(value))
        if len(args) != len(value):
            raise ConfigError(f"{path}={value!r}: expected a list of {len(args)} items")
        return tuple(_coerce(v, a, f"{path}[{i}]") for i, (v, a) in enumerate(zip(value, args, strict=True)))
    if origin in (dict, Mapping, typing.Mapping):
        key_tp, val_tp = get_args(tp) or (Any, Any)
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}={value!r}: expected a mapping")
        return _FrozenDict(
            {_coerce(k, key_tp, path): _coerce(v, val_tp, f"{path}.{k}") for k, v in value.items()}
        )
    return _coerce_scalar(value, tp, path)


def _coerce_scalar(value: Any, tp: Any, path: str) -> Any:
    """``value`` checked as a bool, int (a whole float converts), float (an int converts) or str."""
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path}={value!r}: expected true or false")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{path}={value!r}: expected an integer")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{path}={value!r}: expected a number")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{path}={value!r}: expected a string")
    raise ConfigError(f"{path}: unsupported annotation {tp!r} (a bug in the config class)")


class _FrozenDict(dict):
    """A dict that refuses mutation and hashes, so dict fields keep configs immutable and hashable."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items())))

    def __reduce__(self) -> tuple:
        # Unpickling must not go through __setitem__ (refused): configs travel to step processes.
        return (_FrozenDict, (dict(self),))

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("config mappings are read-only")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore


# --- plain data, overrides, files ---------------------------------------------------------------


def to_dict(cfg: Any, versioned_only: bool = False) -> Any:
    """Plain JSON-able data for a config (nested dataclasses, tuples as lists). A value whose class has
    ``config_value()`` is written as what that returns (a typed reference to a step's output, as the name of
    the step; its class's ``from_config_value`` reads it back)."""
    if hasattr(type(cfg), "config_value"):
        return cfg.config_value()
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        data = {}
        for f in dataclasses.fields(cfg):
            if not (f.metadata.get("transient") or versioned_only and _unhashed(f, getattr(cfg, f.name))):
                value = to_dict(getattr(cfg, f.name), versioned_only)
                data.update(_inlined(f, getattr(cfg, f.name), value, versioned_only) if f.metadata.get("inline")
                            else {f.name: value})
        return data
    if isinstance(cfg, Mapping):
        return {str(k): to_dict(v, versioned_only) for k, v in cfg.items()}
    if isinstance(cfg, (list, tuple)):
        return [to_dict(v, versioned_only) for v in cfg]
    return cfg


def _inlined(f: dataclasses.Field, value: Any, written: dict[str, Any], versioned_only: bool) -> dict[str, Any]:
    """An INLINE field's ``written`` fields under the keys the parent writes them by; for a hash, those it hashes
    only when set left out at their default."""
    renamed, when_set = f.metadata["keys"], f.metadata["when_set"]
    defaults = {g.name: _default(g) for g in dataclasses.fields(value) if g.name in when_set}
    return {renamed.get(name, name): item for name, item in written.items()
            if not (versioned_only and name in defaults and getattr(value, name) == defaults[name])}


def _unhashed(f: dataclasses.Field, value: Any) -> bool:
    versioned = f.metadata.get("versioned", True)
    if versioned != "when_set":
        return versioned is False
    return value == _default(f)


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split ``a.b.c=value`` into its key path and a YAML-parsed value (``3e-4`` is a float)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {text!r}: expected KEY=VALUE, e.g. train.lr=3e-4")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    if isinstance(value, str) and re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+", value.strip()):
        value = float(value)  # YAML 1.1 reads 3e-4 as a string
    return key.strip().split("."), value


def apply_overrides(data: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Return a deep copy of ``data`` with every ``a.b.c=value`` override applied."""
    result = json.loads(json.dumps(data)) if data else {}
    for text in overrides:
        keys, value = parse_override(text)
        node = result
        for i, key in enumerate(keys[:-1]):
            if node.get(key) is None:  # an absent or null section (e.g. a dense model's `moe`) starts empty
                node[key] = {}
            child = node[key]
            if not isinstance(child, dict):
                raise ConfigError(f"override {text!r}: {'.'.join(keys[: i + 1])} is not a section")
            node = child
        node[keys[-1]] = value
    return result


def read_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML or JSON config file into plain data, with one-line errors."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError, UnicodeDecodeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'} ({first})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def load(cls: type[T], path: str | Path | None = None, overrides: Iterable[str] = ()) -> T:
    """Load ``cls`` from an optional YAML/JSON file plus dotted overrides."""
    data = read_file(path) if path is not None else {}
    return from_dict(cls, apply_overrides(data, overrides))


def replace(cfg: T, overrides: Iterable[str]) -> T:
    """A copy of ``cfg`` with dotted overrides applied and validated again."""
    return from_dict(type(cfg), apply_overrides(to_dict(cfg), overrides))


# --- identity and printing ----------------------------------------------------------------------


def canonical_json(data: Any) -> str:
    """Deterministic JSON (sorted keys, no spaces) used for hashing."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)


def config_hash(cfg: Any, length: int = 16) -> str:
    """Stable hex hash of a config's versioned fields (independent of dict order and Python run)."""
    data = to_dict(cfg, versioned_only=True)
    return hashlib.sha256(canonical_json(data).encode()).hexdigest()[:length]


def is_secret_key(key: str) -> bool:
    """Whether a config key names a secret (see :data:`SECRET_WORDS`)."""
    words = re.sub(r"([a-z])([A-Z])", r"\1_\2", key).lower()
    return any(word in SECRET_WORDS for word in re.split(r"[_\-.\s]+", words))


def redact(data: Any) -> Any:
    """Copy of plain data with string values under secret-looking keys (token, key, password…) replaced."""
    if isinstance(data, Mapping):
        return {
            k: (REDACTED if is_secret_key(str(k)) and isinstance(v, str) else redact(v))
            for k, v in data.items()
        }
    if isinstance(data, (list, tuple)):
        return [redact(v) for v in data]
    return data


def dumps(cfg: Any) -> str:
    """The resolved config as YAML, secrets redacted, for printing."""
    return yaml.safe_dump(redact(to_dict(cfg)), sort_keys=False, default_flow_style=False)


def diff(a: Any, b: Any) -> list[str]:
    """Dotted keys whose values differ between two configs (or plain mappings), shallowest first."""
    return sorted(_diff(to_dict(a), to_dict(b), ""))


def _diff(a: Any, b: Any, prefix: str) -> list[str]:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        keys = sorted(set(a) | set(b), key=str)
        return [d for k in keys for d in _diff(a.get(k, _MISSING), b.get(k, _MISSING), _join(prefix, str(k)))]
    return [] if a == b else [prefix]


_MISSING = object()
