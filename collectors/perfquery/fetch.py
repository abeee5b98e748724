"""I/O for the perfquery collector: run ``ibnetdiscover`` and ``perfquery`` on this node.

On every topology refresh (the first poll, then every ``topology_interval``) it also reads each
device's PortSamplesControl with ``perfquery -c``: once per switch (its first connected port)
and once per CA port. The Tick there is a property of the device and its link speed (the
Linux qib driver derives it from the active speed; NVIDIA gives one value per ASIC
generation), so it can only change when the topology does (a new device, a link retrained at
another speed): asking on every poll would double the MAD traffic for nothing.

Every command runs through :func:`fabricmon.collectors.command.run_command`: its own session,
killed on timeout or cancellation with everything it started, its output capped
(``PERFQUERY_MAX_OUTPUT``, ``IBNETDISCOVER_MAX_OUTPUT``). The calls of a poll go through
:func:`fabricmon.collectors.fanout.for_each` (``concurrency`` workers, never a task per port), and
nothing is parsed on the event loop: an output is checked by a scan of its block headers, and
the topology is parsed in a thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from fabricmon.collectors.base import ErrorReason, FetchError
from fabricmon.collectors.command import IBNETDISCOVER_MAX_OUTPUT, run_command
from fabricmon.collectors.fanout import for_each
from fabricmon.collectors.perfquery.parse import (
    CAPMASK2_ADDL_EXT,
    Topology,
    parse_ibnetdiscover,
    parse_perfquery,
    parse_samples_control,
)
from fabricmon.collectors.reaper import REAPER
from fabricmon.core.threads import in_daemon_thread

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class QueryTarget:
    """One perfquery call: a switch (all its connected ports) or one CA port, by LID."""

    key: tuple[str, int]  # (node GUID, LID)
    lid: int
    ports: tuple[int, ...]


def query_targets(topo: Topology, include_cas: bool = True) -> list[QueryTarget]:
    """What to ask perfquery for, in topology order. Ports without a LID cannot be addressed."""
    targets: list[QueryTarget] = []
    for node in topo.nodes.values():
        if node.kind == "switch":
            if node.lid is not None and node.ports:
                targets.append(QueryTarget((node.guid, node.lid), node.lid, tuple(sorted(node.ports))))
        elif include_cas:
            for p in sorted(node.ports.values(), key=lambda p: p.num):
                if p.lid is not None:
                    targets.append(QueryTarget((node.guid, p.lid), p.lid, (p.num,)))
    return targets


class PerfqueryFetcher:
    """Keeps the topology between polls, and which nodes need a basic (non ``-x``) call too."""

    def __init__(
        self,
        *,
        ibnetdiscover_path: str,
        perfquery_path: str,
        extra_args: list[str],
        topology_interval: float,
        concurrency: int,
        command_timeout: float,
        include_cas: bool,
        samples_control: bool = True,
    ) -> None:
        self.ibnetdiscover_path = ibnetdiscover_path
        self.perfquery_path = perfquery_path
        self.extra_args = list(extra_args)
        self.topology_interval = topology_interval
        self.concurrency = concurrency
        self.command_timeout = command_timeout
        self.include_cas = include_cas
        self.samples_control = samples_control
        self.topology: Topology | None = None
        self._topology_at = 0.0
        self._needs_basic: dict[tuple[str, int], bool] = {}

    async def fetch(self) -> dict[str, Any]:
        try:
            return await self._fetch()
        finally:
            REAPER.after_poll()

    async def _fetch(self) -> dict[str, Any]:
        payload: dict[str, Any] = {}
        due = self.topology is None or time.monotonic() - self._topology_at >= self.topology_interval
        if due:
            text = await self._discover()
            if text is not None:
                payload["ibnetdiscover"] = text
        assert self.topology is not None  # _discover raised otherwise
        targets = query_targets(self.topology, self.include_cas)
        payload["perfquery"] = await self._query_all(targets)
        if "ibnetdiscover" in payload and self.samples_control:
            texts = await self._samples_control_all(targets)
            if texts:
                payload["samples_control"] = texts
        return payload

    async def _samples_control_all(self, targets: list[QueryTarget]) -> list[str]:
        """``perfquery -c <lid> <port>`` for each target (a switch's first connected port: the
        command reads one port), after the counters so it never delays them. Outputs without a
        Tick are left out: the detector then uses the device generation's tick."""
        results: list[str | FetchError] = [""] * len(targets)

        async def one(i: int, target: QueryTarget) -> None:
            argv = [self.perfquery_path, *self.extra_args, "-c", str(target.lid), str(target.ports[0])]
            try:
                res = await run_command(argv, self.command_timeout)
            except FetchError as exc:
                results[i] = exc
                return
            # A command killed by a signal may have stopped inside the Tick line ("0x0" of "0x07").
            ok = res.returncode >= 0 and bool(parse_samples_control(res.stdout))
            results[i] = res.stdout if ok else FetchError(res.describe_failure("printed no PortSamplesControl Tick"),
                                                          reason=ErrorReason.COMMAND)

        await for_each(targets, one, self.concurrency)
        texts = [r for r in results if isinstance(r, str)]
        errors = [r for r in results if isinstance(r, FetchError)]
        if errors:
            log.info("perfquery -c gave no PortSamplesControl Tick for %d of %d device port(s) (first: %s); "
                     "their XmitWait tick comes from the device generation", len(errors), len(results), errors[0])
        return texts

    async def _discover(self) -> str | None:
        """Run ibnetdiscover; None when a refresh failed and the previous topology is kept."""
        try:
            res = await run_command([self.ibnetdiscover_path, *self.extra_args], self.command_timeout, IBNETDISCOVER_MAX_OUTPUT)
            topo = await in_daemon_thread(parse_ibnetdiscover, res.stdout)  # 22 MB at 200,000 ports: not on the loop
            if not topo.nodes:
                raise FetchError(res.describe_failure("printed no topology"), reason=ErrorReason.COMMAND)
        except FetchError as exc:
            if self.topology is None:
                raise
            log.warning("ibnetdiscover refresh failed, keeping the previous topology: %s", exc)
            return None
        if res.returncode != 0:
            log.info("%s", res.describe_failure("exited non-zero; its topology was used"))
        self.topology = topo
        self._topology_at = time.monotonic()
        return res.stdout

    async def _query_all(self, targets: list[QueryTarget]) -> list[str]:
        if not targets:
            return []
        # The workers' calls, and the basic call a node may need beside its -x call: never more than
        # ``concurrency`` commands at once, and never more than 2 x concurrency waiters on this semaphore.
        sem = asyncio.Semaphore(self.concurrency)
        results: list[tuple[list[str], FetchError | None]] = [([], None)] * len(targets)

        async def one(i: int, target: QueryTarget) -> None:
            results[i] = await self._query(target, sem)

        await for_each(targets, one, self.concurrency)
        texts = [t for outs, _ in results for t in outs]
        errors = [e for _, e in results if e is not None]
        if not texts:
            first = errors[0] if errors else FetchError("perfquery printed no counters", reason=ErrorReason.COMMAND)
            more = f" (and {len(errors) - 1} more failed call(s))" if len(errors) > 1 else ""
            raise FetchError(f"{first}{more}", reason=first.reason)
        for err in errors:
            log.warning("perfquery call failed: %s", err)
        return texts

    async def _query(self, target: QueryTarget, sem: asyncio.Semaphore) -> tuple[list[str], FetchError | None]:
        """The ``-x`` call and, for nodes whose CapMask2 bit 1 is clear, the basic call."""
        ports = ",".join(str(p) for p in target.ports)
        base = [self.perfquery_path, *self.extra_args]
        ext_argv = [*base, "-x", "-l", str(target.lid), ports]
        basic_argv = [*base, "-l", str(target.lid), ports]
        texts: list[str] = []
        error: FetchError | None = None
        if self._needs_basic.get(target.key):
            ext, basic = await asyncio.gather(self._run(ext_argv, sem), self._run(basic_argv, sem))
            for res in (ext, basic):
                if isinstance(res, str):
                    texts.append(res)
                else:
                    error = error or res
            return texts, error
        ext = await self._run(ext_argv, sem)
        if not isinstance(ext, str):
            return texts, ext
        texts.append(ext)
        blocks = [b for b in parse_perfquery(ext, values=False) if b.extended]
        if blocks and not all(b.cap_mask2 is not None and b.cap_mask2 & CAPMASK2_ADDL_EXT for b in blocks):
            self._needs_basic[target.key] = True
            basic = await self._run(basic_argv, sem)
            if isinstance(basic, str):
                texts.append(basic)
            else:
                error = basic
        return texts, error

    async def _run(self, argv: list[str], sem: asyncio.Semaphore) -> str | FetchError:
        """stdout when it holds counter blocks (whatever the exit status), else the error.

        A command killed by a signal may have stopped in the middle of a value line
        (``PortXmitData:....5123`` of a longer number): its output is never used.
        """
        async with sem:
            try:
                res = await run_command(argv, self.command_timeout)
            except FetchError as exc:
                return exc
        if res.returncode < 0:
            return FetchError(res.describe_failure(f"was killed by signal {-res.returncode}"), reason=ErrorReason.COMMAND)
        if parse_perfquery(res.stdout, values=False):
            return res.stdout
        return FetchError(res.describe_failure("printed no counters"), reason=ErrorReason.COMMAND)
