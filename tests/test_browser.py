"""The web view in a real browser: headless Chromium against ``fabricmon replay --serve``.

For the storm and the deadlock recordings: every page loads without a console message
(Chromium logs console output and uncaught errors as ``CONSOLE`` lines with
``--enable-logging=stderr``), the finding page's SVG, as the browser built the DOM
(``--dump-dom``), has the nodes and edges the recording's truth lines imply, and a
screenshot of each page is written to the test output (``$TEST_OUTPUT_DIR/browser``, else
pytest's temporary directory). scripts/screenshots reuses :func:`chromium` and :func:`serve`.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCEN = ROOT / "tests" / "scenarios"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--enable-logging=stderr", "--v=0", "--hide-scrollbars"]


def end_session(proc: subprocess.Popen) -> None:
    """Stop a browser started with ``start_new_session`` and everything it started: Chromium's
    helpers (crashpad, zygote, GPU and renderer processes) outlive the main process for a moment
    and keep writing into the profile, so removing the profile right after the main process ends
    can find a folder (``Default``) that is not empty yet."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            continue
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _group_alive(proc.pid):
            time.sleep(0.05)
        if not _group_alive(proc.pid):
            return


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def chromium(url: str, *, screenshot: Path | None = None, size: str = "1280,1000") -> tuple[str, list[str]]:
    """Load ``url`` once in a fresh profile: (the DOM as serialised, console lines)."""
    with tempfile.TemporaryDirectory(prefix="fabricmon-chromium-") as profile:
        args = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", f"--window-size={size}"]
        args += [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
        proc = subprocess.Popen([*args, url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=120)
        finally:
            end_session(proc)
    assert proc.returncode == 0, f"chromium exited {proc.returncode} on {url}: {err[-2000:]}"
    return out, [ln for ln in err.splitlines() if ":CONSOLE" in ln]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serve(recording: Path, speed: float | None = None, args: tuple[str, ...] = ()) -> Iterator[str]:
    """``fabricmon replay --serve RECORDING``: ``--fast`` until it finished, or paced at ``speed`` once it answers;
    ``args``: more replay options (``--max-line-bytes`` for a poll of more than 50,000 ports).

    Yields the base URL; stops the process afterwards.
    """
    port = _free_port()
    listen = f"127.0.0.1:{port}"
    pace = ["--fast"] if speed is None else ["--speed", str(speed)]
    cmd = [sys.executable, "-m", "fabricmon.agent", "replay", *pace, *args, "--quiet", str(recording), "--serve", listen]
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True)
        try:
            deadline = time.monotonic() + 120
            while True:
                err.seek(0)
                if ("still serving" in err.read()) if speed is None else _up(port):
                    break
                assert proc.poll() is None and time.monotonic() < deadline, f"{cmd} did not come up"
                time.sleep(0.2)
            yield f"http://{listen}"
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def _up(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
            return True
    except OSError:
        return False


def truth(recording: Path) -> list[dict]:
    with gzip.open(recording, "rt") as f:
        return [d for d in map(json.loads, f) if d.get("type") == "truth"]


def finding_url(base: str, kind: str) -> str:
    """The finding page of the first finding of ``kind``, found through the summary page's links."""
    with urllib.request.urlopen(f"{base}/", timeout=30) as r:
        page = r.read().decode()
    ids = re.findall(rf"<a href='(findings/[0-9a-f]{{12}})'>{kind}</a>", page)
    assert ids, f"no {kind} finding linked from / at {base}"
    return f"{base}/{ids[0]}"


def svg_structure(dom: str) -> tuple[set[str], set[tuple[str, str]]]:
    """(data-node values, paused (data-from, data-to) pairs) of the finding picture."""
    pic = dom[dom.index('id="picture"'):]
    pic = pic[: pic.index("</svg>")]
    nodes = set(re.findall(r'data-node="([^"]*)"', pic))
    edges = set(re.findall(r'class="edge paused[^"]*" data-from="([^"]*)" data-to="([^"]*)"', pic))
    return nodes, edges


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory) -> Path:
    base = os.environ.get("TEST_OUTPUT_DIR")
    d = Path(base) / "browser" if base else tmp_path_factory.mktemp("browser")
    d.mkdir(parents=True, exist_ok=True)
    return d


def _require_chromium() -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip("headless Chromium is not installed (scripts/test installs the Debian chromium package)")


def _pages_clean_and_shot(base: str, finding: str, target: str, out: Path, stem: str) -> str:
    """Every page loads without console output and is screenshotted; returns the finding page's DOM."""
    dom = ""
    for name, url in (("summary", f"{base}/"), ("fabric", f"{base}/fabric"), ("finding", finding),
                      ("target", f"{base}/targets/{target}")):
        d, console = chromium(url)
        assert not console, f"{url}: console output {console}"
        assert "<main>" in d, f"{url}: no page body in the DOM"
        chromium(url, screenshot=out / f"{stem}-{name}.png")
        assert (out / f"{stem}-{name}.png").stat().st_size > 1000
        if name == "finding":
            dom = d
    return dom


def test_storm_page_draws_the_pause_tree(out_dir) -> None:
    _require_chromium()
    rec = SCEN / "nic_pause_storm_arista.jsonl.gz"
    lines = truth(rec)
    origin = next(t for t in lines if t["role"] == "origin")
    victims = {t["device"] for t in lines if t["role"] == "victim"}
    with serve(rec) as base:
        dom = _pages_clean_and_shot(base, finding_url(base, "pfc_storm"), origin["device"], out_dir, "storm")
    nodes, edges = svg_structure(dom)
    # the truth's origin is the switch port the pausing NIC (peer) is cabled to: that cable is paused from the NIC
    assert {origin["device"], origin["peer_device"], *victims} <= nodes, nodes
    assert (origin["peer_device"], origin["device"]) in edges, edges
    assert {dst for _, dst in edges} >= victims, edges
    reach, frontier = {origin["peer_device"]}, [origin["peer_device"]]
    while frontier:  # a tree: every victim is reached from the pausing NIC along the arrows
        n = frontier.pop()
        for a, b in edges:
            if a == n and b not in reach:
                reach.add(b)
                frontier.append(b)
    assert victims <= reach, (victims, edges)


def test_deadlock_page_draws_the_cycle(out_dir) -> None:
    _require_chromium()
    rec = SCEN / "pfc_deadlock.jsonl.gz"
    members = {f"{t['device']}:{t['port']}" for t in truth(rec) if t["role"] == "member"}
    with serve(rec) as base:
        dom = _pages_clean_and_shot(base, finding_url(base, "pfc_deadlock"), "spine01", out_dir, "deadlock")
    nodes, edges = svg_structure(dom)
    assert nodes == members, nodes
    assert len(edges) == len(members), edges
    assert {a for a, _ in edges} == members and {b for _, b in edges} == members, edges
    n, seen = next(iter(members)), set()
    nxt = dict(edges)
    while n not in seen:  # one cycle through all members
        seen.add(n)
        n = nxt[n]
    assert seen == members


def test_job_page_draws_where_the_job_runs_and_what_touched_it(out_dir) -> None:
    """``/jobs/<id>`` on the job-impact scenario: the storm's finding page links the two jobs it
    touched; each job page loads clean, names the storm (or says none touched it), and its
    picture has the job's switches and host groups."""
    _require_chromium()
    rec = SCEN / "storm_two_of_three_jobs.jsonl.gz"
    with serve(rec) as base:
        finding = finding_url(base, "pfc_storm")
        fdom, console = chromium(finding)
        assert not console, console
        assert 'href="jobs/48211"' in fdom and 'href="jobs/48212"' in fdom and "/jobs/48213" not in fdom
        want = {"48212": ("pfc_storm (critical)", {"sw:leaf01", "sw:leaf02", "hosts:gpu01", "hosts:gpu05"}),
                "48213": ("no fabric finding touches this job's 3 hosts", {"sw:leaf03", "hosts:gpu07"})}
        for jid, (verdict, nodes) in want.items():
            url = f"{base}/jobs/{jid}"
            dom, console = chromium(url)
            assert not console, f"{url}: console output {console}"
            shown = re.search(r'<p id="verdict"><b>(.*?)</b>', dom)
            assert shown and verdict in shown.group(1).replace("&#x27;", "'").replace("&#39;", "'"), dom[:2000]
            pic = dom[dom.index('id="picture"'):]
            assert set(re.findall(r'data-node="([^"]*)"', pic[: pic.index("</svg>")])) == nodes
            chromium(url, screenshot=out_dir / f"job-{jid}.png")
            assert (out_dir / f"job-{jid}.png").stat().st_size > 1000
