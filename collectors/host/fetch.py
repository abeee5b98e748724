"""I/O for the host collector: read ``<sysfs_root>/class/infiniband`` and run ``ethtool -S``.

The sysfs walk runs in a worker thread: every ``counters/*`` read is a PMA MAD to the HCA
firmware, which can take a millisecond, and must not stall the event loop. A file that
cannot be read (permission, EINVAL from a port without a PMA, a device removed mid-walk) is
left out of the payload and logged once per path; one bad file never fails the poll.
``ethtool`` runs through :func:`fabricmon.collectors.command.run_command`: its own process
group, killed on timeout or cancellation. For the lossless configuration the same poll reads
the RoCE ECN files under ``class/net/<if>/ecn`` and runs ``dcb`` and ``mlnx_qos`` (host/dcb.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from fabricmon.collectors.base import ErrorReason, FetchError
from fabricmon.collectors.command import ETHTOOL_MAX_OUTPUT, QOS_TOOL_MAX_OUTPUT, run_command
from fabricmon.collectors.reaper import REAPER

log = logging.getLogger(__name__)

PORT_ATTRS = ("state", "phys_state", "rate", "link_layer")
DEV_ATTRS = ("node_guid", "hca_type", "fw_ver", "board_id")
COUNTER_DIRS = ("counters", "counters_ext", "hw_counters")
SKIP = frozenset({"lifespan"})  # hw_counters/lifespan is a setting (cache window, ms), not a counter
MAX_FILE = 4096


@dataclass
class SysfsSnapshot:
    files: dict[str, str] = field(default_factory=dict)
    ethernet_netdevs: list[str] = field(default_factory=list)  # netdevs of Ethernet (RoCE) ports of mlx5 devices


class SysfsReader:
    """Walks the tree; remembers which paths already had their failure logged."""

    def __init__(self, sysfs_root: str) -> None:
        self.class_dir = Path(sysfs_root) / "class"
        self._logged: set[str] = set()

    def _read(self, path: Path, rel: str, files: dict[str, str], optional: bool = False) -> str | None:
        try:
            with open(path, "rb") as fh:
                text = fh.read(MAX_FILE).decode("utf-8", "replace")
        except OSError as exc:
            if not optional and rel not in self._logged:
                self._logged.add(rel)
                log.warning("host: cannot read /sys/class/%s: %s (left out of the poll)", rel, exc.strerror or exc)
            return None
        files[rel] = text
        return text

    @staticmethod
    def _list(path: Path) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except OSError:
            return []

    def snapshot(self) -> SysfsSnapshot:
        snap = SysfsSnapshot()
        ib = self.class_dir / "infiniband"
        if not ib.is_dir():
            raise FetchError(f"{ib} does not exist: no RDMA devices (or sysfs_root is wrong)", ErrorReason.COMMAND)
        for dev in self._list(ib):
            base = ib / dev
            for attr in DEV_ATTRS:
                self._read(base / attr, f"infiniband/{dev}/{attr}", snap.files, optional=True)
            nets = self._list(base / "device" / "net")
            for nd in nets:
                rel = f"infiniband/{dev}/device/net/{nd}/dev_port"
                self._read(base / "device" / "net" / nd / "dev_port", rel, snap.files, optional=True)
            is_mlx5 = dev.startswith("mlx5") or _driver(base) == "mlx5_core"
            for num in self._list(base / "ports"):
                pbase, prel = base / "ports" / num, f"infiniband/{dev}/ports/{num}"
                attrs = {a: self._read(pbase / a, f"{prel}/{a}", snap.files) for a in PORT_ATTRS}
                # No netdev behind GID 0 (an IB port) reads as an error: expected, not logged.
                ndev = self._read(pbase / "gid_attrs" / "ndevs" / "0", f"{prel}/gid_attrs/ndevs/0", snap.files, optional=True)
                for sub in COUNTER_DIRS:
                    for name in self._list(pbase / sub):
                        if name not in SKIP:
                            self._read(pbase / sub / name, f"{prel}/{sub}/{name}", snap.files)
                if is_mlx5 and (attrs["link_layer"] or "").strip().lower() == "ethernet":
                    nd = (ndev or "").strip() or _by_dev_port(snap.files, dev, nets, num)
                    if nd and nd not in snap.ethernet_netdevs:
                        snap.ethernet_netdevs.append(nd)
        for nd in snap.ethernet_netdevs:
            self._ecn(nd, snap.files)
        return snap

    def _ecn(self, netdev: str, files: dict[str, str]) -> None:
        """mlx5 RoCE ECN per priority: ``net/<if>/ecn/roce_{np,rp}/enable/<prio>`` (absent on
        other drivers: optional, not logged)."""
        for role in ("roce_np", "roce_rp"):
            base = self.class_dir / "net" / netdev / "ecn" / role / "enable"
            for prio in self._list(base):
                self._read(base / prio, f"net/{netdev}/ecn/{role}/enable/{prio}", files, optional=True)


def _driver(base: Path) -> str:
    try:
        return os.path.basename(os.readlink(base / "device" / "driver"))
    except OSError:
        return ""


def _by_dev_port(files: dict[str, str], dev: str, nets: list[str], num: str) -> str | None:
    want = str(int(num) - 1) if num.isascii() and num.isdigit() else ""
    hits = [nd for nd in nets if files.get(f"infiniband/{dev}/device/net/{nd}/dev_port", "").strip() == want]
    if len(hits) == 1:
        return hits[0]
    return nets[0] if len(nets) == 1 else None


async def run_tool(argv: list[str], timeout: float, logged: set[str], optional: bool = False,
                   max_output: int = QOS_TOOL_MAX_OUTPUT) -> str | None:
    """The stdout of ``argv``, or None (logged once per command line and kind of failure). An
    ``optional`` tool that cannot be run (not installed: ``mlnx_qos`` ships with MLNX_OFED only)
    is logged once per tool, at info level."""
    shown = " ".join(argv)
    try:
        res = await run_command(argv, timeout, max_output)
    except FetchError as exc:
        missing = optional and exc.reason == ErrorReason.COMMAND
        key = f"{argv[0]}:missing" if missing else f"{shown}:{exc.reason}"
        if key not in logged:
            logged.add(key)
            log.log(logging.INFO if missing else logging.WARNING, "host: %s failed: %s (left out of the poll)", shown, exc)
        return None
    if res.returncode != 0:
        key = f"{shown}:rc"
        if key not in logged:
            logged.add(key)
            log.warning("host: %s (left out of the poll)", res.describe_failure("failed"))
        return None
    return res.stdout


async def run_ethtool(ethtool_path: str, ifname: str, timeout: float, logged: set[str]) -> str | None:
    """``ethtool -S ifname`` stdout, or None (logged once per interface and kind of failure)."""
    return await run_tool([ethtool_path, "-S", ifname], timeout, logged, max_output=ETHTOOL_MAX_OUTPUT)


async def run_qos_tools(netdevs: list[str], *, dcb_path: str, mlnx_qos_path: str, timeout: float,
                        logged: set[str]) -> dict[str, dict[str, str]]:
    """Per netdev: ``dcb pfc show dev``, ``dcb app show dev`` and ``mlnx_qos -i`` stdout (the
    payload's ``dcb`` object, parsed by host/dcb.py); a tool that fails is left out."""
    calls = {(nd, "pfc"): [dcb_path, "pfc", "show", "dev", nd] for nd in netdevs}
    calls.update({(nd, "app"): [dcb_path, "app", "show", "dev", nd] for nd in netdevs})
    if mlnx_qos_path:
        calls.update({(nd, "mlnx_qos"): [mlnx_qos_path, "-i", nd] for nd in netdevs})
    outs = await asyncio.gather(*(run_tool(argv, timeout, logged, optional=True) for argv in calls.values()))
    result: dict[str, dict[str, str]] = {}
    for (nd, what), out in zip(calls, outs, strict=True):
        if out is not None:
            result.setdefault(nd, {})[what] = out
    return result


async def fetch_host(
    reader: SysfsReader,
    *,
    ethtool: bool,
    ethtool_path: str,
    ethtool_timeout: float,
    ethtool_interfaces: list[str] | None,
    logged: set[str],
    dcb_path: str = "",
    mlnx_qos_path: str = "",
) -> dict[str, object]:
    """One poll. ``dcb_path`` empty: no dcb/mlnx_qos runs (the payload then has no ``dcb`` key,
    as it has none when no tool printed anything)."""
    try:
        return await _fetch_host(reader, ethtool=ethtool, ethtool_path=ethtool_path, ethtool_timeout=ethtool_timeout,
                                 ethtool_interfaces=ethtool_interfaces, logged=logged, dcb_path=dcb_path,
                                 mlnx_qos_path=mlnx_qos_path)
    finally:
        REAPER.after_poll()


async def _fetch_host(reader: SysfsReader, *, ethtool: bool, ethtool_path: str, ethtool_timeout: float,
                      ethtool_interfaces: list[str] | None, logged: set[str], dcb_path: str,
                      mlnx_qos_path: str) -> dict[str, object]:
    snap = await asyncio.to_thread(reader.snapshot)
    outputs: dict[str, str] = {}
    names = ethtool_interfaces if ethtool_interfaces is not None else snap.ethernet_netdevs
    if ethtool:
        results = await asyncio.gather(*(run_ethtool(ethtool_path, n, ethtool_timeout, logged) for n in names))
        outputs = {n: out for n, out in zip(names, results, strict=True) if out is not None}
    payload: dict[str, object] = {"files": snap.files, "ethtool": outputs}
    if dcb_path:
        tools = await run_qos_tools(names, dcb_path=dcb_path, mlnx_qos_path=mlnx_qos_path, timeout=ethtool_timeout, logged=logged)
        if tools:
            payload["dcb"] = tools
    return payload
