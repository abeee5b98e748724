"""A hostile SNMPv2c agent on loopback for the attack tests (issue 32): its GETBULK answers never
end (OIDs that keep increasing inside the walked subtree: an endless walk), or loop (the same
OID again: a walk that does not increase). GETs answer sysUpTime and an IF-MIB sysObjectID.

Built on pysnmp's own message codec (pyasn1 BER), so the answers are well-formed SNMP; what is
hostile is only their content.
"""

from __future__ import annotations

import asyncio
from typing import Literal

from pyasn1.codec.ber import decoder, encoder
from pysnmp.proto import api

_V2C = api.PROTOCOL_MODULES[api.SNMP_VERSION_2C]
SYS_UPTIME = (1, 3, 6, 1, 2, 1, 1, 3, 0)
SYS_OBJECT_ID = (1, 3, 6, 1, 2, 1, 1, 2, 0)
Mode = Literal["endless", "loop"]


class HostileAgent(asyncio.DatagramProtocol):
    def __init__(self, mode: Mode, rows_per_answer: int = 25) -> None:
        self.mode = mode
        self.rows = rows_per_answer
        self.requests = 0
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        try:
            msg, _ = decoder.decode(data, asn1Spec=_V2C.Message())
        except Exception:  # not an SNMPv2c message: say nothing
            return
        self.requests += 1
        req = _V2C.apiMessage.get_pdu(msg)
        out = _V2C.apiMessage.get_response(msg)
        binds = []
        asked = [tuple(oid) for oid, _ in _V2C.apiPDU.get_varbinds(req)]
        if req.isSameTypeWith(_V2C.GetRequestPDU()):
            for oid in asked:
                if oid == SYS_OBJECT_ID:
                    binds.append((_V2C.ObjectIdentifier(oid), _V2C.ObjectIdentifier((1, 3, 6, 1, 4, 1, 99999, 1))))
                else:
                    binds.append((_V2C.ObjectIdentifier(oid), _V2C.TimeTicks(12345)))
        else:
            for oid in asked:
                base = oid[:11] if len(oid) > 11 else oid  # the column walked: ifTable/ifXTable columns are 11 long
                last = oid[11] if len(oid) > 11 else 0
                for k in range(self.rows):
                    nxt = base + ((last + 1 + k,) if self.mode == "endless" else (1,))
                    binds.append((_V2C.ObjectIdentifier(nxt), _V2C.Counter64(1000 + k)))
        _V2C.apiPDU.set_varbinds(_V2C.apiMessage.get_pdu(out), binds)
        assert self.transport is not None
        self.transport.sendto(encoder.encode(out), addr)


async def serve(mode: Mode, port: int = 0) -> tuple[asyncio.DatagramTransport, HostileAgent]:
    """Start the agent on 127.0.0.1; (transport, protocol). Close the transport to stop it."""
    loop = asyncio.get_running_loop()
    transport, proto = await loop.create_datagram_endpoint(lambda: HostileAgent(mode), local_addr=("127.0.0.1", port))
    return transport, proto  # type: ignore[return-value]
