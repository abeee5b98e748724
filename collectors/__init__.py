"""Collector registry: source name -> collector class, imported on first use.

Adding a source: create ``collectors/<name>/`` with ``fetch.py`` and ``parse.py`` and a
collector class that declares what the agent needs of it (:class:`Collector`'s class
attributes: address kind, default port, executables, self-sharding), then add one line to
``SOURCES`` below. No other part of the agent names a source. Modules load
lazily so that an agent that only polls SNMP never imports the UFM client, and a broken
optional dependency only affects its own source.
"""

from __future__ import annotations

import importlib

from fabricmon.collectors.base import (
    POLL_DEADLINE,
    AddressKind,
    Collector,
    ErrorReason,
    Executable,
    FetchError,
    ParseError,
    SourceOptions,
)
from fabricmon.collectors.reaper import REAPER  # the agent owns every process its collectors' commands start

# source name -> "module:Class"
SOURCES: dict[str, str] = {
    "perfquery": "fabricmon.collectors.perfquery:PerfqueryCollector",
    "snmp": "fabricmon.collectors.snmp:SnmpCollector",
    "ufm": "fabricmon.collectors.ufm:UfmCollector",
    "ufm-telemetry": "fabricmon.collectors.ufm_telemetry:UfmTelemetryCollector",
    "nvue": "fabricmon.collectors.nvue:NvueCollector",
    "host": "fabricmon.collectors.host:HostCollector",
    "gnmi": "fabricmon.collectors.gnmi:GnmiCollector",
    "slurm": "fabricmon.collectors.slurm:SlurmCollector",
    "slurmrestd": "fabricmon.collectors.slurm:SlurmRestCollector",
    "kubernetes": "fabricmon.collectors.kubernetes:KubernetesCollector",
    "jobs-file": "fabricmon.collectors.jobs_file:JobsFileCollector",
}

_loaded: dict[str, type[Collector]] = {}


class UnknownSource(KeyError):
    pass


def get(source: str) -> type[Collector]:
    """The collector class for a source name; UnknownSource if there is none."""
    if source in _loaded:
        return _loaded[source]
    ref = SOURCES.get(source)
    if ref is None:
        raise UnknownSource(source)
    module_name, _, cls_name = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise UnknownSource(source) from exc
        raise
    cls = getattr(module, cls_name, None)
    if cls is None:
        raise UnknownSource(source)
    _loaded[source] = cls
    return cls


def loaded_classes() -> list[type[Collector]]:
    """The collector classes imported so far."""
    return list(_loaded.values())


def available() -> list[str]:
    """Source names whose collector module is present in this installation."""
    names = []
    for source in SOURCES:
        try:
            get(source)
        except UnknownSource:
            continue
        names.append(source)
    return names


__all__ = ["POLL_DEADLINE", "REAPER", "SOURCES", "AddressKind", "Collector", "ErrorReason", "Executable", "FetchError", "ParseError",
           "SourceOptions", "UnknownSource", "available", "get", "loaded_classes"]
