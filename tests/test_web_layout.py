"""The demo's pages as the browser lays them out (headless Chromium over DevTools, tests/cdp.py):
no edge label of a picture is covered by a box, no page is wider than a phone's screen (375 px)
except inside its scrolling tables and pictures, and no page logs a console message."""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.request
from pathlib import Path

from tests.cdp import LABELS_CLEAR, OVERFLOW, PAGE_WIDTH, Browser
from tests.test_browser import _require_chromium, serve

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "agent" / "demo" / "demo.jsonl.gz"


def _pages(base: str) -> list[str]:
    """The landing page, the fabric, a device, the runbooks, and one finding page per kind."""
    with urllib.request.urlopen(f"{base}/", timeout=30) as r:
        home = r.read().decode()
    by_kind: dict[str, str] = {}
    for path, kind in re.findall(r"<a href='(findings/[0-9a-f]{12})'>([a-z_]+)</a>", home):
        by_kind.setdefault(kind, path)
    return ["", "fabric", "devices/leaf01", "runbooks", *by_kind.values()]


async def _check(base: str, pages: list[str]) -> tuple[list[str], int]:
    problems, labels = [], 0
    async with Browser() as b:
        await b.resize(375, 800)
        for path in pages:
            nav = await b.load(f"{base}/{path}")
            if nav["console"]:
                problems.append(f"/{path}: console {nav['console'][:2]}")
            width = json.loads(await b.eval(PAGE_WIDTH))
            if width["page"] > 375:
                problems.append(f"/{path}: {width['page']} px wide on a 375 px screen: {await b.eval(OVERFLOW)}")
            for lab in json.loads(await b.eval(LABELS_CLEAR)):
                labels += 1
                if lab["covered"]:
                    problems.append(f"/{path}: edge label {lab['label']!r} is covered by {lab['covered']} box(es)")
    return problems, labels


def test_demo_pages_fit_a_narrow_screen_and_keep_their_labels_visible() -> None:
    _require_chromium()
    with serve(DEMO, speed=40) as base:
        deadline = time.monotonic() + 120
        while True:  # wait until the storms, the deadlock and the credit loop are on (the first act)
            pages = _pages(base)
            if sum(p.startswith("findings/") for p in pages) >= 6 or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert sum(p.startswith("findings/") for p in pages) >= 6, pages
        problems, labels = asyncio.run(_check(base, pages))
    print(f"{len(pages)} pages, {labels} edge labels checked")
    assert labels >= 6, "no edge label was checked: the pictures have none"
    assert not problems, "\n".join(problems)
