"""``host``: node-local NIC counters from sysfs (``/sys/class/infiniband``) and ``ethtool -S``."""

from __future__ import annotations

from typing import Any

from pydantic import model_validator

from fabricmon.collectors.base import AddressKind, Collector, Executable, SourceOptions
from fabricmon.collectors.host.fetch import SysfsReader, fetch_host
from fabricmon.collectors.host.parse import HostParseOptions, HostState, parse_payload
from fabricmon.core.durations import Duration
from fabricmon.core.model import ParseResult, TargetSpec


class HostOptions(SourceOptions):
    hostname: str | None = None  # the device label; default: the target name
    sysfs_root: str = "/sys"
    ethtool: bool = True
    ethtool_path: str = "ethtool"
    ethtool_timeout: Duration = 5.0
    # Netdevs to run `ethtool -S` on; default: the netdevs of Ethernet (RoCE) ports of mlx5 devices.
    ethtool_interfaces: list[str] | None = None
    # Lossless configuration (host/dcb.py): `dcb pfc/app show dev` and `mlnx_qos -i` on the same
    # netdevs, with ethtool_timeout; mlnx_qos_path "" skips mlnx_qos.
    dcb: bool = True
    dcb_path: str = "dcb"
    mlnx_qos_path: str = "mlnx_qos"

    @model_validator(mode="after")
    def _check(self) -> HostOptions:
        if self.ethtool_timeout <= 0:
            raise ValueError("ethtool_timeout must be positive")
        return self


class HostCollector(Collector):
    source = "host"
    options_model = HostOptions
    parse_options_model = HostParseOptions
    address_kind = AddressKind.NONE  # reads this node's sysfs and tools
    # dcb and mlnx_qos are optional (left out of the poll when absent): only ethtool is checked.
    executables = (Executable("ethtool_path", "ethtool"),)

    def __init__(self, name: str, address: str, options: HostOptions) -> None:  # type: ignore[override]
        super().__init__(name, address, options)
        self.options: HostOptions = options
        self._reader = SysfsReader(options.sysfs_root)
        self._logged: set[str] = set()

    async def fetch(self) -> dict[str, Any]:
        o = self.options
        return await fetch_host(
            self._reader, ethtool=o.ethtool, ethtool_path=o.ethtool_path, ethtool_timeout=o.ethtool_timeout,
            ethtool_interfaces=o.ethtool_interfaces, logged=self._logged,
            dcb_path=o.dcb_path if o.dcb else "", mlnx_qos_path=o.mlnx_qos_path,
        )

    @classmethod
    def new_state(cls) -> HostState:
        return HostState()

    @classmethod
    def parse(cls, payload: dict[str, Any], spec: TargetSpec, state: HostState) -> tuple[ParseResult, HostState]:
        return parse_payload(payload, spec, state)
