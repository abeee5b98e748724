"""A real snmpsim agent on loopback for tests and benchmarks.

Usage::

    with SnmpSim({"arista": "/path/arista.snmprec", "lab": "1.3.6.1.2.1.1.3.0|67|5\\n"}) as sim:
        sim.port          # UDP port on 127.0.0.1; community = the key ("arista", "lab")

Values are paths (copied) or snmprec text. ``v3_user`` etc. add an SNMPv3 user (SHA/AES by
default). The agent runs in its own process group and is killed on exit; start-up waits until
it answers a GET (indexing a large file takes a few seconds), so a test never races it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from pysnmp.proto import api

from tests.conftest import tool

SNMPSIM = tool("snmpsim-command-responder")
SYS_UPTIME = "1.3.6.1.2.1.1.3.0"


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _free_udp_port(host: str = "127.0.0.1") -> int:
    with socket.socket(_family(host), socket.SOCK_DGRAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def probe(port: int, community: str, oid: str = SYS_UPTIME, timeout: float = 0.3, host: str = "127.0.0.1") -> bool:
    """One raw SNMPv2c GET, no engine: True when the agent answered anything."""
    p_mod = api.PROTOCOL_MODULES[api.SNMP_VERSION_2C]
    pdu = p_mod.GetRequestPDU()
    p_mod.apiPDU.set_defaults(pdu)
    p_mod.apiPDU.set_varbinds(pdu, [(oid, p_mod.Null(""))])
    msg = p_mod.Message()
    p_mod.apiMessage.set_defaults(msg)
    p_mod.apiMessage.set_community(msg, community)
    p_mod.apiMessage.set_pdu(msg, pdu)
    from pyasn1.codec.ber import encoder

    with socket.socket(_family(host), socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.sendto(encoder.encode(msg), (host, port))
        try:
            s.recvfrom(65535)
        except OSError:
            return False
    return True


class SnmpSim:
    def __init__(self, data: dict[str, str | Path], *, v3_user: str | None = None, v3_auth_key: str | None = None,
                 v3_priv_key: str | None = None, v3_auth_proto: str = "SHA", v3_priv_proto: str = "AES",
                 start_timeout: float = 60.0, host: str = "127.0.0.1") -> None:
        if not data:
            raise ValueError("snmpsim needs at least one data file")
        self.data = data
        self.v3 = (v3_user, v3_auth_key, v3_priv_key, v3_auth_proto, v3_priv_proto)
        self.start_timeout = start_timeout
        self.port = 0
        self.host = host  # 127.0.0.1, or ::1 for IPv6
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> SnmpSim:
        if SNMPSIM is None:
            import pytest

            pytest.skip("snmpsim-command-responder is not installed")
        self._tmp = tempfile.TemporaryDirectory(prefix="snmpsim-")
        root = Path(self._tmp.name)
        data_dir, cache_dir = root / "data", root / "cache"
        data_dir.mkdir()
        cache_dir.mkdir()
        for community, src in self.data.items():
            dest = data_dir / f"{community}.snmprec"
            if isinstance(src, Path) or (isinstance(src, str) and "\n" not in src and Path(src).is_file()):
                shutil.copyfile(src, dest)
            else:
                dest.write_text(str(src))
        self.port = _free_udp_port(self.host)
        endpoint = f"--agent-udpv6-endpoint=[{self.host}]:{self.port}" if ":" in self.host else \
            f"--agent-udpv4-endpoint={self.host}:{self.port}"
        cmd = [SNMPSIM, f"--data-dir={data_dir}", f"--cache-dir={cache_dir}", endpoint]
        user, auth_key, priv_key, auth_proto, priv_proto = self.v3
        if user:
            cmd += [f"--v3-user={user}"]
            if auth_key:
                cmd += [f"--v3-auth-key={auth_key}", f"--v3-auth-proto={auth_proto}"]
            if priv_key:
                cmd += [f"--v3-priv-key={priv_key}", f"--v3-priv-proto={priv_proto}"]
        self.log = root / "snmpsim.log"
        env = {**os.environ, "SNMPSIM_ALLOW_ROOT": "true"}
        with open(self.log, "wb") as log:
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        first = next(iter(self.data))
        deadline = time.monotonic() + self.start_timeout
        while not probe(self.port, first, host=self.host):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                out = self.log.read_text(errors="replace")[-3000:]
                self.__exit__(None, None, None)
                raise RuntimeError(f"snmpsim did not start on {self.host} port {self.port}:\n{out}")
            time.sleep(0.1)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._proc.pid, signal.SIGTERM)
                try:
                    self._proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(self._proc.pid, signal.SIGKILL)
                    self._proc.wait()
            self._proc = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
