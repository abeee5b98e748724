"""fabricmon.core.secrets: <name>, <name>_file, <name>_env; errors and logs never show the value."""

from __future__ import annotations

import logging

import pytest
from pydantic import BaseModel

from fabricmon.core import secrets
from fabricmon.core.secrets import RedactFilter, Secret, SecretError, resolve

VALUE = "Tr0ub4dor&3 "  # a trailing space that belongs to the secret


class Opts(BaseModel):
    password: str | None = None
    password_file: str | None = None
    password_env: str | None = None


def test_inline_file_env_and_none(tmp_path, monkeypatch):
    f = tmp_path / "pw"
    f.write_text(VALUE + "\n")
    f.chmod(0o600)
    monkeypatch.setenv("FM_TEST_PW", VALUE)
    assert resolve({"password": VALUE}, "password").reveal() == VALUE
    assert resolve(Opts(password_file=str(f)), "password").reveal() == VALUE  # only the newline is stripped
    assert resolve(Opts(password_env="FM_TEST_PW"), "password").reveal() == VALUE
    assert resolve(Opts(), "password") is None
    f.write_text(VALUE + "\r\n")
    assert resolve({"password_file": str(f)}, "password").reveal() == VALUE


@pytest.mark.parametrize(("opts", "message"), [
    ({"password_file": "/nonexistent/pw"}, "password_file: cannot read /nonexistent/pw"),
    ({"password_env": "FM_TEST_UNSET_VAR"}, "password_env: environment variable FM_TEST_UNSET_VAR is not set"),
    ({"password": VALUE, "password_env": "X"}, "password and password_env are both set"),
])
def test_errors_name_the_option_not_the_value(opts, message, monkeypatch):
    monkeypatch.delenv("FM_TEST_UNSET_VAR", raising=False)
    with pytest.raises(SecretError) as e:
        resolve(opts, "password")
    assert message in str(e.value) and VALUE.strip() not in str(e.value)


def test_empty_file_is_an_error(tmp_path):
    f = tmp_path / "pw"
    f.write_text("\n")
    f.chmod(0o600)
    with pytest.raises(SecretError, match="is empty"):
        resolve({"password_file": str(f)}, "password")


def test_world_readable_file_warns_once(tmp_path, caplog):
    f = tmp_path / "community"
    f.write_text("public-ish\n")
    f.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="fabricmon.core.secrets"):
        for _ in range(3):
            resolve({"community_file": str(f)}, "community")
    warnings = [r for r in caplog.records if "readable by group or others" in r.getMessage()]
    assert len(warnings) == 1 and str(f) in warnings[0].getMessage() and "0644" in warnings[0].getMessage()
    assert "public-ish" not in caplog.text
    g = tmp_path / "private"
    g.write_text("x\n")
    g.chmod(0o600)
    caplog.clear()
    resolve({"community_file": str(g)}, "community")
    assert not caplog.records


def test_secret_does_not_print_itself():
    s = Secret(VALUE)
    assert str(s) == "***" and repr(s) == "Secret('***')" and f"{s}" == "***" and "%s" % s == "***"  # noqa: UP031 (the logging style)
    assert s.reveal() == VALUE and type(s.reveal()) is str
    assert s == VALUE  # still usable where a str is compared or encoded
    assert s.encode() == VALUE.encode()


def test_redact_filter(monkeypatch):
    monkeypatch.setattr(secrets, "_known_values", set())
    resolve({"token": "abcd-1234-token"}, "token")
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "request failed: %s", ("Bearer abcd-1234-token rejected",), None)
    assert RedactFilter().filter(record)
    assert record.getMessage() == "request failed: Bearer *** rejected"


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_password_file_must_be_a_regular_file(tmp_path, kind):
    """A FIFO would block the read forever, a device could be anything: refused without being read."""
    import os

    path = {"fifo": tmp_path / "pw.fifo", "device": "/dev/zero", "directory": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path, 0o600)  # no writer: a plain open() for reading would block here
    with pytest.raises(SecretError) as e:
        resolve({"password_file": str(path)}, "password")
    assert str(path) in str(e.value)
    assert {"fifo": "is a FIFO", "device": "is a device", "directory": "not a regular file"}[kind] in str(e.value)


def test_oversized_password_file_is_refused(tmp_path):
    f = tmp_path / "big"
    f.write_bytes(b"x" * (secrets.MAX_SECRET_FILE_BYTES + 1))
    f.chmod(0o600)
    with pytest.raises(SecretError, match="larger than"):
        resolve({"password_file": str(f)}, "password")


async def test_echoed_authorization_header_is_redacted_everywhere(caplog):
    """A device whose error page echoes the request's Authorization header: the credential reaches
    neither the poll error (recordings), nor the target's last_error (/api/targets, /), nor the log."""
    import base64

    from fabricmon.agent.pipeline import Pipeline
    from fabricmon.collectors.base import FetchError
    from fabricmon.collectors.ufm import UfmCollector, UfmOptions
    from fabricmon.core.model import Poll
    from tests.http_standins import Reply, StandIn

    user, password = "admin", "echo-Me-pw!"
    pair = base64.b64encode(f"{user}:{password}".encode()).decode()
    echo = Reply(f"400 Bad Request: you sent Authorization: Basic {pair}", status=400)
    routes = {f"{prefix}/resources/{res}": echo for prefix in ("/ufmRest", "/ufmRestV3") for res in ("ports", "links", "systems")}
    async with StandIn(routes) as srv:
        c = UfmCollector("ufm01", "127.0.0.1", UfmOptions(port=srv.port, scheme="http", username=user, password=password))
        try:
            with pytest.raises(FetchError) as e:
                await c.fetch()
        finally:
            await c.close()
    message = str(e.value)
    assert "Authorization: Basic ***" in message and pair not in message and password not in message
    pipeline = Pipeline([c.spec()], [])
    # A collector that did not redact (or an error from elsewhere) is redacted on the way into the pipeline too.
    pipeline.ingest(Poll("ufm01", "ufm", 1.0, 0.1, False, error=f"echo: Basic {pair} and {password}", reason="http"))
    last = pipeline.targets["ufm01"].last_error or ""
    assert pair not in last and password not in last and "***" in last
    handler_filter = RedactFilter()
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "device said %s", (f"Basic {pair}",), None)
    assert handler_filter.filter(record) and pair not in record.getMessage()


def test_redact_filter_covers_tracebacks(monkeypatch):
    monkeypatch.setattr(secrets, "_known_values", set())
    resolve({"token": "tb-secret-value"}, "token")
    try:
        raise RuntimeError("failed with tb-secret-value")
    except RuntimeError:
        import sys

        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "boom", (), sys.exc_info())
    assert RedactFilter().filter(record)
    assert "tb-secret-value" not in logging.Formatter().format(record) and "***" in record.exc_text
