"""Slurm host lists: ``gpu[001-004,010]`` -> ``gpu001 gpu002 gpu003 gpu004 gpu010``.

The syntax is Slurm's (``scontrol show hostnames``, ``src/common/hostlist.c``), checked against
Slurm 22.05's own expansion in ``tests/test_slurm_real.py``:

* a list is names separated by commas (outside brackets) or whitespace;
* a name holds any number of bracket groups, ``rack[1-2]-n[01-02]``, expanded as their
  cartesian product (the last group varies fastest); Slurm 22.05 refuses a plain suffix after
  the last group (``n[1-2]-ib``), which is accepted here: nothing is lost by reading it;
* a group holds numbers and ranges ``lo-hi`` separated by commas; a range is zero-padded to the
  width of ``lo`` as written (``[001-10]`` -> ``001`` .. ``010``, ``[9-11]`` -> ``9 10 11``);
  ``lo`` above ``hi``, an empty group, a nested or unbalanced bracket is an error.

Expansion is bounded (:data:`MAX_HOSTS`): ``n[0-999999999]`` is an error, not a gigabyte.
"""

from __future__ import annotations

import itertools
import re

# Hosts one list may expand to: the largest clusters have tens of thousands of nodes.
MAX_HOSTS = 1_000_000

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


class HostlistError(ValueError):
    """A host list that is not Slurm syntax; the message names what is wrong."""


def _group(text: str, where: str) -> list[str]:
    """The values of one bracket group's contents, in order."""
    if not text.strip():
        raise HostlistError(f"empty brackets in {where!r}")
    out: list[str] = []
    for part in text.split(","):
        m = _RANGE.match(part.strip())
        if m is None:
            raise HostlistError(f"{part.strip()!r} in {where!r} is not a number or a range lo-hi")
        lo_text, hi_text = m.group(1), m.group(2)
        lo = int(lo_text)
        hi = int(hi_text) if hi_text is not None else lo
        if hi < lo:
            raise HostlistError(f"range {part.strip()!r} in {where!r} runs backwards")
        if len(out) + hi - lo + 1 > MAX_HOSTS:
            raise HostlistError(f"{where!r} expands to more than {MAX_HOSTS} names")
        width = len(lo_text)
        out.extend(f"{n:0{width}d}" for n in range(lo, hi + 1))
    return out


def _name(item: str) -> list[str]:
    """One name with its bracket groups, expanded."""
    pieces: list[list[str]] = []
    pos = 0
    size = 1
    while pos < len(item):
        open_at = item.find("[", pos)
        close_at = item.find("]", pos)
        if close_at != -1 and (open_at == -1 or close_at < open_at):
            raise HostlistError(f"unbalanced ']' in {item!r}")
        if open_at == -1:
            pieces.append([item[pos:]])
            break
        if open_at > pos:
            pieces.append([item[pos:open_at]])
        end = item.find("]", open_at)
        if end == -1:
            raise HostlistError(f"unbalanced '[' in {item!r}")
        inner = item[open_at + 1:end]
        if "[" in inner:
            raise HostlistError(f"nested '[' in {item!r}")
        values = _group(inner, item)
        size *= len(values)
        if size > MAX_HOSTS:
            raise HostlistError(f"{item!r} expands to more than {MAX_HOSTS} names")
        pieces.append(values)
        pos = end + 1
    return ["".join(p) for p in itertools.product(*pieces)]


def _items(text: str) -> list[str]:
    """The list's names, split at commas and whitespace outside brackets."""
    items: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if depth == 0 and (ch == "," or ch.isspace()):
            if cur:
                items.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    if cur:
        items.append("".join(cur))
    return items


def expand(text: str) -> list[str]:
    """The names of a Slurm host list, in order, each once (at its first place)."""
    if not isinstance(text, str):
        raise HostlistError(f"a host list is text, not {type(text).__name__}")
    out: dict[str, None] = {}
    for item in _items(text):
        for name in _name(item):
            out[name] = None
            if len(out) > MAX_HOSTS:
                raise HostlistError(f"the host list expands to more than {MAX_HOSTS} names")
    return list(out)
