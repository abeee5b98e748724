"""Benchmark: CPU and memory of one ``host`` poll (fetch + parse) on a node with 8 RoCE NICs.

Builds a fake ``/sys/class/infiniband`` with 8 mlx5 devices (one Ethernet port each, the
kernel's extended counter table, 30 hw_counters) and a fake ``ethtool`` that prints a
120-line ``ethtool -S`` per netdev, then runs N polls and prints per-poll CPU time (this
process, and the ethtool children separately), wall time, RSS and the Python allocation peak.

    python bench/host_poll.py [--polls 20] [--nics 8]

Real sysfs reads of ``counters/*`` are PMA MADs to the firmware and cost more than these
tmpfs reads; the numbers here are the agent's own overhead.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fabricmon.collectors.host import HostCollector, HostOptions  # noqa: E402
from fabricmon.core.model import TargetSpec  # noqa: E402

IB_COUNTERS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors", "port_rcv_remote_physical_errors",
               "port_rcv_switch_relay_errors", "port_xmit_discards", "port_xmit_constraint_errors", "port_rcv_constraint_errors",
               "local_link_integrity_errors", "excessive_buffer_overrun_errors", "VL15_dropped", "port_xmit_wait",
               "port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets", "unicast_xmit_packets",
               "unicast_rcv_packets", "multicast_xmit_packets", "multicast_rcv_packets")
HW_COUNTERS = ("np_ecn_marked_roce_packets", "np_cnp_sent", "rp_cnp_handled", "rp_cnp_ignored", "out_of_sequence",
               "packet_seq_err", "implied_nak_seq_err", "local_ack_timeout_err", "rnr_nak_retry_err", "roce_adp_retrans",
               "roce_adp_retrans_to", "roce_slow_restart", "roce_slow_restart_cnps", "roce_slow_restart_trans",
               "out_of_buffer", "duplicate_request", "rx_read_requests", "rx_write_requests", "rx_atomic_requests",
               "rx_dct_connect", "req_cqe_error", "req_cqe_flush_error", "req_remote_access_errors",
               "req_remote_invalid_request", "resp_cqe_error", "resp_cqe_flush_error", "resp_local_length_error",
               "resp_remote_access_errors", "rx_icrc_encapsulated", "lifespan")


def build(root: Path, nics: int) -> tuple[Path, Path]:
    sysfs = root / "sys"
    ethtool_lines = ["NIC statistics:"] + [f"     rx_prio{p}_{n}: {p * 1000}" for p in range(8)
                                           for n in ("bytes", "packets", "pause", "pause_duration", "pause_transition",
                                                     "marked", "buf_discard", "cong_discard", "discards")]
    ethtool_lines += [f"     {n}: 7" for n in ("rx_discards_phy", "rx_out_of_buffer", "tx_pause_storm_warning_events",
                                              "tx_pause_storm_error_events", "link_down_events_phy", "rx_pause_ctrl_phy")]
    (root / "ethtool.txt").write_text("\n".join(ethtool_lines) + "\n")
    for i in range(nics):
        dev = sysfs / "class" / "infiniband" / f"mlx5_{i}"
        port = dev / "ports" / "1"
        for d in ("counters", "hw_counters", "gid_attrs/ndevs"):
            (port / d).mkdir(parents=True, exist_ok=True)
        for n in IB_COUNTERS:
            (port / "counters" / n).write_text(f"{1000 + i}\n")
        for n in HW_COUNTERS:
            (port / "hw_counters" / n).write_text(f"{10 + i}\n")
        for n, v in (("state", "4: ACTIVE"), ("phys_state", "5: LinkUp"), ("rate", "400 Gb/sec (4X NDR)"),
                     ("link_layer", "Ethernet"), ("gid_attrs/ndevs/0", f"eth{i}")):
            (port / n).write_text(v + "\n")
        (dev / "node_guid").write_text(f"0c42:a103:00b4:0d{i:02x}\n")
    exe = root / "ethtool"
    exe.write_text(f"#!/bin/sh\nexec cat {root / 'ethtool.txt'}\n")
    exe.chmod(0o755)
    return sysfs, exe


async def run(polls: int, nics: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        sysfs, exe = build(Path(tmp), nics)
        c = HostCollector("bench-node", "local", HostOptions(sysfs_root=str(sysfs), ethtool_path=str(exe)))
        spec, state = TargetSpec("bench-node", "host"), HostCollector.new_state()
        await c.fetch()  # warm-up (imports, page cache)
        tracemalloc.start()
        before_self = resource.getrusage(resource.RUSAGE_SELF)
        before_kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        samples = 0
        for _ in range(polls):
            payload = await c.fetch()
            result, state = HostCollector.parse(payload, spec, state)
            samples = len(result.counters)
        wall = time.perf_counter() - t0
        _cur, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        after_self = resource.getrusage(resource.RUSAGE_SELF)
        after_kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_self = (after_self.ru_utime + after_self.ru_stime - before_self.ru_utime - before_self.ru_stime) / polls
    cpu_kids = (after_kids.ru_utime + after_kids.ru_stime - before_kids.ru_utime - before_kids.ru_stime) / polls
    print(f"host poll, {nics} NICs, {polls} polls, {samples} samples/poll")
    print(f"  agent CPU per poll:    {cpu_self * 1000:8.2f} ms (user+sys, includes tracemalloc overhead)")
    print(f"  ethtool CPU per poll:  {cpu_kids * 1000:8.2f} ms ({nics} children)")
    print(f"  wall per poll:         {wall / polls * 1000:8.2f} ms")
    print(f"  max RSS:               {after_self.ru_maxrss / 1024:8.1f} MiB")
    print(f"  Python alloc peak:     {peak / 1024:8.1f} KiB (tracemalloc, during the polls)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--polls", type=int, default=20)
    ap.add_argument("--nics", type=int, default=8)
    args = ap.parse_args()
    asyncio.run(run(args.polls, args.nics))


if __name__ == "__main__":
    main()
