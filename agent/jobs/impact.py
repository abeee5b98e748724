"""Which jobs a finding touches: the ports the fault reaches, by a stated rule, joined to job hosts.

A finding says where its fault reaches in its own fields and evidence (the detector's
vocabulary, recording-format.md): the port and its cable peer, a storm origin's
``origin_peer``, ``victim_ports``, ``victims_lost`` and ``also_paused`` (ports paused
behind it, hosts the agent does not poll among them), a victim's ``origin``, a cycle's
``cycle``/``members`` and ``paused_behind``. Nothing here reads a rule's internals. Each
(kind, role) has one rule of reach (:data:`RULES`), stated in words in the finding's evidence:

* ``storm`` (a PFC storm's origin): hosts on or cabled to the origin, its peer, the victim
  ports and every port paused behind them;
* ``victim`` (a port a storm pauses): the reach of the storm it belongs to (its ``origin``'s
  finding, when active), and hosts on or cabled to the victim port itself;
* ``loop`` (PFC deadlock, credit-loop member): hosts on or cabled to the cycle's ports and the
  ports paused behind it, and every host attached to a switch with a member port: those
  switches' buffers are the ones the cycle holds;
* ``stalled`` (an InfiniBand port stalled alone, ``credit_deadlock``/``stalled``): the hosts on
  or cabled to the stalled port, and the hosts behind its peer, the receiver that returns no
  credits: the peer's own host when it is a host's HCA, every host attached to it when it is a
  switch (everything sent toward them through this port is held);
* ``link`` (degraded link, loss, flaps): the hosts at either end of the cable; for a cable
  between two switches, the hosts attached to either switch, whose flows ECMP may put on it;
* ``port`` (everything else, new kinds and roles included: congestion, a misconfiguration, a
  PFC watchdog's queue): hosts on the port or cabled to it; a finding without a port reaches
  the hosts attached to its device.

"On a port" means a port of the host's own NIC; "cabled to it" the switch port its NIC is
cabled to (:mod:`fabricmon.agent.jobs.placement`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from fabricmon.agent.jobs.placement import HostPlace
from fabricmon.core.model import Finding

PortRef = tuple[str, str]

REACH_TEXT = {
    "storm": "PFC storm origin: hosts on or cabled to the origin, its peer, the victim ports and the ports paused behind them",
    "victim": "storm victim: the reach of the storm it belongs to: hosts on or cabled to this port, its origin, the "
              "origin's peer, the victim ports and the ports paused behind them (the origin finding's evidence)",
    "loop": "cycle: hosts on or cabled to the cycle's ports and the ports paused behind it, and every host attached to a "
            "switch with a member port (its buffers hold the cycle)",
    "stalled": "stalled port: hosts on or cabled to the stalled port, and the hosts behind its peer (the receiver that "
               "returns no credits: its own host, or every host attached to it when it is a switch)",
    "link": "link: the hosts at either end of the cable; between two switches, the hosts attached to either switch "
            "(ECMP may put any of their flows on it)",
    "port": "port: hosts on this port or cabled to it",
    "device": "device: hosts attached to this device",
}
# (kind, role) -> rule; (kind, None) matches any role of the kind not listed; the rest is "port".
RULES: dict[tuple[str, str | None], str] = {
    ("pfc_storm", "origin"): "storm",
    ("pfc_storm", "victim"): "victim",
    ("pfc_deadlock", None): "loop",
    ("credit_deadlock", "member"): "loop",
    ("credit_deadlock", "stalled"): "stalled",
    ("link_degraded", None): "link",
    ("packet_loss", None): "link",
}
LISTED = 50  # job ids written into a finding's evidence; the count is always whole


def storm_origin(f: Finding) -> str | None:
    """The ``device:port`` of the storm a finding belongs to: an origin's own, a victim's ``origin``."""
    rule = rule_of(f)
    if rule == "storm":
        return f"{f.device}:{f.port}"
    if rule == "victim" and f.evidence.get("origin"):
        return str(f.evidence["origin"])
    return None


def rule_of(f: Finding) -> str:
    rule = RULES.get((f.kind, f.role)) or RULES.get((f.kind, None)) or "port"
    if f.port is None and rule in ("port", "link", "stalled"):
        return "device"
    return rule


@dataclass
class HostIndex:
    """The job hosts' ports: port -> hosts on or cabled to it, switch -> hosts attached to it."""

    port_hosts: dict[PortRef, set[str]] = field(default_factory=dict)
    switch_hosts: dict[str, set[str]] = field(default_factory=dict)
    host_devices: dict[str, str] = field(default_factory=dict)  # a NIC-bearing device -> its host
    endpoints: set[str] = field(default_factory=set)  # devices described as hosts or CAs, in jobs or not

    @classmethod
    def of(cls, places: Iterable[HostPlace], endpoints: Iterable[str] = ()) -> HostIndex:
        ix = cls(endpoints=set(endpoints))
        for pl in places:
            for pk in pl.keys:
                ix.port_hosts.setdefault(pk, set()).add(pl.host)
            for nic in pl.nics:
                ix.host_devices[nic.device] = pl.host
                if nic.switch is not None:
                    ix.switch_hosts.setdefault(nic.switch[0], set()).add(pl.host)
        return ix

    def known(self, pk: PortRef) -> bool:
        return pk in self.port_hosts

    def is_host(self, device: str) -> bool:
        return device in self.host_devices or device in self.endpoints


def split_ref(ref: Any, ix: HostIndex) -> PortRef | None:
    """A ``device:port`` reference of the evidence. Device names may hold colons, so every
    split point is tried and one naming a job host's port wins; else the last colon."""
    text = str(ref)
    cuts = [i for i, ch in enumerate(text) if ch == ":"]
    for i in reversed(cuts):
        pk = (text[:i], text[i + 1:])
        if ix.known(pk):
            return pk
    return (text[:cuts[-1]], text[cuts[-1] + 1:]) if cuts else None


def _refs(value: Any) -> list[Any]:
    """Port references in an evidence value: a list, the keys of a mapping, or one string."""
    if isinstance(value, dict):
        return list(value)
    if isinstance(value, list | tuple):
        return list(value)
    return [value] if isinstance(value, str) and value else []


def reach(f: Finding, ix: HostIndex) -> tuple[str, set[PortRef], set[str]]:
    """(rule, ports the fault reaches, switches whose attached hosts it reaches)."""
    rule = rule_of(f)
    ev = f.evidence
    ports: set[PortRef] = set()
    switches: set[str] = set()
    if f.port is not None:
        ports.add((f.device, f.port))
    if f.peer_device and f.peer_port:
        ports.add((f.peer_device, f.peer_port))
    keys: tuple[str, ...] = ()
    if rule == "storm":
        keys = ("origin_peer", "victim_ports", "victims_lost", "also_paused")
    elif rule == "victim":
        keys = ("origin",)
    elif rule == "loop":
        keys = ("cycle", "members", "paused_behind")
    members: set[str] = {f.device}
    for key in keys:
        for ref in _refs(ev.get(key)):
            pk = split_ref(ref, ix)
            if pk is not None:
                ports.add(pk)
                if key in ("cycle", "members"):
                    members.add(pk[0])
    if rule == "loop":
        switches = {d for d in members if not ix.is_host(d)}
    elif rule == "stalled":
        if f.peer_device and not ix.is_host(f.peer_device):
            switches = {f.peer_device}
    elif rule == "link":
        ends = [d for d in (f.device, f.peer_device) if d]
        if len(ends) == 2 and not any(ix.is_host(d) for d in ends):
            switches = set(ends)
    elif rule == "device":
        switches = {f.device}
    return rule, ports, switches


@dataclass(frozen=True, slots=True)
class Impact:
    """The jobs a finding touches, the job hosts through which, and the rule used."""

    rule: str
    hosts: frozenset[str]
    jobs: frozenset[str]

    def evidence(self) -> dict[str, Any]:
        jobs = sorted(self.jobs, key=_natural)
        return {"jobs_affected": len(jobs), "jobs": jobs[:LISTED], "jobs_hosts": sorted(self.hosts, key=_natural)[:20],
                "jobs_reach": REACH_TEXT[self.rule]}


@functools.lru_cache(maxsize=1 << 16)
def _natural(s: str) -> tuple:
    """Numbers in ids sort as numbers (job 9 before job 10); cached: the same ids sort every pass."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in _DIGITS.split(s) if p)


_DIGITS = re.compile(r"(\d+)")


def impact(f: Finding, ix: HostIndex, host_jobs: dict[str, set[str]], storm: Impact | None = None) -> Impact:
    """``storm``: for a storm victim, the impact of its origin's finding (while it is active, or
    as it was when it ended: a victim may outlast its origin by a poll)."""
    rule, ports, switches = reach(f, ix)
    hosts: set[str] = set(storm.hosts) if storm is not None and rule == "victim" else set()
    for pk in ports:
        hosts |= ix.port_hosts.get(pk, set())
    if f.device in ix.host_devices:  # a finding on a host's own device (a NIC without a port named)
        hosts.add(ix.host_devices[f.device])
    for sw in switches:
        hosts |= ix.switch_hosts.get(sw, set())
    jobs = {j for h in hosts for j in host_jobs.get(h, ())}
    return Impact(rule, frozenset(hosts), frozenset(jobs))
