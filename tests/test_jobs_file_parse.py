"""The ``jobs-file`` source: its file format, what it refuses, and that it reads labels only when told."""

from __future__ import annotations

import pytest

from fabricmon.collectors.base import FetchError, ParseError
from fabricmon.collectors.jobs_file import JobsFileCollector, JobsFileOptions
from fabricmon.core.model import TargetSpec


def parse(text: str, **options):
    result, _ = JobsFileCollector.parse_poll({"text": text}, TargetSpec("f", "jobs-file", options), None)
    return result


def test_job_to_hosts_and_host_to_job_merge() -> None:
    r = parse('jobs: {"7": "gpu[1-2]"}\nhosts: {gpu3: "7", gpu4: ["7", "8"]}\n')
    assert {j.id: j.hosts for j in r.inventory} == {"7": ("gpu1", "gpu2", "gpu3", "gpu4"), "8": ("gpu4",)}


def test_labels_only_those_listed() -> None:
    text = 'jobs: {"7": {hosts: gpu1, labels: {user: alice, project: llm}}}\n'
    assert parse(text).inventory[0].labels == ()
    assert parse(text, labels=["project"]).inventory[0].labels == (("project", "llm"),)


@pytest.mark.parametrize(("text", "why"), [
    ("jobs: {a: &x gpu1, b: *x}\n", "aliases are not allowed"),
    ('jobs: {"7": "gpu[3-1]"}\n', "jobs.7: range '3-1'"),
    ("jobs: {\"7\": {hosts: gpu1, nodes: gpu2}}\n", "unknown key"),
    ("nodes: {}\n", "a jobs file is a mapping"),
    ("jobs: {\"7\": {hosts: gpu1, start: yesterday}}\n", "not an RFC 3339 time"),
    ("jobs: [\n", "not YAML"),
])
def test_bad_files_say_what_is_wrong(text, why) -> None:
    with pytest.raises(ParseError, match=why.replace("[", r"\[")):
        parse(text)


def test_a_label_must_not_shadow_the_metric_labels() -> None:
    with pytest.raises(ValueError, match="reserved"):
        JobsFileOptions(path="/x", labels=["job"])
    with pytest.raises(ValueError, match="pattern"):
        JobsFileOptions(path="/x", labels=["user-name"])


async def test_fetch_reads_the_file_and_bounds_it(tmp_path) -> None:
    f = tmp_path / "jobs.yml"
    f.write_text('jobs: {"7": gpu1}\n')
    assert await JobsFileCollector("f", "", JobsFileOptions(path=str(f))).fetch() == {"text": 'jobs: {"7": gpu1}\n'}
    with pytest.raises(FetchError) as err:
        await JobsFileCollector("f", "", JobsFileOptions(path=str(f), max_bytes=5)).fetch()
    assert err.value.reason == "size"
    with pytest.raises(FetchError) as err:
        await JobsFileCollector("f", "", JobsFileOptions(path=str(tmp_path / "missing.yml"))).fetch()
    assert err.value.reason == "command" and "missing.yml" in str(err.value)
