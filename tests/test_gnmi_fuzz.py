"""No gNMI payload produces a traceback: random notifications (any JSON shape, hostile paths, every
value kind, deletes anywhere) parse, or fail as a ParseError naming what was wrong, and a parse
never changes the state it was given."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabricmon import collectors
from fabricmon.collectors.base import ParseError
from fabricmon.core.model import TargetSpec

GNMI = collectors.get("gnmi")
SPEC = TargetSpec("sw1", "gnmi")

_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
                     lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=10), c, max_size=4), max_leaves=12)
# Paths from the profiles' vocabulary of names, so the fuzz reaches the rules and not only the path parser.
_names = st.sampled_from(["COUNTERS", "Ethernet0", "Ethernet0:3", "Queues", "Pfcwd", "PORT_QOS_MAP", "PFC_WD", "QUEUE",
                          "WRED_PROFILE", "LLDP_ENTRY_TABLE", "PORT_TABLE", "qos", "interfaces", "interface[interface-id=swp1]",
                          "interface[name=swp1]", "switch-priority[priority=3]", "state", "counters", "in-pause-pkts",
                          "in-pause-duration", "output", "queues", "queue[name=3]", "transmit-pkts", "wjh", "aggregate", "l2",
                          "reasons", "reason[id=209][severity=error]", "drop", "lldp", "neighbors", "neighbor[id=1]",
                          "system-name", "port-id", "x[", "]", "a[k=v/w]", "eos_native:", "*"])
_path = st.lists(_names, max_size=7).map(lambda parts: "/" + "/".join(parts)) | st.text(max_size=30)
_kind = st.sampled_from(["uint_val", "int_val", "double_val", "bool_val", "string_val", "bytes_val", "json_val",
                         "json_ietf_val", "leaflist_val", "invalid_json", "ascii_val", "no_such_kind"])
_update = st.fixed_dictionaries({"path": _path, "val": st.dictionaries(_kind, _json, min_size=0, max_size=2)}) | _json
_notification = st.fixed_dictionaries(
    {"timestamp": st.integers(min_value=-5, max_value=2**63) | _json, "prefix": _path,
     "update": st.lists(_update, max_size=5) | _json, "delete": st.lists(_path, max_size=2) | _json},
    optional={"target": st.text(max_size=10) | _json, "sync_response": st.booleans()}) | _json


@given(st.lists(st.lists(_notification, max_size=8), min_size=1, max_size=3))
@settings(max_examples=200, deadline=None)
def test_random_notifications_parse_or_fail_cleanly(polls):
    state = GNMI.new_state()
    for notes in polls:
        before = copy.deepcopy(state)
        try:
            _result, new_state = GNMI.parse_poll({"notifications": notes}, SPEC, state)
        except ParseError:
            continue
        assert state == before
        state = new_state


@given(_json.filter(lambda p: not (isinstance(p, dict) and isinstance(p.get("notifications"), list))))
@settings(max_examples=100, deadline=None)
def test_a_payload_without_a_notification_list_is_a_parse_error(payload):
    with pytest.raises(ParseError, match="notifications"):
        GNMI.parse_poll(payload, SPEC, GNMI.new_state())
