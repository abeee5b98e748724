"""Every string a payload puts into a parse result, made safe for every later stage.

A device may send anything in a JSON string: a lone surrogate (``"\\ud800"`` is valid JSON,
RFC 8259 section 8.2, but no UTF-8 encoder accepts it), control characters, or a name of
megabytes. Left in a device or port name it would fail every later ``/metrics`` render, the
recording writer and the state file. :func:`sanitize_result` runs once on every parse result
(:meth:`fabricmon.collectors.base.Collector.parse_poll`), so nothing after the parser ever
sees such a string:

- code points no UTF-8 encoder accepts (the surrogates U+D800..U+DFFF) become U+FFFD, the
  Unicode replacement character;
- control characters (C0 U+0000..U+001F, DEL and C1 U+007F..U+009F) are removed: no real
  device, port or GUID name has them, and a newline in a label breaks line-based readers;
- names and label values are cut to :data:`MAX_NAME` characters, warnings and target facts
  to :data:`MAX_TEXT`.
"""

from __future__ import annotations

import re
from itertools import chain
from operator import attrgetter, itemgetter
from typing import Any

from fabricmon.core.model import JobInfo, ParseResult

# Longest name or label value kept. The longest names the sources define are shorter: an SNMP
# DisplayString (ifName, ifAlias, sysName) is at most 255 octets (RFC 2579), an InfiniBand
# NodeDescription 64 octets (IBTA spec vol. 1, NodeDescription attribute); 256 keeps every real
# name whole and bounds what one hostile string costs in every series that carries it.
MAX_NAME = 256
# Longest warning or target_info value kept: these are sentences, one per problem.
MAX_TEXT = 1024

_BAD = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def _fix(m: re.Match[str]) -> str:
    return "\ufffd" if m.group() >= "\ud800" else ""


def clean(text: Any, cap: int = MAX_NAME) -> str:
    """``text`` without surrogates (U+FFFD instead) and control characters, at most ``cap`` long."""
    if not isinstance(text, str):
        text = str(text)
    if not (text.isascii() and text.isprintable()):  # the fast path: printable ASCII is safe
        text = _BAD.sub(_fix, text)
    return text if len(text) <= cap else text[:cap]


def _ok(text: Any, cap: int = MAX_NAME) -> bool:
    return isinstance(text, str) and len(text) <= cap and text.isascii() and text.isprintable()


def _clean_sub(sub: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(clean(v) if isinstance(v, str) else v for v in sub)


def _all_ok(values: set[Any]) -> bool:
    """Every value is :func:`_ok`; checked on all of them joined, in C (a poll's port infos
    have about 100,000 distinct GUIDs), one by one only when one is not a string."""
    try:
        joined = "".join(values)
    except TypeError:
        return all(_ok(v) for v in values)
    return joined.isascii() and joined.isprintable() and max(map(len, values), default=0) <= MAX_NAME


_DEVICE, _PORT, _SUB_OF_GAUGE = attrgetter("device"), attrgetter("port"), attrgetter("sub")
_SUB = itemgetter(1)  # of a series key (counter, sub)
_LINK_FIELDS = attrgetter("device", "port", "peer_device", "peer_port")
_PORT_FIELDS = attrgetter("device", "port", "guid", "lid", "alias", "label")
_DEVICE_FIELDS = attrgetter("name", "kind", "guid", "description", "model")


def _clean_job(job: JobInfo) -> JobInfo:
    """A job with its id, host names, aliases and labels cleaned like device names (they become
    label values and join device names)."""
    texts = [job.id, *job.hosts, *job.aliases, *(v for kv in job.labels for v in kv)]
    if all(_ok(v) for v in texts):
        return job
    return JobInfo(clean(job.id), tuple(clean(h) for h in job.hosts), job.start, tuple(clean(a) for a in job.aliases),
                   tuple((clean(k), clean(v)) for k, v in job.labels))


def sanitize_result(result: ParseResult) -> ParseResult:
    """``result`` with every string made safe (see the module docstring), changed in place.

    Names repeat across thousands of readings, so each distinct name and sub-label tuple is
    checked once (the counters' port groups and distinct keys, C-level ``map`` over the
    gauges); a result whose strings are all printable ASCII of sane length (the normal case)
    is not rewritten.
    """
    _readings(result)
    _facts(result)
    result.warnings = [clean(w, MAX_TEXT) for w in result.warnings]
    result.target_info = {clean(k): clean(v, MAX_TEXT) for k, v in result.target_info.items()}
    return result


def _readings(result: ParseResult) -> None:
    """Device, port and sub-label strings of the counters and gauges."""
    counters, gauges = result.counters, result.gauges
    names = set(chain.from_iterable(counters.ports)) | set(map(_DEVICE, gauges)) | set(map(_PORT, gauges))
    if not _all_ok(names):
        counters.relabel(port=lambda d, p: (clean(d), clean(p)))
        for g in gauges:
            g.device = clean(g.device)
            g.port = clean(g.port)
    subs = set(map(_SUB, counters.distinct_keys())) | set(map(_SUB_OF_GAUGE, gauges))
    if not _all_ok({v for sub in subs for v in sub if isinstance(v, str)}):
        counters.relabel(key=lambda c, sub: (c, _clean_sub(sub)))
        for g in gauges:
            if g.sub:
                g.sub = _clean_sub(g.sub)


def _facts(result: ParseResult) -> None:
    """The strings of ports, devices, links and device clocks."""
    if not _all_ok(set(chain.from_iterable(map(_PORT_FIELDS, result.ports)))):
        for p in result.ports:
            p.device, p.port, p.guid, p.lid, p.alias, p.label = (clean(v) for v in _PORT_FIELDS(p))
    if not _all_ok(set(chain.from_iterable(map(_DEVICE_FIELDS, result.devices)))):
        for d in result.devices:
            d.name, d.kind, d.guid, d.description, d.model = (clean(v) for v in _DEVICE_FIELDS(d))
    if result.links is not None and not _all_ok(set(chain.from_iterable(map(_LINK_FIELDS, result.links)))):
        result.links = [type(ln)(clean(ln.device), clean(ln.port), clean(ln.peer_device), clean(ln.peer_port)) for ln in result.links]
    if not _all_ok(set(result.clocks)):
        result.clocks = {clean(k): v for k, v in result.clocks.items()}
    if result.inventory is not None:
        result.inventory = [_clean_job(j) for j in result.inventory]
