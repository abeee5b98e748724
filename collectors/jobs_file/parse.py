"""A static job placement file: for sites whose scheduler fabricmon cannot ask.

YAML (or JSON, which is YAML) with either or both of:

```yaml
jobs:                       # job id -> its hosts: a Slurm host list, or a list of them
  "48213": gpu[001-032]
  llama-70b:
    hosts: [gpu[033-040], gpu050]
    start: 2025-12-02T01:00:00Z     # optional, RFC 3339 or Unix seconds
    labels: {user: alice}           # optional; only the keys listed in the labels option are read
hosts:                      # host -> job id (or a list of them), for files written per host
  gpu099: "48213"
```

Every job in the file counts as running. Anchors and aliases are refused (a small file must
not expand to a large one), as are keys that are not text or numbers.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

import yaml
from pydantic import AfterValidator, Field

from fabricmon.collectors.base import ParseError, ParseOptions
from fabricmon.core.hostlist import HostlistError, expand
from fabricmon.core.model import JobInfo, ParseResult, TargetSpec

# A label the file may carry, exported on fabricmon_finding_job_info: a Prometheus label name
# that is not one of the metric's own (kind, device, port, job).
LabelName = Annotated[str, Field(pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$"), AfterValidator(
    lambda v: v if v not in ("kind", "device", "port", "job") and not v.startswith("__") else _reserved(v))]


def _reserved(name: str) -> str:
    raise ValueError(f"label {name!r} is reserved (the info metric's own, or Prometheus')")


class JobsFileParseOptions(ParseOptions):
    labels: list[LabelName] = Field(default_factory=list)


class _NoAliases(yaml.SafeLoader):
    def compose_node(self, parent: Any, index: Any) -> Any:  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, "aliases are not allowed in a jobs file", event.start_mark)
        return super().compose_node(parent, index)


def _hosts(value: Any, where: str) -> list[str]:
    texts = value if isinstance(value, list) else [value]
    out: list[str] = []
    for t in texts:
        if not isinstance(t, str | int) or isinstance(t, bool):
            raise ParseError(f"{where}: hosts must be host lists (text), got {type(t).__name__}")
        try:
            out.extend(expand(str(t)))
        except HostlistError as exc:
            raise ParseError(f"{where}: {exc}") from None
    return out


def _start(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):  # YAML reads an unquoted timestamp itself
        return (value if value.tzinfo else value.replace(tzinfo=dt.UTC)).timestamp()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ParseError(f"{where}: start {value!r} is not an RFC 3339 time") from None
        return (t if t.tzinfo else t.replace(tzinfo=dt.UTC)).timestamp()
    raise ParseError(f"{where}: start must be a time, got {type(value).__name__}")


def parse_payload(payload: dict[str, Any], spec: TargetSpec) -> ParseResult:
    opts = JobsFileParseOptions.from_spec(spec)
    text = payload.get("text")
    if not isinstance(text, str):
        raise ParseError("jobs-file payload: 'text' (the file's contents) is missing")
    try:
        doc = yaml.load(text, Loader=_NoAliases)  # a SafeLoader that refuses aliases
    except yaml.YAMLError as exc:
        raise ParseError(f"not YAML: {' '.join(str(exc).split())[:300]}") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict) or not set(doc) <= {"jobs", "hosts"}:
        raise ParseError("a jobs file is a mapping with jobs: (job -> hosts) and/or hosts: (host -> job)")
    jobs: dict[str, dict[str, Any]] = {}
    for jid, spec_ in (doc.get("jobs") or {}).items():
        where = f"jobs.{jid}"
        if isinstance(spec_, dict):
            unknown = set(spec_) - {"hosts", "start", "labels"}
            if unknown:
                raise ParseError(f"{where}: unknown key(s) {sorted(map(str, unknown))}")
            hosts, start, labels = spec_.get("hosts"), _start(spec_.get("start"), where), spec_.get("labels") or {}
            if not isinstance(labels, dict):
                raise ParseError(f"{where}.labels: a mapping of label -> value")
        else:
            hosts, start, labels = spec_, None, {}
        entry = jobs.setdefault(str(jid), {"hosts": {}, "start": start, "labels": {}})
        entry["hosts"].update(dict.fromkeys(_hosts(hosts, where)))
        entry["labels"].update({str(k): str(v) for k, v in labels.items() if str(k) in opts.labels})
    for host, ids in (doc.get("hosts") or {}).items():
        for jid in ids if isinstance(ids, list) else [ids]:
            if not isinstance(jid, str | int) or isinstance(jid, bool):
                raise ParseError(f"hosts.{host}: a job id (text), got {type(jid).__name__}")
            entry = jobs.setdefault(str(jid), {"hosts": {}, "start": None, "labels": {}})
            entry["hosts"].update(dict.fromkeys(_hosts(host, f"hosts.{host}")))
    result = ParseResult(inventory=[])
    for jid in sorted(jobs):
        j = jobs[jid]
        if not j["hosts"]:
            result.warnings.append(f"job {jid} lists no hosts: skipped")
            continue
        result.inventory.append(JobInfo(jid, tuple(j["hosts"]), j["start"], (), tuple(sorted(j["labels"].items()))))  # type: ignore[union-attr]
    return result
