"""JSON of hostile size: bounded in values before it is decoded, decoded and encoded in slices.

**Objects, not bytes.** A byte cap does not bound what a body costs once decoded: 250 MB of
``[{},{},...]`` (under the 256 MiB body cap) is 83 million dicts, 6.75 GB (issue 32). Before
decoding, :func:`loads` counts what the text can hold at most (each value but the last in a
container is followed by a comma, each container starts with a bracket: commas plus brackets,
counted by C-level ``count``, an upper bound since brackets and commas inside strings count
too) and refuses more than ``max_values`` with :class:`JsonRefused` (a ``ValueError``), in a
fraction of a second and without allocating anything.

**Nesting.** The decoder recurses once per level; a document nested deeper than the
interpreter allows (a 100,000-deep body) is a :class:`JsonRefused` too, never a RecursionError.

**Slices.** ``json.loads`` and ``json.dumps`` are single C calls that hold the GIL for as long as
they run (seconds for a 100 MB body), so a thread that runs them stalls the event loop anyway.
:func:`loads` decodes a large top-level array or object one element at a time
(``JSONDecoder.raw_decode``), and :func:`dumps_chunks` encodes a large value one element at a
time; between elements the interpreter can hand the GIL to the event loop. The elements of the
payloads that are large (a UFM port, an NVUE interface, one command output) are small.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

# Values one decoded body may hold. A UFM port object is ~40 values and its JSON ~1.5 KB, so
# 8 M values is a 200,000-port UFM ports list (about 300 MB of JSON: more than the body cap
# allows anyway) and at most ~1 GB decoded; a body of empty objects or one-digit numbers
# reaches it at 16-24 MB.
MAX_VALUES = 8_000_000
SLICE_BYTES = 1 << 20  # texts shorter than this are decoded in one call (a few ms at most)
_DECODER = json.JSONDecoder()
_WS = " \t\n\r"


class JsonRefused(ValueError):
    """JSON that holds more values than allowed (``too_many``), or nests deeper than the decoder can."""

    def __init__(self, message: str, too_many: bool) -> None:
        super().__init__(message)
        self.too_many = too_many


def count_values(text: str | bytes) -> int:
    """An upper bound of the values ``text`` holds (see the module docstring)."""
    if isinstance(text, str):
        return text.count(",") + text.count("{") + text.count("[") + 1
    return text.count(b",") + text.count(b"{") + text.count(b"[") + 1


def loads(text: str | bytes, max_values: int = MAX_VALUES, what: str = "JSON") -> Any:
    """``json.loads(text)``, refusing more than ``max_values`` values and any nesting the decoder
    cannot follow (:class:`JsonRefused`); other errors are ``json``'s ``ValueError``."""
    n = count_values(text)
    if n > max_values:
        raise JsonRefused(f"{what} holds up to {n:,} values, more than the limit of {max_values:,}", True)
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode("utf-8-sig" if text[:3] == b"\xef\xbb\xbf" else "utf-8")
    try:
        if len(text) < SLICE_BYTES:
            return json.loads(text)
        return _sliced(text)
    except RecursionError:
        raise JsonRefused(f"{what} is nested deeper than the decoder can follow", False) from None


def _skip(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in _WS:
        i += 1
    return i


def _sliced(text: str) -> Any:
    """Decode a top-level array or object element by element (anything else in one call)."""
    i = _skip(text, 0)
    if i >= len(text) or text[i] not in "[{":
        return json.loads(text)
    value, i = _container(text, i, top=True)
    if _skip(text, i) != len(text):
        raise json.JSONDecodeError("Extra data", text, _skip(text, i))
    return value


def _container(text: str, i: int, top: bool) -> tuple[Any, int]:
    """The array or object at ``text[i]`` and the index after it, element by element. In the
    top-level object, an array value is walked the same way (``{"jobs": [...]}`` of Slurm: one
    huge value); anything deeper is one ``raw_decode`` (a port, a job, an interface: small)."""
    is_list = text[i] == "["
    out_l: list[Any] = []
    out_d: dict[str, Any] = {}
    close = "]" if is_list else "}"
    i = _skip(text, i + 1)
    if i < len(text) and text[i] == close:
        return (out_l if is_list else out_d), i + 1
    while True:
        if is_list:
            value, i = _DECODER.raw_decode(text, i)
            out_l.append(value)
        else:
            if i >= len(text) or text[i] != '"':
                raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, i)
            key, i = _DECODER.raw_decode(text, i)
            i = _skip(text, i)
            if i >= len(text) or text[i] != ":":
                raise json.JSONDecodeError("Expecting ':' delimiter", text, i)
            i = _skip(text, i + 1)
            value, i = _container(text, i, top=False) if top and text[i:i + 1] == "[" else _DECODER.raw_decode(text, i)
            out_d[key] = value
        i = _skip(text, i)
        if i < len(text) and text[i] == ",":
            i = _skip(text, i + 1)
            continue
        if i < len(text) and text[i] == close:
            return (out_l if is_list else out_d), i + 1
        raise json.JSONDecodeError(f"Expecting ',' or '{close}'", text, i)


def dumps_chunks(obj: Any, *, ensure_ascii: bool = False, depth: int = 0) -> Iterator[str]:
    """``json.dumps(obj, separators=(",", ":"), ensure_ascii=...)`` as pieces whose join is that
    text. Containers with many items, and the top few levels, are split into their items, so
    no single C call encodes a large part of a large payload."""
    if isinstance(obj, dict) and (len(obj) > 64 or depth < 5):
        yield "{"
        first = True
        for k, v in obj.items():
            key = json.dumps(k, ensure_ascii=ensure_ascii) if isinstance(k, str) else json.dumps({k: 0}, ensure_ascii=ensure_ascii)[1:-4]
            yield f"{key}:" if first else f",{key}:"
            yield from dumps_chunks(v, ensure_ascii=ensure_ascii, depth=depth + 1)
            first = False
        yield "}"
    elif isinstance(obj, list | tuple) and (len(obj) > 64 or depth < 5):
        yield "["
        for i, v in enumerate(obj):
            if i:
                yield ","
            yield from dumps_chunks(v, ensure_ascii=ensure_ascii, depth=depth + 1)
        yield "]"
    else:
        yield json.dumps(obj, separators=(",", ":"), ensure_ascii=ensure_ascii)
