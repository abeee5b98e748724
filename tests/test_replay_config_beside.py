"""``fabricmon replay X.jsonl.gz`` without ``--config.file`` uses ``X.yml`` beside the recording.

The recording is the physics corpus' non-identity priority map: priority 3 is served by egress
queue 5 (and 5 by 3), which only the config's ``fabric: priority_to_queue`` can say. Read with
the identity map the lossless loss lands on the wrong switch; with the config beside it, on the
one the truth line names.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from fabricmon.agent.cli import main

CORPUS = Path(__file__).resolve().parent / "scenarios_physics"
NAME = "nonidentity_priority_map"


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    rec = tmp_path / f"{NAME}.jsonl.gz"
    shutil.copyfile(CORPUS / f"{NAME}.jsonl.gz", rec)
    return rec


def _loss_devices(rec: Path, out: Path, *extra: str) -> set[str]:
    """Devices of the packet_loss findings a CLI replay of ``rec`` wrote to ``out``."""
    assert main(["replay", str(rec), "--quiet", "--findings-out", str(out), *extra]) == 0
    found = [json.loads(line) for line in out.read_text().splitlines()]
    return {f["device"] for f in found if f["kind"] == "packet_loss"}


def _truth_devices() -> set[str]:
    with gzip.open(CORPUS / f"{NAME}.jsonl.gz", "rt") as f:
        lines = [json.loads(line) for line in f]
    return {t["device"] for t in lines if t.get("type") == "truth" and t["kind"] == "packet_loss"}


def test_replay_uses_the_config_beside_the_recording(recording: Path, tmp_path: Path, capsys) -> None:
    truth = _truth_devices()
    assert truth == {"leaf02"}
    without = _loss_devices(recording, tmp_path / "without.jsonl")
    assert without and without != truth  # identity map: the loss is read on the wrong queue

    shutil.copyfile(CORPUS / f"{NAME}.yml", tmp_path / f"{NAME}.yml")
    capsys.readouterr()
    assert _loss_devices(recording, tmp_path / "beside.jsonl") == truth
    # --quiet hides the note; without it the replay says which config it took.
    assert main(["replay", str(recording), "--findings-out", str(tmp_path / "noted.jsonl")]) == 0
    assert f"using the config beside the recording: {tmp_path / (NAME + '.yml')}" in capsys.readouterr().err


def test_config_file_wins_over_the_one_beside(recording: Path, tmp_path: Path) -> None:
    shutil.copyfile(CORPUS / f"{NAME}.yml", tmp_path / f"{NAME}.yml")
    identity = tmp_path / "identity.yml"
    identity.write_text("fabric:\n  lossless_priorities: [3]\n")
    assert _loss_devices(recording, tmp_path / "explicit.jsonl", "--config.file", str(identity)) != _truth_devices()


def test_invalid_config_beside_is_reported_not_a_traceback(recording: Path, tmp_path: Path, capsys) -> None:
    (tmp_path / f"{NAME}.yml").write_text("fabric:\n  priority_to_queue: {3: many}\n")
    with pytest.raises(SystemExit) as stop:
        main(["replay", str(recording), "--quiet", "--findings-out", str(tmp_path / "x.jsonl")])
    assert stop.value.code == 1
    err = capsys.readouterr().err
    assert f"{NAME}.yml" in err and "priority_to_queue" in err


def test_help_says_so(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    assert "beside recording" in " ".join(capsys.readouterr().out.split())
