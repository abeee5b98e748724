"""Links to job pages, and the finding page's list of the jobs a finding touches.

Kept apart from :mod:`fabricmon.agent.jobs.page` so the web view can import it without
importing the job page (which builds on the web view's helpers).
"""

from __future__ import annotations

from html import escape
from typing import Any
from urllib.parse import quote


def job_href(job_id: str) -> str:
    return "/jobs/" + quote(job_id, safe="")


def jobs_section(evidence: dict[str, Any]) -> str:
    """``<h2>Jobs</h2>`` for a finding the job stage annotated (its evidence has ``jobs_reach``); "" otherwise."""
    reach = evidence.get("jobs_reach")
    if not isinstance(reach, str):
        return ""
    jobs = [str(j) for j in evidence.get("jobs") or []]
    total = evidence.get("jobs_affected") if isinstance(evidence.get("jobs_affected"), int) else len(jobs)
    links = ", ".join(f"<a href='{escape(job_href(j))}'>{escape(j)}</a>" for j in jobs) or "none"
    more = f" and {total - len(jobs)} more" if total > len(jobs) else ""
    return f"<h2>Jobs ({total})</h2><p id='jobs'>{links}{more}</p><p class='muted'>Rule of reach: {escape(reach)}</p>"
