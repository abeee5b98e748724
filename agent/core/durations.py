"""Durations in configuration: one type for every duration option of the agent and of every source.

A duration is written the way Prometheus writes one: a number with a unit, ``250ms``, ``10s``,
``5m``, ``1h``, ``1d``, or units in sequence (``1m30s``). Two older spellings still load, with
a deprecation warning at their line (:func:`old_spellings`, which config validation calls):
a plain number of seconds (``topology_interval: 600``) and a key ending in ``_s`` holding
seconds (``window_s: 600`` for ``window``). Collectors declare their duration options with
:data:`Duration` (or :func:`bounded`), so every source accepts the same spellings.
"""

from __future__ import annotations

import functools
import math
import re
import types
import typing
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator
from pydantic.fields import FieldInfo

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+")
_PLAIN = re.compile(r"\d+(?:\.\d+)?")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SPELL = (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0))


class _DurationMark:
    """Marks a field as a duration in its ``Annotated`` metadata (pydantic ignores it)."""

    def __repr__(self) -> str:
        return "DurationMark"


MARK = _DurationMark()


def parse_duration(v: Any) -> float:
    """Seconds of ``10s``, ``5m``, ``250ms``, ``1h30m``, or of a plain number of seconds."""
    if isinstance(v, bool):
        raise ValueError("expected a duration like 10s, 5m or 250ms")
    if isinstance(v, int | float):
        seconds = float(v)
    else:
        text = str(v).strip()
        if _PLAIN.fullmatch(text):
            seconds = float(text)
        elif _WHOLE.fullmatch(text):
            seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(text))
        else:
            raise ValueError(f"invalid duration {v!r}: expected a number with a unit, like 10s, 5m or 250ms")
    if not math.isfinite(seconds):
        raise ValueError("a duration must be a finite number of seconds")
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    return seconds


def format_duration(seconds: float) -> str:
    """The spelling of ``seconds`` in the largest unit that holds it whole: 600 -> ``10m``,
    0.25 -> ``250ms``, 90 -> ``90s``."""
    if seconds == 0:
        return "0s"
    for unit, size in _SPELL:
        n = seconds / size
        if n >= 1 and n == int(n):
            return f"{int(n)}{unit}"
    ms = seconds * 1000
    return f"{int(ms)}ms" if ms == int(ms) else f"{seconds:g}s"


Duration = Annotated[float, BeforeValidator(parse_duration), MARK]


def bounded(lo: float, hi: float, why: str) -> Any:
    """A duration type limited to ``lo``..``hi`` seconds; the error says ``why``."""
    def check(v: Any) -> float:
        seconds = parse_duration(v)
        if not lo <= seconds <= hi:
            raise ValueError(f"must be between {format_duration(lo) if lo else '0s'} and {format_duration(hi)} ({why})")
        return seconds
    return Annotated[float, BeforeValidator(check), MARK]


def _marked(annotation: Any) -> bool:
    if typing.get_origin(annotation) is Annotated:
        return any(m is MARK for m in annotation.__metadata__) or _marked(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_marked(a) for a in typing.get_args(annotation))
    return False


def is_duration(field: FieldInfo) -> bool:
    """Whether a model field is a duration (declared with :data:`Duration` or :func:`bounded`)."""
    return any(m is MARK for m in field.metadata) or _marked(field.annotation)


@functools.cache
def duration_fields(model: type[BaseModel]) -> frozenset[str]:
    """The names (aliases where set) of ``model``'s duration fields. Once per model: a config of
    40,000 targets asked it 80,000 times (27 of a 56 s reload, issue 32)."""
    return frozenset(f.alias or name for name, f in model.model_fields.items() if is_duration(f))


@functools.cache
def _field_names(model: type[BaseModel]) -> frozenset[str]:
    return frozenset(f.alias or name for name, f in model.model_fields.items())


def _number_of_seconds(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    return isinstance(v, int | float) or (isinstance(v, str) and _PLAIN.fullmatch(v.strip()) is not None)


def old_spellings(model: type[BaseModel], raw: dict[Any, Any]) -> tuple[dict[Any, Any], list[tuple[Any, Any, str]]]:
    """``raw`` with the old spellings of ``model``'s durations taken in, and what to warn about.

    Returns the mapping to validate (a key ``X_s`` renamed to ``X`` when ``X`` is a duration
    field that is not also given) and ``(key, new key, message)`` per old spelling: ``key`` is
    where it was written, ``new key`` what it became. Values that are not numbers are left to
    validation, which reports them as errors."""
    fields = duration_fields(model)
    known = _field_names(model)
    out: dict[Any, Any] = {}
    found: list[tuple[Any, Any, str]] = []
    for key, value in raw.items():
        new = key
        if isinstance(key, str) and key.endswith("_s") and key not in known and key[:-2] in fields and key[:-2] not in raw:
            new = key[:-2]
        if new in fields and (new != key or _number_of_seconds(value)):
            try:
                spelt = format_duration(parse_duration(value))
            except ValueError:  # validation reports the value; the warning still names the new key
                spelt = str(value)
            old = f"{key}: {value}" if new != key else f"a plain number of seconds ({value})"
            found.append((key, new, f"{old} is deprecated: write {new}: {spelt}"))
        out[new] = value
    return out, found
