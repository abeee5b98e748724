"""The alert runbooks, shipped with the agent and served at ``/runbooks``.

``docs/runbooks.md`` is the one text (package data through ``agent/web/static/runbooks.md``,
a link to it): one ``## <AlertName>`` section per alert of ``dashboards/prometheus/alerts.yml``.
A finding page shows its kind's section (``#runbook``, the target of the finding alerts'
``runbook_url``) and ``/runbooks#<alertname>`` has them all (the agent alerts' ``runbook_url``).

The Markdown is the small subset the file uses (headings, paragraphs, ``-`` and ``1.`` lists
with continuation lines, ``**bold**``, ```code```, ``*emphasis*``, ``---``), rendered here so
the agent needs no Markdown library; tests/test_runbooks.py checks every section renders.
"""

from __future__ import annotations

import re
from functools import cache
from html import escape
from importlib import resources

# Finding kind -> the alert that fires for it (dashboards/prometheus/alerts.yml).
ALERT_OF_KIND = {
    "pfc_storm": "FabricmonPfcStorm",
    "pfc_deadlock": "FabricmonPfcDeadlock",
    "credit_deadlock": "FabricmonCreditDeadlock",
    "congestion": "FabricmonCongestionCritical",
    "packet_loss": "FabricmonPacketLoss",
    "link_degraded": "FabricmonLinkDegraded",
    "misconfig": "FabricmonMisconfig",
}
# Roles with an alert of their own: a PFC watchdog its port's counters contradict.
ALERT_OF_ROLE = {("pfc_storm", "watchdog"): "FabricmonPfcWatchdog"}


def alert_of(kind: str, role: str | None) -> str:
    """The alert (and runbook section) a finding of this kind and role raises ("" for none)."""
    return ALERT_OF_ROLE.get((kind, role or ""), ALERT_OF_KIND.get(kind, ""))


@cache
def source() -> str:
    return resources.files("fabricmon.agent.web").joinpath("static/runbooks.md").read_text(encoding="utf-8")


def sections() -> dict[str, str]:
    """``## Heading`` -> its Markdown body (up to the next ``##``)."""
    out: dict[str, str] = {}
    name = ""
    for line in source().splitlines():
        if line.startswith("## "):
            name = line[3:].strip()
            out[name] = ""
        elif name:
            out[name] += line + "\n"
    return out


def anchor(alert: str) -> str:
    return alert.lower()


_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_EM = re.compile(r"(?<![*\w])\*([^*\s][^*]*?)\*(?![*\w])")


def inline(text: str) -> str:
    """Escaped text with code spans, bold and emphasis (code spans are left alone inside)."""
    parts = _CODE.split(text)
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(f"<code>{escape(part)}</code>")
        else:
            s = escape(part, quote=False)
            out.append(_EM.sub(r"<em>\1</em>", _BOLD.sub(r"<b>\1</b>", s)))
    return "".join(out)


_ITEM = re.compile(r"^(\s*)(-|\d+\.)\s+(.*)$")


def render(md: str) -> str:
    """HTML of a Markdown body in the subset above."""
    html: list[str] = []
    para: list[str] = []
    items: list[str] = []
    kind = ""

    def flush() -> None:
        nonlocal kind
        if para:
            html.append(f"<p>{inline(' '.join(para))}</p>")
            para.clear()
        if items:
            html.append(f"<{kind}>" + "".join(f"<li>{inline(x)}</li>" for x in items) + f"</{kind}>")
            items.clear()

    for line in md.splitlines():
        m = _ITEM.match(line)
        if not line.strip() or line.strip() == "---":
            flush()
        elif line.startswith("#"):
            flush()
            level = min(len(line) - len(line.lstrip("#")) + 1, 6)
            html.append(f"<h{level}>{inline(line.lstrip('#').strip())}</h{level}>")
        elif m and not m.group(1):
            if para or (items and kind != ("ol" if m.group(2)[0].isdigit() else "ul")):
                flush()
            kind = "ol" if m.group(2)[0].isdigit() else "ul"
            items.append(m.group(3))
        elif items and line.startswith(" "):
            items[-1] += " " + line.strip()
        else:
            if items:
                flush()
            para.append(line.strip())
    flush()
    return "".join(html)


def section_html(alert: str) -> str:
    """One alert's runbook as HTML ("" when the file has no section for it)."""
    body = sections().get(alert)
    return "" if body is None else render(body)


def page_body() -> str:
    """Every section, each under an anchor named after its alert in lower case."""
    toc = "".join(f"<li><a href='runbooks#{anchor(n)}'>{escape(n)}</a></li>" for n in sections())
    parts = [f"<h2 id='{anchor(n)}'>{escape(n)}</h2>{render(body)}" for n, body in sections().items()]
    return f"<h1>Runbooks</h1><ul>{toc}</ul>{''.join(parts)}"
