"""I/O of the Slurm sources: run ``squeue --json`` (or ``scontrol show job --json``), or GET
slurmrestd's jobs list; keep the running jobs and the fields the parser reads.

A poll's payload is the job-info output in Slurm's own shape, reduced: only jobs whose state
is RUNNING, each with :data:`~fabricmon.collectors.slurm.parse.ALWAYS_KEPT` and the fields of
the labels the operator enabled. ``squeue --json`` prints every job in the queue with about
a hundred fields each (Slurm 22.05 ignores ``--states`` with ``--json``), which would make a
recording large and put every user's name and job name into it; what is dropped here is
never recorded.
"""

from __future__ import annotations

from typing import Any

from fabricmon.collectors.base import ErrorReason, FetchError
from fabricmon.collectors.command import SLURM_MAX_OUTPUT, run_command
from fabricmon.collectors.slurm.parse import ALWAYS_KEPT, LABEL_FIELDS, running
from fabricmon.core import boundedjson
from fabricmon.core.threads import in_daemon_thread


def reduce(obj: Any, labels: list[str], what: str) -> dict[str, Any]:
    """The job-info object with only running jobs and the kept fields; FetchError when it is
    not one (named ``what``)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("jobs"), list):
        keys = sorted(obj)[:8] if isinstance(obj, dict) else type(obj).__name__
        raise FetchError(f"{what}: not Slurm job-info output (no 'jobs' list; got {keys})", ErrorReason.PROTOCOL)
    keep = set(ALWAYS_KEPT) | {LABEL_FIELDS[k] for k in labels}
    jobs = []
    for job in obj["jobs"]:
        if not isinstance(job, dict) or not running(job):
            continue
        kept = {k: v for k, v in job.items() if k in keep}
        if isinstance(job.get("nodes"), str) and job["nodes"].strip():
            kept.pop("job_resources", None)  # per-node CPU maps: only needed when the host list is missing
        jobs.append(kept)
    out: dict[str, Any] = {k: obj[k] for k in ("meta", "errors", "warnings") if k in obj}
    out["jobs"] = jobs
    return out


async def run_json(argv: list[str], timeout: float, labels: list[str]) -> dict[str, Any]:
    """Run a Slurm command that prints job-info JSON; its reduced output. The output is capped
    (SLURM_MAX_OUTPUT, reason ``size``), bounded in values before it is decoded, and a large one
    is decoded and reduced in a daemon thread, element by element (fabricmon.core.boundedjson):
    a big queue's JSON never stalls the event loop."""
    res = await run_command(argv, timeout, SLURM_MAX_OUTPUT)
    if res.returncode != 0:
        raise FetchError(res.describe_failure("failed"), ErrorReason.COMMAND)
    if len(res.stdout) < boundedjson.SLICE_BYTES:
        return _decode(argv, res.stdout, labels)
    return await in_daemon_thread(_decode, argv, res.stdout, labels)


def _decode(argv: list[str], stdout: str, labels: list[str]) -> dict[str, Any]:
    shown = " ".join(argv)
    try:
        obj = boundedjson.loads(stdout, what=f"the output of `{shown}`")
    except boundedjson.JsonRefused as exc:
        raise FetchError(f"{exc}; refused", ErrorReason.SIZE if exc.too_many else ErrorReason.PROTOCOL) from None
    except ValueError:
        first = stdout.strip().splitlines()[0][:120] if stdout.strip() else "(no output)"
        raise FetchError(f"`{shown}` did not print JSON (does this Slurm support --json? it needs the openapi or "
                         f"data_parser plugins): {first}", ErrorReason.PROTOCOL) from None
    return reduce(obj, labels, f"`{shown}`")
