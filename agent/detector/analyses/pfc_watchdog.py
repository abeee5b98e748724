"""The PFC watchdog cross-check (issue 27 item 4): a switch watchdog judged by its port's counters.

Switch PFC watchdogs detect a stuck lossless queue within 0.1-5 s and drop (or forward, or only
log) until it drains (fabric-reference.md section 3). They are known to misbehave in the field,
so fabricmon does not take them at their word. Per port and priority that reports a watchdog
(storm and restore counters, or a state gauge), :func:`verdicts` compares what the watchdog says
with the port's own pause and transmit counters of the same interval
(:class:`~fabricmon.agent.detector.analyses.pfc_state.PfcState`) and names every disagreement:

* ``cycling``: at least ``CYCLES_MIN`` storm/restore cycles in one interval (the smaller of the
  two counts) while the port's own pause shows no sustained storm (paused less than
  ``storm_pause_fraction``). On Broadcom TH4-TH6 a stormed priority stops counting received PFC
  frames, so the restoration test sees none and restores, PFC comes back, the storm is detected
  again: 170 storm/restore cycles in 20 minutes, ~624 ms each, against a storm that never
  stopped (sonic-buildimage#29203); a watchdog that cycles with no storm in the counters at all
  is as wrong. A port in a PFC deadlock is exempt: breaking a deadlock that re-forms while its
  routes remain is what the watchdog is for (the deadlock rule reports it).
* ``unfounded``: storm events or the stormed state while the port was paused less than
  ``graph_pause_fraction`` of the interval and still transmitted on the priority: a storm the
  counters do not show (SONiC's OR-logic false storms before sonic-swss PR #3036).
* ``stale``: the stormed state held through an interval in which pause frames kept arriving but
  the port's pause time shows it was not held, and the queue did not transmit: XON frames,
  which count as PFC frames, keep a restoration test that counts frames from ever firing
  (sonic-swss#4581), and the queue stays dropped. (A watchdog in ``forward`` mode ignores the
  pause of a real storm and lets the queue transmit: not stale.)
* ``frozen``: the watchdog went to the stormed state without counting a storm, and counts
  neither storms nor drops while it holds it (sonic-buildimage#19067: storms detected and
  restored while the watchdog counters do not move).
* ``silent``: configured on (``pfc_watchdog_enabled``) yet neither a storm event nor the stormed
  state through an interval in which the port was stuck (storm level, no transmit progress)
  for longer than any documented detection time (``DETECT_MAX_S``): a watchdog that misses a
  storm, as on TH6 where "the other ports stay operational for the whole duration of the storm,
  even though PFC frames are arriving on them continuously" (sonic-buildimage#29221). Only where
  the configuration says the watchdog is on: an alert-only or disabled watchdog looks the same
  from its counters, and SNMP does not say which (Cisco, Arista).

A storm event the counters contradict (``unfounded``) is no storm evidence:
:func:`~fabricmon.agent.detector.analyses.pfc_state.watchdog_trusted` says whether a port's watchdog
event counts for the pause graph.
:func:`acted` puts in words, for a storm finding's evidence, whether the watchdog acted.
"""

from __future__ import annotations

from dataclasses import dataclass

from fabricmon.agent.detector.analyses.pfc_state import PfcParams, PfcState, watchdog_trusted

# Cycles in one interval that make a loop rather than one storm ending and another beginning.
# Judgement call: #29203 measured one cycle per ~624 ms (16 per 10 s poll); two in one interval
# is already more than a storm that starts and ends within it.
CYCLES_MIN = 2
# The longest detection time a watchdog is documented with: SONiC pfcwd accepts 100-5000 ms
# (sonic-utilities pfcwd/main.py); Cumulus detects in 3 x 100 ms, ConnectX in 80-8000 ms
# (the NIC's, not a switch's). A port stuck for longer than this has given an enabled switch
# watchdog time to act.
DETECT_MAX_S = 5.0


@dataclass(frozen=True, slots=True)
class Verdict:
    """A watchdog that disagrees with its port's counters: which checks failed, in words."""

    st: PfcState
    checks: tuple[str, ...]  # cycling | unfounded | stale | frozen | silent
    words: tuple[str, ...]


def reports_watchdog(st: PfcState) -> bool:
    return st.wd_storms is not None or st.wd_state is not None


def _stormed(st: PfcState) -> bool:
    return st.wd_state is not None and st.wd_state >= 1


def _pause_words(st: PfcState) -> str:
    if st.rx_frac is not None:
        return f"the port was paused {st.rx_frac:.0%} of the interval"
    bound = st.rx_bound
    return f"its pause frames can have held the port at most {bound:.0%} of the interval" if bound is not None else \
        "the port reports no pause"


def _stale(st: PfcState, p: PfcParams) -> bool:
    """Held stormed, no storm counted now, pause frames arriving that held the port under
    ``graph_pause_fraction`` of the interval by its pause time, and the queue not transmitting
    (a ``forward``-mode watchdog lets it transmit: module doc)."""
    return _stormed(st) and st.rx_frac is not None and st.rx_frac < p.graph_pause_fraction and (st.rx_fps or 0.0) > 0 \
        and not st.wd_storms and st.progress is not True


def _silent(st: PfcState) -> bool:
    """Enabled, neither a storm event nor the stormed state, through an interval longer than any
    documented detection time in which the port was stuck."""
    return st.wd_enabled is not None and st.wd_enabled >= 1 and st.stuck is not None and not st.wd_storms \
        and not _stormed(st) and (st.dt or 0.0) > DETECT_MAX_S


def _checks(st: PfcState, p: PfcParams, in_deadlock: bool, frozen: bool) -> list[tuple[str, str]]:
    """Every check the watchdog fails this interval (module doc), with its words."""
    out: list[tuple[str, str]] = []
    bound = st.rx_bound
    cycles = min(st.wd_storms or 0.0, st.wd_restores or 0.0)
    if cycles >= CYCLES_MIN and not in_deadlock and (bound is None or bound < p.storm_pause_fraction):
        out.append(("cycling", f"it stormed and restored {int(cycles)} times in {st.dt or 0:.0f} s while {_pause_words(st)}: "
                               f"no sustained storm in the port's own counters"))
    if (st.wd_storms or _stormed(st)) and not watchdog_trusted(st, p):
        out.append(("unfounded", f"it declared a storm while {_pause_words(st)} and the priority kept transmitting"))
    if _stale(st, p):
        out.append(("stale", f"it holds the queue stormed while {st.rx_fps:.0f} PFC frames/s arrive that paused the port only "
                             f"{st.rx_frac:.0%} of the interval (XON frames keep a frame-counting restore from firing)"))
    if frozen:
        out.append(("frozen", "it holds the queue stormed but counted no storm and no drop since it went there"))
    if _silent(st):
        out.append(("silent", f"it is enabled, yet the port was stuck for {st.dt:.0f} s ({_pause_words(st)}, nothing sent "
                              f"on priority {st.prio}) and it neither counted a storm nor shut the queue"))
    return out


class WatchdogEpisodes:
    """When each watchdog went to the stormed state and whether its counters counted it
    (``frozen``): (port, priority) -> counted since the episode began."""

    def __init__(self) -> None:
        self.counted: dict[tuple[tuple[str, str], int], bool] = {}

    def frozen(self, st: PfcState, prev_state: float | None, changed: bool) -> bool:
        """Update the episode of ``st``'s watchdog; True while it holds a stormed state it never counted.
        ``prev_state``: the state gauge's value before this pass when it ``changed`` in it."""
        key = (st.pk, st.prio)
        if not _stormed(st):
            self.counted.pop(key, None)
            return False
        moved = bool(st.wd_storms) or bool(st.wd_drops)
        if key not in self.counted:
            # Only an episode seen to begin can be judged: a state already stormed when first
            # seen may have been counted before the agent looked.
            self.counted[key] = moved or not (changed and prev_state is not None and prev_state < 1)
        else:
            self.counted[key] = self.counted[key] or moved
        return not self.counted[key]

    def forget(self, live: set[tuple[tuple[str, str], int]]) -> None:
        for key in [k for k in self.counted if k not in live]:
            del self.counted[key]


def verdict(st: PfcState, p: PfcParams, in_deadlock: bool, frozen: bool) -> Verdict | None:
    """The port's watchdog against its counters; None when they agree (or it reports none)."""
    if not reports_watchdog(st) and st.wd_enabled is None:
        return None
    found = _checks(st, p, in_deadlock, frozen)
    if not found:
        return None
    return Verdict(st, tuple(c for c, _ in found), tuple(w for _, w in found))


def acted(st: PfcState | None) -> str:
    """Whether the port's watchdog acted, in words, for a storm finding's evidence."""
    if st is None or (not reports_watchdog(st) and st.wd_enabled is None):
        return "no watchdog reported for this queue"
    parts = []
    if st.wd_storms:
        parts.append(f"{int(st.wd_storms)} storm event(s)")
    if st.wd_restores:
        parts.append(f"{int(st.wd_restores)} restoration(s)")
    if st.wd_drops:
        parts.append(f"{int(st.wd_drops)} packet(s) dropped")
    if _stormed(st):
        parts.append("holds the queue stormed")
    if parts:
        return "acted: " + ", ".join(parts)
    if st.wd_enabled is not None:
        return "enabled, did not act" if st.wd_enabled >= 1 else "configured off"
    return "did not act (no storm event, queue not stormed)"
