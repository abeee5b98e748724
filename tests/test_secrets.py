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
