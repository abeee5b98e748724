"""gNMI paths and values in the recording's string form, both ways.

The recording format (docs/recording-format.md, ``gnmi`` row) stores a path as gnmic prints
it: ``origin:/elem[key=value]/elem``, keys in sorted order, ``/`` inside a key value escaped.
This module is the one place that writes and reads that form: the fetch side turns protobuf
``Path`` messages into it, profiles write their patterns in it, the parser and the stand-in
read it back. ``]`` and ``\\`` in key values are escaped too (``\\]``, ``\\\\``), so every
string this module writes reads back to the same path.

A path in memory is a :class:`GPath`: origin, target and a tuple of ``(name, keys)`` elems
where ``keys`` is a sorted tuple of ``(key, value)`` pairs.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

Elem = tuple[str, tuple[tuple[str, str], ...]]


class PathError(ValueError):
    """A path string that is not in the gNMI string form."""


@dataclass(frozen=True, slots=True)
class GPath:
    elems: tuple[Elem, ...] = ()
    origin: str = ""
    target: str = ""

    def __str__(self) -> str:
        return to_string(self)

    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _keys in self.elems)

    def join(self, other: GPath) -> GPath:
        """``self`` as a prefix of ``other`` (origin and target from the prefix when it has them)."""
        return GPath(self.elems + other.elems, self.origin or other.origin, self.target or other.target)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("/", "\\/").replace("]", "\\]")


def to_string(path: GPath) -> str:
    """``origin:/a[k=v]/b`` (``/`` for the empty path); the target is not part of the string."""
    body = "".join("/" + name + "".join(f"[{k}={_escape(v)}]" for k, v in keys) for name, keys in path.elems) or "/"
    return f"{path.origin}:{body}" if path.origin else body


def _split_elems(text: str) -> list[str]:
    """Split on ``/`` outside brackets and escapes."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            cur.append(text[i:i + 2])
            i += 2
            continue
        if c == "[" and not depth:
            depth = 1  # inside a key: only an unescaped "]" ends it ("[" is an ordinary character)
        elif c == "]":
            if not depth:
                raise PathError(f"unbalanced ']' in path {text!r}")
            depth = 0
        elif c == "/" and depth == 0:
            parts.append("".join(cur))
            cur = []
            i += 1
            continue
        cur.append(c)
        i += 1
    if depth:
        raise PathError(f"unclosed '[' in path {text!r}")
    parts.append("".join(cur))
    return [p for p in parts if p]


def _unescape(value: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(value):
        if value[i] == "\\" and i + 1 < len(value):
            out.append(value[i + 1])
            i += 2
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def _parse_elem(text: str, whole: str) -> Elem:
    name_end = text.find("[")
    if name_end < 0:
        return text, ()
    name = text[:name_end]
    if not name:
        raise PathError(f"a key without an element name in path {whole!r}")
    keys: dict[str, str] = {}
    rest = text[name_end:]
    while rest:
        if not rest.startswith("["):
            raise PathError(f"text after a key in path {whole!r}")
        i, buf = 1, []
        while i < len(rest):
            if rest[i] == "\\" and i + 1 < len(rest):
                buf.append(rest[i:i + 2])
                i += 2
                continue
            if rest[i] == "]":
                break
            buf.append(rest[i])
            i += 1
        else:
            raise PathError(f"unclosed key in path {whole!r}")
        inner = "".join(buf)
        key, sep, value = inner.partition("=")
        if not sep or not key:
            raise PathError(f"key {inner!r} is not name=value in path {whole!r}")
        keys[key] = _unescape(value)
        rest = rest[i + 1:]
    return name, tuple(sorted(keys.items()))


def parse(text: str, target: str = "") -> GPath:
    """A path string (``origin:/a[k=v]/b``, also without the leading ``/`` as gnmic prints a prefix)."""
    if not isinstance(text, str):
        raise PathError(f"a path is a string, got {type(text).__name__}")
    origin = ""
    head, sep, rest = text.partition(":")
    if sep and "/" not in head and "[" not in head and (rest.startswith("/") or not rest):
        origin, text = head, rest
    return GPath(tuple(_parse_elem(e, text) for e in _split_elems(text)), origin, target)


# ---------------------------------------------------------------- protobuf <-> GPath


def from_proto(p: Any) -> GPath:
    """A ``gnmi.Path`` message (``elem``; the deprecated ``element`` strings when there is no elem)."""
    if p.elem:
        elems = tuple((e.name, tuple(sorted(e.key.items()))) for e in p.elem)
    else:
        elems = tuple(_parse_elem(e, e) for e in p.element)
    return GPath(elems, p.origin, p.target)


def to_proto(path: GPath, pb: Any) -> Any:
    """A ``gnmi.Path`` message of ``pb`` (the gnmi_pb2 module)."""
    return pb.Path(origin=path.origin, target=path.target,
                   elem=[pb.PathElem(name=name, key=dict(keys)) for name, keys in path.elems])


# ---------------------------------------------------------------- values

# TypedValue fields recorded as they are (JSON-native), and those that need a conversion.
_PLAIN = ("uint_val", "int_val", "double_val", "float_val", "bool_val", "string_val", "ascii_val")
_JSON = ("json_val", "json_ietf_val")
_BYTES = ("bytes_val", "proto_bytes")
INVALID_JSON = "invalid_json"  # a json_val/json_ietf_val that is not JSON: kept as text under this kind


def value_record(v: Any) -> dict[str, Any]:
    """A ``gnmi.TypedValue`` as ``{KIND: VALUE}`` (recording-format.md): JSON values parsed,
    bytes base64, leaf-lists as lists of such objects. A JSON field that does not parse is kept,
    as text, under ``invalid_json`` so the parser can name it (the poll is still recorded)."""
    kind = v.WhichOneof("value")
    if kind is None:
        return {}
    if kind in _PLAIN:
        return {kind: getattr(v, kind)}
    if kind in _JSON:
        raw = getattr(v, kind)
        try:
            return {kind: json.loads(raw)}
        except (ValueError, UnicodeDecodeError):
            return {INVALID_JSON: raw.decode("utf-8", "replace")}
    if kind in _BYTES:
        return {kind: base64.b64encode(getattr(v, kind)).decode("ascii")}
    if kind == "leaflist_val":
        return {kind: [value_record(e) for e in v.leaflist_val.element]}
    if kind == "decimal_val":
        return {kind: {"digits": v.decimal_val.digits, "precision": v.decimal_val.precision}}
    if kind == "any_val":
        return {kind: base64.b64encode(v.any_val.SerializeToString()).decode("ascii")}
    return {}


def value_proto(record: dict[str, Any], pb: Any) -> Any:
    """The ``gnmi.TypedValue`` of a recorded value (the stand-in serves recordings with it)."""
    (kind, value), = record.items()
    if kind in _PLAIN:
        return pb.TypedValue(**{kind: value})
    if kind in _JSON:
        return pb.TypedValue(**{kind: json.dumps(value).encode()})
    if kind == INVALID_JSON:
        return pb.TypedValue(json_ietf_val=str(value).encode())
    if kind in _BYTES:
        return pb.TypedValue(**{kind: base64.b64decode(value)})
    if kind == "leaflist_val":
        return pb.TypedValue(leaflist_val=pb.ScalarArray(element=[value_proto(e, pb) for e in value]))
    if kind == "decimal_val":
        return pb.TypedValue(decimal_val=pb.Decimal64(digits=value["digits"], precision=value["precision"]))
    raise ValueError(f"no TypedValue for kind {kind!r}")


def notification_record(n: Any) -> dict[str, Any]:
    """A ``gnmi.Notification`` as the recording's NOTIFICATION object."""
    out: dict[str, Any] = {
        "timestamp": int(n.timestamp),
        "prefix": to_string(from_proto(n.prefix)),
        "update": [{"path": to_string(from_proto(u.path)), "val": value_record(u.val)} for u in n.update],
        "delete": [to_string(from_proto(d)) for d in n.delete],
    }
    if n.prefix.target:
        out["target"] = n.prefix.target
    return out


def notification_proto(record: dict[str, Any], pb: Any) -> Any:
    """The ``gnmi.Notification`` of a recorded NOTIFICATION (the stand-in's direction)."""
    prefix = parse(record.get("prefix", "/"), record.get("target", ""))
    return pb.Notification(
        timestamp=int(record.get("timestamp", 0)), prefix=to_proto(prefix, pb),
        update=[pb.Update(path=to_proto(parse(u["path"]), pb), val=value_proto(u["val"], pb)) for u in record.get("update", [])],
        delete=[to_proto(parse(d), pb) for d in record.get("delete", [])],
    )
