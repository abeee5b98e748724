"""Headless Chromium driven over the DevTools protocol: load a page, then ask the page itself.

``--dump-dom`` (tests/test_browser.py) gives the DOM; this gives what only the browser knows:
the navigation timing of the load (``performance.getEntriesByType("navigation")``), the page's
width against the window's (a narrow screen), and the boxes the browser laid out (an SVG label
hidden behind a box). Used by tests/test_fabric_view.py, tests/test_web_layout.py and
bench/fabric_view.py. One browser per :class:`Browser`; each :meth:`Browser.load` is a fresh
navigation of its one tab.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import subprocess
import tempfile
import time
from typing import Any

import aiohttp

from tests.test_browser import CHROMIUM, FLAGS, end_session


class Browser:
    def __init__(self, size: str = "1280,1000") -> None:
        self.size = size
        self._ids = itertools.count(1)

    async def __aenter__(self) -> Browser:
        self._profile = tempfile.TemporaryDirectory(prefix="fabricmon-cdp-")
        args = [CHROMIUM, *FLAGS, f"--user-data-dir={self._profile.name}", f"--window-size={self.size}",
                "--remote-debugging-port=0", "--remote-allow-origins=*", "about:blank"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        ws_url = await asyncio.to_thread(self._devtools_url)
        port = re.search(r":(\d+)/", ws_url).group(1)  # type: ignore[union-attr]
        self.http = aiohttp.ClientSession()
        async with self.http.get(f"http://127.0.0.1:{port}/json/list") as r:
            page = next(t for t in await r.json() if t["type"] == "page")
        self.ws = await self.http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=64 * 1024 * 1024)
        self.events: list[dict[str, Any]] = []
        await self.call("Page.enable")
        await self.call("Runtime.enable")
        return self

    def _devtools_url(self) -> str:
        deadline = time.monotonic() + 60
        assert self.proc.stderr is not None
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                return m.group(1)
            if not line and self.proc.poll() is not None:
                break
        raise AssertionError("chromium did not start its DevTools endpoint")

    async def __aexit__(self, *exc: object) -> None:
        await self.ws.close()
        await self.http.close()
        end_session(self.proc)  # the browser and its helpers, before their profile goes
        self._profile.cleanup()

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        mid = next(self._ids)
        await self.ws.send_json({"id": mid, "method": method, "params": params})
        while True:
            msg = json.loads((await self.ws.receive(timeout=120)).data)
            if msg.get("id") == mid:
                if "error" in msg:
                    raise AssertionError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    async def _event(self, name: str, timeout: float) -> dict[str, Any]:
        for i, e in enumerate(self.events):
            if e.get("method") == name:
                return self.events.pop(i)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = json.loads((await self.ws.receive(timeout=max(0.1, deadline - time.monotonic()))).data)
            if msg.get("method") == name:
                return msg
            self.events.append(msg)
        raise AssertionError(f"no {name} within {timeout} s")

    async def load(self, url: str, timeout: float = 60.0) -> dict[str, Any]:
        """Navigate and wait for the load event; returns the navigation timing (ms from the
        start of the navigation) and the body's size, and the console messages and errors."""
        self.events.clear()
        await self.call("Page.navigate", url=url)
        await self._event("Page.loadEventFired", timeout)
        nav = await self.eval("JSON.stringify(performance.getEntriesByType('navigation')[0])")
        console = [e for e in self.events if e.get("method") in ("Runtime.consoleAPICalled", "Runtime.exceptionThrown")]
        return {**json.loads(nav), "console": console}

    async def eval(self, expression: str) -> Any:
        r = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in r:
            raise AssertionError(f"{expression[:80]}: {r['exceptionDetails']}")
        return r["result"].get("value")

    async def resize(self, width: int, height: int) -> None:
        await self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=True)


# In the page: every edge label's box, and whether it crosses a node box of the same picture.
LABELS_CLEAR = """JSON.stringify([...document.querySelectorAll('svg.graph')].flatMap(svg => {
  const boxes = [...svg.querySelectorAll('g.node rect')].map(r => r.getBoundingClientRect());
  return [...svg.querySelectorAll('text.elabel')].map(t => {
    const b = t.getBoundingClientRect();
    const hit = boxes.filter(r => b.left < r.right - 0.5 && r.left < b.right - 0.5 && b.top < r.bottom - 0.5 && r.top < b.bottom - 0.5);
    return {label: t.textContent, covered: hit.length};
  });
}))"""

# In the page: how wide the document is against the window (a page cut off on a narrow screen
# is wider than its window), and the widest element that is not inside a scrolling box.
PAGE_WIDTH = """JSON.stringify({page: document.documentElement.scrollWidth, window: window.innerWidth})"""

# In the page: elements that reach past the window's right edge outside a scrolling box.
OVERFLOW = """JSON.stringify([...document.querySelectorAll('main *')].filter(e => e.getBoundingClientRect().right > window.innerWidth + 1
  && !e.closest('.scroll') && !e.closest('figure')).slice(0, 5).map(e => e.tagName + ' ' + (e.textContent || '').slice(0, 60)))"""
