"""JSON in and out of workflows and steps, driven by type hints.

A workflow's or step's parameters and return value are annotated with
plain types: ``str``, ``int``, ``float``, ``bool``, ``None``, ``list[T]``,
``dict[str, T]``, ``tuple[...]``, ``Optional[T]`` / ``T | None``,
``Literal[...]``, dataclasses and TypedDicts. :func:`encode` turns values
into JSON-ready data, :func:`decode` checks JSON data against a hint and
builds the value (naming the path of the first mismatch), and
:func:`schema` gives the hint's JSON Schema, which the host uses to refuse
an input or payload that does not fit before anything runs.

Nothing here touches the host, so it is tested on CPython directly.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from typing import Any, Literal, Union

__all__ = ["DecodeError", "decode", "encode", "schema"]


class DecodeError(ValueError):
    """JSON data does not fit a type hint; ``path`` is a JSON Pointer."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path or '/'}: {message}")
        self.path = path or "/"
        self.message = message


def encode(value: Any) -> Any:
    """``value`` as JSON-ready data: dataclasses become objects, enums
    their values, tuples arrays."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return encode(value.value)
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"a {type(value).__name__} cannot be written as JSON")


def _is_typeddict(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, dict) and hasattr(hint, "__annotations__")


def _is_union(origin: Any) -> bool:
    return origin is Union or origin is types.UnionType


def decode(hint: Any, data: Any, path: str = "") -> Any:
    """Checks ``data`` (parsed JSON) against ``hint`` and returns the value
    it describes; raises :class:`DecodeError` at the first mismatch."""
    if hint is Any or hint is typing.Any or hint is None and data is None:
        return data
    if hint is None or hint is type(None):
        if data is not None:
            raise DecodeError(path, "expected null")
        return None
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if _is_union(origin):
        errors = []
        for arm in args:
            try:
                return decode(arm, data, path)
            except DecodeError as e:
                errors.append(e.message)
        raise DecodeError(path, "fits none of: " + "; ".join(errors))
    if origin is Literal:
        if data not in args:
            raise DecodeError(path, f"expected one of {list(args)}")
        return data
    if origin in (list, typing.List) or hint is list:
        if not isinstance(data, list):
            raise DecodeError(path, "expected an array")
        item = args[0] if args else Any
        return [decode(item, v, f"{path}/{i}") for i, v in enumerate(data)]
    if origin in (tuple, typing.Tuple):
        if not isinstance(data, list) or len(data) != len(args):
            raise DecodeError(path, f"expected an array of {len(args)} items")
        return tuple(decode(a, v, f"{path}/{i}") for i, (a, v) in enumerate(zip(args, data)))
    if origin in (dict, typing.Dict) or hint is dict:
        if not isinstance(data, dict):
            raise DecodeError(path, "expected an object")
        item = args[1] if len(args) == 2 else Any
        return {k: decode(item, v, f"{path}/{_escape(k)}") for k, v in data.items()}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(data)
        except ValueError:
            raise DecodeError(path, f"expected one of {[m.value for m in hint]}") from None
    if dataclasses.is_dataclass(hint):
        return _decode_dataclass(hint, data, path)
    if _is_typeddict(hint):
        return _decode_typeddict(hint, data, path)
    if hint is bool:
        if not isinstance(data, bool):
            raise DecodeError(path, "expected a boolean")
        return data
    if hint is int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise DecodeError(path, "expected an integer")
        return data
    if hint is float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise DecodeError(path, "expected a number")
        return float(data)
    if hint is str:
        if not isinstance(data, str):
            raise DecodeError(path, "expected a string")
        return data
    raise DecodeError(path, f"keel cannot read JSON into {hint!r}; use plain types, dataclasses or TypedDicts")


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _decode_dataclass(cls: Any, data: Any, path: str) -> Any:
    if not isinstance(data, dict):
        raise DecodeError(path, f"expected an object ({cls.__name__})")
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.name in data:
            values[f.name] = decode(hints.get(f.name, Any), data[f.name], f"{path}/{_escape(f.name)}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise DecodeError(path, f"missing property `{f.name}`")
    return cls(**values)


def _decode_typeddict(cls: Any, data: Any, path: str) -> Any:
    if not isinstance(data, dict):
        raise DecodeError(path, f"expected an object ({cls.__name__})")
    hints = typing.get_type_hints(cls)
    required = getattr(cls, "__required_keys__", frozenset(hints))
    out = dict(data)
    for key, hint in hints.items():
        if key in data:
            out[key] = decode(hint, data[key], f"{path}/{_escape(key)}")
        elif key in required:
            raise DecodeError(path, f"missing property `{key}`")
    return out


def schema(hint: Any) -> Any:
    """The JSON Schema (draft 2020-12) of ``hint``; ``{}`` (anything) for
    ``Any`` or an unannotated parameter."""
    return _schema(hint, {})


def _schema(hint: Any, defs: dict) -> Any:
    if hint is Any or hint is typing.Any:
        return {}
    if hint is None or hint is type(None):
        return {"type": "null"}
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if _is_union(origin):
        return {"anyOf": [_schema(a, defs) for a in args]}
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (list, typing.List) or hint is list:
        return {"type": "array", "items": _schema(args[0], defs) if args else {}}
    if origin in (tuple, typing.Tuple):
        items = [_schema(a, defs) for a in args]
        return {"type": "array", "prefixItems": items, "minItems": len(items), "maxItems": len(items)}
    if origin in (dict, typing.Dict) or hint is dict:
        item = _schema(args[1], defs) if len(args) == 2 else {}
        return {"type": "object", "additionalProperties": item}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [m.value for m in hint]}
    if dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        fields = [f for f in dataclasses.fields(hint) if f.init]
        required = [
            f.name
            for f in fields
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        return {
            "type": "object",
            "title": hint.__name__,
            "properties": {f.name: _schema(hints.get(f.name, Any), defs) for f in fields},
            "required": required,
        }
    if _is_typeddict(hint):
        hints = typing.get_type_hints(hint)
        required = getattr(hint, "__required_keys__", frozenset(hints))
        return {
            "type": "object",
            "title": hint.__name__,
            "properties": {k: _schema(v, defs) for k, v in hints.items()},
            "required": sorted(required),
        }
    simple = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if hint in simple:
        return {"type": simple[hint]}
    return {}
