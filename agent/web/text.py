"""Numbers and evidence as a person reads them: ``142 Gbit/s``, ``19.3 %``, ``yes``, tables.

Evidence is the detector's dict of facts (``agent/detector/rules``); its keys follow naming
conventions (``_per_s``, ``_bytes``, ``_ratio``, ``_s``), so the unit of a value is read from
its key, never guessed from its size. Nested dicts and lists of dicts become tables, lists of
names become comma lists, booleans ``yes``/``no``; nothing is shown as a Python repr.
"""

from __future__ import annotations

import math
import time
from html import escape
from typing import Any

_PREFIX = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def number(v: float, digits: int = 3) -> str:
    """``v`` with ``digits`` significant digits, without an exponent below 10^15, whole
    numbers as they are (``47618``, ``0.0036``, ``1.5e-07``)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    if not math.isfinite(v):
        return "—" if math.isnan(v) else ("∞" if v > 0 else "-∞")
    if float(v).is_integer() and abs(v) < 1e15:
        return f"{int(v):d}"
    if v != 0 and (abs(v) >= 1e15 or abs(v) < 1e-4):
        return f"{v:.{digits - 1}e}"
    s = f"{v:.{digits}g}"
    return f"{float(s):f}".rstrip("0").rstrip(".") if "e" in s else s


def si(v: float, unit: str, digits: int = 3) -> str:
    """``142 Gbit/s``, ``3.1 MB``, ``12 /s``: SI prefixes from k to P."""
    if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
        return number(v) + (f" {unit}" if unit else "")
    for scale, p in _PREFIX:
        if abs(v) >= scale:
            return f"{number(v / scale, digits)} {p}{unit}"
    return f"{number(v, digits)} {unit}".rstrip()


def bits_per_s(bytes_per_s: float) -> str:
    return si(bytes_per_s * 8, "bit/s")


def percent(ratio: float) -> str:
    """A 0..1 ratio as a percentage: ``19.3 %``, ``0.0125 %``, ``100 %``."""
    if not isinstance(ratio, int | float) or isinstance(ratio, bool) or not math.isfinite(ratio):
        return number(ratio)
    if 0 < abs(ratio) < 1e-4:
        return "<0.01 %"
    return f"{number(ratio * 100, 3)} %"


def seconds(s: float) -> str:
    if not isinstance(s, int | float) or isinstance(s, bool) or not math.isfinite(s):
        return number(s)
    if abs(s) >= 7200:
        return f"{number(s / 3600, 3)} h"
    if abs(s) >= 120:
        return f"{number(s / 60, 3)} min"
    if 0 < abs(s) < 1:
        return f"{number(s * 1000, 3)} ms"
    return f"{number(s, 3)} s"


# Key suffix -> formatter of the value (the detector's naming conventions). Longest first.
_BY_SUFFIX: tuple[tuple[str, Any], ...] = (
    ("_bytes_per_s", bits_per_s),
    ("_bits_per_s", lambda v: si(v, "bit/s")),
    ("_bps", lambda v: si(v, "bit/s")),
    ("_per_s", lambda v: si(v, "/s")),
    ("_ratio", percent),
    ("_fraction", percent),
    ("_share", percent),
    ("_bytes", lambda v: si(v, "B")),
    ("_seconds", seconds),
    ("_s", seconds),
    ("_ticks", lambda v: si(v, "ticks")),
    ("_packets", lambda v: si(v, "packets")),
    ("_frames", lambda v: si(v, "frames")),
    ("_gbps", lambda v: f"{number(v)} Gbit/s"),
    ("_celsius", lambda v: f"{number(v)} °C"),
)
# Keys whose number is a time of day (Unix seconds).
_TIMES = ("start", "end", "since", "until", "t", "at")


# Evidence keys whose words are not their own (the unit goes to the value: "sent 0 bit/s").
# A stalled InfiniBand port's (agent/detector/analyses/ib.py) first: it is read at 3 a.m.
LABELS = {
    "stalled": "stalled (holds data, sends nothing)",
    "blocked_because": "why it is blocked",
    "held_data_because": "why it holds data",
    "sent_bytes_per_s": "sent",
    "peer_received_bytes_per_s": "its cable peer received",
    "xmit_wait_ticks_per_s": "XmitWait (waiting for credits)",
    "xmit_wait_fraction": "share of the interval waiting (XmitWait x tick)",
    "xmit_wait_ratio": "XmitWait / (XmitWait + XmitData)",
    "xmit_wait_tick_from": "XmitWait tick from",
    "xmit_wait_at_cap": "XmitWait at its 32-bit cap",
    "xmit_wait_saturated": "XmitWait saturated",
    "tx_discards": "discarded at the queue head (this interval)",
    "last_blocked_s_ago": "last seen blocked",
    "leaky": "leaky (discards at the queue head)",
    "sent_line_fraction": "sent (share of line rate)",
    "rx_pause_fraction": "share of time held paused by its peer",
    "tx_pause_fraction": "share of time holding its peer paused",
    "tx_progress": "transmit progress",
}
# Keys whose unit the suffix does not say.
_UNITS = {"xmit_wait_ticks_per_s": lambda v: si(v, "ticks/s"), "last_blocked_s_ago": lambda v: f"{seconds(v)} ago"}


def stalled(f: Any) -> bool:
    """A stalled port's finding (``credit_deadlock`` role ``stalled``; before that role existed,
    any finding whose evidence says ``stalled: true`` about its port alone, not a loop member)."""
    return f.role == "stalled" or (f.evidence.get("stalled") is True and not f.evidence.get("cycle"))


def label(key: str) -> str:
    """``rx_pause_frames_per_s`` -> ``rx pause frames per s``: keys read as words."""
    return LABELS.get(key) or key.replace("_", " ")


def value(key: str, v: Any) -> str:
    """One evidence value as text (HTML-escaped), its unit read from its key."""
    if v is None or v == "":
        return "<span class='muted'>—</span>"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int | float):
        if key in _UNITS:
            return escape(_UNITS[key](v))
        for suffix, fmt in _BY_SUFFIX:
            if key.endswith(suffix):
                return escape(fmt(v))
        if key in _TIMES or key.endswith(("_at", "_time")):
            return escape(time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(v)))
        return escape(number(v, 4))
    if isinstance(v, dict):
        return table(v)
    if isinstance(v, list | tuple):
        if v and all(isinstance(x, dict) for x in v):
            return rows_table(v)
        if len(v) > 1 and all(isinstance(x, str) and " " in x for x in v):  # sentences: one a line
            return "<ul class='because'>" + "".join(f"<li>{escape(x)}</li>" for x in v) + "</ul>"
        return escape(", ".join(_scalar(x) for x in v)) if v else "<span class='muted'>none</span>"
    return escape(str(v))


def _scalar(x: Any) -> str:
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return number(x, 4)
    return str(x)


def table(ev: dict[str, Any], head: tuple[str, str] | None = None) -> str:
    """A dict as a two-column table (nested dicts nest); "" when empty."""
    rows = "".join(f"<tr><th scope='row'>{escape(label(str(k)))}</th><td>{value(str(k), v)}</td></tr>" for k, v in ev.items())
    if not rows:
        return ""
    top = f"<tr><th>{escape(head[0])}</th><th>{escape(head[1])}</th></tr>" if head else ""
    return f"<table class='kv'>{top}{rows}</table>"


def rows_table(items: list[dict[str, Any]]) -> str:
    """A list of dicts as one table, a column per key (in first-seen order)."""
    cols = list(dict.fromkeys(k for it in items for k in it))
    head = "".join(f"<th>{escape(label(str(c)))}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{value(str(c), it.get(c))}</td>" for c in cols) + "</tr>" for it in items)
    return f"<table class='rows'><tr>{head}</tr>{body}</table>"


def fields(pairs: list[tuple[str, Any]]) -> str:
    """``label <b>value</b> · ...`` for the pairs whose value is set: an empty field prints
    nothing, not its label."""
    shown = [f"{escape(k)} <b>{escape(str(v))}</b>" for k, v in pairs if v is not None and v != ""]
    return " · ".join(shown)
