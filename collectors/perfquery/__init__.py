"""InfiniBand counters from infiniband-diags: ``ibnetdiscover`` for the topology, ``perfquery -x`` per node.

The agent runs on a node with an IB port (the target address is empty or ``local``; config
validation refuses any other, see ``address_kind``). Each poll
queries every switch (all its connected ports in one ``perfquery -x -l <lid> <ports>`` call)
and every CA port; nodes whose extended error counters are not real (CapMask2 bit 1 clear)
get a basic call too. The topology is refreshed every ``topology_interval`` (a duration: ``10m``) and
travels in the payload only when it was refreshed, with each device's PortSamplesControl
(``perfquery -c``: the XmitWait tick). See README.md.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from fabricmon.collectors.base import AddressKind, Collector, Executable, SourceOptions
from fabricmon.collectors.perfquery.fetch import PerfqueryFetcher
from fabricmon.collectors.perfquery.parse import PerfqueryState, parse_payload
from fabricmon.core.durations import Duration
from fabricmon.core.model import ParseResult, TargetSpec


class PerfqueryOptions(SourceOptions):
    ibnetdiscover_path: str = "ibnetdiscover"
    perfquery_path: str = "perfquery"
    # Passed to both commands, e.g. ["-C", "mlx5_0", "-P", "1"] to pick the local HCA port.
    extra_args: list[str] = Field(default_factory=list)
    topology_interval: Duration = Field(600.0, gt=0)  # between ibnetdiscover runs
    concurrency: int = Field(4, ge=1, le=64)
    command_timeout: Duration = Field(10.0, gt=0)
    include_cas: bool = True  # also query CA (HCA) ports, not only switches
    # Read each device's PortSamplesControl.Tick (``perfquery -c``) on topology refreshes.
    samples_control: bool = True


class PerfqueryCollector(Collector):
    source: ClassVar[str] = "perfquery"
    options_model: ClassVar[type[SourceOptions]] = PerfqueryOptions
    address_kind = AddressKind.LOCAL  # the MADs go out of this node's HCA; pick its port with extra_args
    executables = (Executable("ibnetdiscover_path"), Executable("perfquery_path"))

    def __init__(self, name: str, address: str, options: SourceOptions) -> None:
        super().__init__(name, address, options)
        opts = options if isinstance(options, PerfqueryOptions) else PerfqueryOptions.model_validate(options.model_dump())
        self._fetcher = PerfqueryFetcher(
            ibnetdiscover_path=opts.ibnetdiscover_path,
            perfquery_path=opts.perfquery_path,
            extra_args=opts.extra_args,
            topology_interval=opts.topology_interval,
            concurrency=opts.concurrency,
            command_timeout=opts.command_timeout,
            include_cas=opts.include_cas,
            samples_control=opts.samples_control,
        )

    async def fetch(self) -> dict[str, Any]:
        return await self._fetcher.fetch()

    @classmethod
    def new_state(cls) -> PerfqueryState:
        return PerfqueryState()

    @classmethod
    def parse(cls, payload: dict[str, Any], spec: TargetSpec, state: PerfqueryState) -> tuple[ParseResult, PerfqueryState]:
        cls.parse_options_model.from_spec(spec)  # no option changes parsing: any in the header is an error
        return parse_payload(payload, state)


__all__ = ["PerfqueryCollector", "PerfqueryOptions"]
