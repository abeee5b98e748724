"""Running Slurm jobs from ``squeue --json``, ``scontrol show job --json`` or slurmrestd's jobs list.

All three print one shape, the REST API's job-info response ``{"meta", "errors", "warnings",
"jobs": [JOB, ...]}``; what differs is the data-parser version, and so how some fields are
written. Read here, per field:

* ``job_state``: a string (``"RUNNING"``, openapi v0.0.38 of Slurm 22.05, **verified** against
  a real Slurm 22.05.8 in tests/test_slurm_real.py) or a list of state flags
  (``["RUNNING"]``, ``["RUNNING", "COMPLETING"]``: data_parser v0.0.39 and later, Slurm 23.02+,
  **inferred** from SchedMD's REST API reference and public clients). A job is running when
  ``RUNNING`` is its state or among its flags; every other state (pending, suspended,
  completing only, ended) is left out.
* ``nodes``: the allocated nodes as a Slurm host list (``gpu[001-004,010]``), expanded with
  :func:`fabricmon.core.hostlist.expand`; when empty, ``job_resources.nodes`` (a host list in
  22.05), ``job_resources.allocated_nodes[].nodename`` (22.05) or
  ``job_resources.nodes.allocation[].name`` (v0.0.40+, inferred).
* ``start_time``, ``array_task_id``, ``het_job_offset``: a number (22.05) or a
  ``{"set": true, "infinite": false, "number": N}`` object (v0.0.39+, inferred); unset or
  infinite means none.
* ``job_id`` (number or string) is the job's id; an array task also answers to
  ``<array_job_id>_<task>`` and a heterogeneous component to ``<het_job_id>+<offset>``, as
  ``squeue`` prints them.

Labels (``name``, ``user`` from ``user_name``, ``partition``, ``account``) are read only when
listed in the ``labels`` option: job names and user names can be personal data.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import Field

from fabricmon.collectors.base import ParseError, ParseOptions
from fabricmon.core.hostlist import HostlistError, expand
from fabricmon.core.model import JobInfo, ParseResult, TargetSpec

Label = Literal["name", "user", "partition", "account"]
# label -> the job object's field
LABEL_FIELDS: dict[str, str] = {"name": "name", "user": "user_name", "partition": "partition", "account": "account"}
# Fields a poll keeps of a running job (fetch.py drops the rest: size, and personal data not enabled).
ALWAYS_KEPT = ("job_id", "job_state", "nodes", "job_resources", "start_time", "array_job_id", "array_task_id",
               "het_job_id", "het_job_offset", "node_count")


class SlurmParseOptions(ParseOptions):
    """``labels``: which optional labels to read (none by default)."""

    labels: list[Label] = Field(default_factory=list)


def number(value: Any) -> float | None:
    """A Slurm number: plain, or ``{"set", "infinite", "number"}`` (None when unset or infinite)."""
    if isinstance(value, dict):
        if value.get("set") is False or value.get("infinite") is True:
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def states(job: dict[str, Any]) -> list[str]:
    """The job's state and flags, upper case."""
    st = job.get("job_state")
    if isinstance(st, str):
        return [st.upper()]
    if isinstance(st, list):
        return [s.upper() for s in st if isinstance(s, str)]
    return []


def running(job: dict[str, Any]) -> bool:
    return "RUNNING" in states(job)


def _node_names(job: dict[str, Any]) -> tuple[str | None, list[str]]:
    """(a host list to expand, or None; names listed one by one)."""
    nodes = job.get("nodes")
    if isinstance(nodes, str) and nodes.strip():
        return nodes, []
    res = job.get("job_resources")
    if not isinstance(res, dict):
        return None, []
    rn = res.get("nodes")
    if isinstance(rn, str) and rn.strip():
        return rn, []
    rows: Iterable[Any] = res.get("allocated_nodes") or []
    if isinstance(rn, dict):
        rows = rn.get("allocation") or []
    names = [str(r.get("nodename") or r.get("name") or "") for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []
    return None, [n for n in names if n]


def _id(value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and value.strip():
        return value.strip()
    n = number(value)
    return str(int(n)) if n is not None else None


def job_of(job: dict[str, Any], labels: list[str]) -> JobInfo:
    """One running job object -> JobInfo; ParseError naming the job when it cannot be read."""
    jid = _id(job.get("job_id"))
    if jid is None:
        raise ParseError(f"a running job without a job_id: {sorted(job)[:8]}")
    text, names = _node_names(job)
    try:
        hosts = expand(text) if text is not None else list(dict.fromkeys(names))
    except HostlistError as exc:
        raise ParseError(f"job {jid}: nodes: {exc}") from None
    aliases = []
    task = number(job.get("array_task_id"))
    array_id = _id(job.get("array_job_id"))
    if task is not None and array_id not in (None, "0"):
        aliases.append(f"{array_id}_{int(task)}")
    het_id = _id(job.get("het_job_id"))
    offset = number(job.get("het_job_offset"))
    if het_id not in (None, "0") and offset is not None:
        aliases.append(f"{het_id}+{int(offset)}")
    start = number(job.get("start_time"))
    lbl = tuple((k, str(job[LABEL_FIELDS[k]])) for k in labels
                if isinstance(job.get(LABEL_FIELDS[k]), str | int) and str(job[LABEL_FIELDS[k]]) != "")
    return JobInfo(jid, tuple(hosts), start if start else None, tuple(a for a in aliases if a != jid), lbl)


def jobs_response(payload: dict[str, Any]) -> dict[str, Any]:
    """The job-info object of a poll: the payload itself (commands), or the body of its one
    recorded response (slurmrestd)."""
    responses = payload.get("responses")
    if responses is None:
        return payload
    if not isinstance(responses, list) or not responses or not isinstance(responses[0], dict):
        raise ParseError("slurmrestd payload: 'responses' must be a list with the jobs call")
    body = responses[0].get("body")
    if not isinstance(body, dict):
        raise ParseError(f"slurmrestd {responses[0].get('path', '')}: the body is not a JSON object")
    return body


def parse_payload(payload: dict[str, Any], spec: TargetSpec) -> ParseResult:
    opts = SlurmParseOptions.from_spec(spec)
    obj = jobs_response(payload)
    jobs = obj.get("jobs")
    if not isinstance(jobs, list):
        raise ParseError(f"no 'jobs' list in the job-info output (keys: {sorted(obj)[:8]})")
    result = ParseResult(inventory=[])
    for err in obj.get("errors") or []:
        text = err.get("description") or err.get("error") if isinstance(err, dict) else err
        if text:
            result.warnings.append(f"Slurm reported an error: {text}")
    seen: set[str] = set()
    for job in jobs:
        if not isinstance(job, dict) or not running(job):
            continue
        try:
            info = job_of(job, list(opts.labels))
        except ParseError as exc:
            result.warnings.append(f"job skipped: {exc}")
            continue
        if not info.hosts:
            result.warnings.append(f"running job {info.id} lists no nodes: skipped")
            continue
        if info.id in seen:
            continue
        seen.add(info.id)
        result.inventory.append(info)  # type: ignore[union-attr]
    return result
