"""Host NIC collector in replay: the detector finds NIC-side events in the scenario corpus.

Two recordings (tools/scenarios/catalog.py): ``nic_pause_storm_arista`` (gpu03 is a host
target; its NIC storms, counting ``tx_pause_storm_error_events``) and ``roce_oos_burst_host``
(silent drops make gpu02's NIC count out-of-sequence packets, NAKs and ack timeouts). The
replay is stepped poll by poll, so the severity at the first poll of each event is checked,
not only the finding that survives to the end.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fabricmon.agent.pipeline import Pipeline
from fabricmon.agent.recording import iter_lines, poll_from_line
from fabricmon.agent.replay import replay_pipeline
from fabricmon.core.model import Finding

CORPUS = Path(__file__).resolve().parent / "scenarios"


def _replay(name: str, truth: list[dict[str, Any]]) -> Iterator[tuple[float, Pipeline]]:
    """Yield (poll time, pipeline) after each poll time's polls are all ingested; the truth
    lines are appended to ``truth`` as they are read."""
    path = CORPUS / f"{name}.jsonl.gz"
    lines = iter_lines(path)
    _, header = next(lines)
    pipe = replay_pipeline(header, path)
    t_prev: float | None = None
    for lineno, line in lines:
        if line["type"] == "truth":
            truth.append(line)
        if line["type"] != "poll":
            continue
        if t_prev is not None and line["t"] != t_prev:
            yield t_prev, pipe
        pipe.ingest(poll_from_line(path, lineno, line))
        t_prev = line["t"]
    assert t_prev is not None
    yield t_prev, pipe


def _first_seen(name: str, want) -> tuple[float, Finding, list[dict[str, Any]], list[Finding]]:
    """(time, finding as it was then) at the first poll time where ``want(finding)`` holds for
    an active finding, the truth and every finding of the whole replay (ended and still open)."""
    first: tuple[float, Finding] | None = None
    truth: list[dict[str, Any]] = []
    for t, pipe in _replay(name, truth):
        if first is None:
            hit = [f for f in pipe.detector.active if want(f)]
            if hit:
                first = (t, copy.deepcopy(hit[0]))  # the detector updates it later
    assert first is not None, f"{name}: nothing found"
    every = [*pipe.ended, *pipe.detector.close_all()]
    return first[0], first[1], truth, every


def test_oos_burst_found_critical_on_its_first_poll():
    t, f, truth, every = _first_seen(
        "roce_oos_burst_host",
        lambda f: f.kind == "packet_loss" and f.severity == "critical" and f.device == "gpu02")
    (tr,) = truth
    assert (tr["kind"], tr["device"], tr["port"], tr["priority"]) == ("packet_loss", "gpu02", "mlx5_0/1", None)
    # Critical on the first poll that shows the burst: no 3-of-5 wait for ~30k OOS per poll.
    assert t == tr["start"] and f.start == tr["start"]
    assert (f.device, f.port, f.priority, f.role) == ("gpu02", "mlx5_0/1", None, None)
    assert "gpu02" in f.summary and "mlx5_0/1" in f.summary and "out_of_sequence" in f.summary
    ev = f.evidence
    # ~30k OOS and ~1k NAKs are bursts on their own; ~50 ack timeouts wait for 3 of 5 polls.
    assert set(ev["polls_with_errors"]) == {"out_of_sequence", "packet_seq_err"}
    assert ev["per_minute"]["out_of_sequence"] >= 10
    # The burst is ~1e-3 of the packets received in a 10 s poll at 120 Gb/s: tens of thousands.
    assert 10_000 <= ev["last_interval"]["out_of_sequence"] <= 100_000
    # One finding for the host NIC, ending within 2 polls after the drops stop; the healthy
    # host target (gpu05) and the switches report nothing.
    assert [(g.kind, g.device, g.port) for g in every] == [("packet_loss", "gpu02", "mlx5_0/1")]
    (g,) = every
    assert g.end is not None and tr["end"] <= g.end <= tr["end"] + 2 * 10.1
    assert set(g.evidence["polls_with_errors"]) == {"out_of_sequence", "packet_seq_err", "local_ack_timeout_err"}
    assert g.severity == "critical"


def test_nic_pause_storm_origin_is_device_confirmed_within_one_poll():
    def origin(f: Finding) -> bool:
        return f.kind == "pfc_storm" and f.role == "origin" and f.priority == 3

    t, f, truth, every = _first_seen("nic_pause_storm_arista", origin)
    (tr,) = [x for x in truth if x["role"] == "origin"]
    assert (tr["peer_device"], tr["peer_port"]) == ("gpu03", "eth0")
    ends = {(tr["device"], tr["port"]), (tr["peer_device"], tr["peer_port"])}
    assert (f.device, f.port) in ends  # the NIC or the switch port facing it
    assert f.start - tr["start"] <= 10.1 and t - tr["start"] <= 10.1
    assert f.severity == "critical"
    assert f.evidence.get("nic_pause_storm") == "error"  # the NIC's own storm counter confirmed it
    assert "gpu03" in f.summary
    assert {(f.peer_device, f.peer_port), (f.device, f.port)} == ends
    origins = [g for g in every if origin(g)]
    assert len(origins) == 1 and (origins[0].device, origins[0].port) in ends
    # No transport-loss finding in the storm recording: the NIC pauses, it does not drop.
    assert not [g for g in every if g.kind == "packet_loss"]
