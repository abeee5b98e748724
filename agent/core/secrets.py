"""Secrets from options: ``<name>`` inline, ``<name>_file`` (a path) or ``<name>_env`` (a variable name).

:func:`resolve` reads them at use time (so a rotated file is picked up on the next poll)
and returns a :class:`Secret`: a ``str`` whose ``str()``/``repr()``/format are ``***``,
so an accidental ``log.info("%s", secret)`` or an f-string in an error prints nothing
useful. ``.reveal()`` gives the value to the one call that needs it. Errors name the
option and the file or variable, never the value. :class:`RedactFilter` is a logging
filter for handlers, a second line of defence for values that escaped as plain strings.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

_warned_modes: set[str] = set()
_known_values: set[str] = set()  # revealed secrets, for RedactFilter (values only; never logged)
REDACTED = "***"


class SecretError(ValueError):
    """A secret option that cannot be used. The message never contains the secret."""


class Secret(str):
    """A secret string that does not print itself. ``reveal()`` returns the plain value."""

    __slots__ = ()

    def __str__(self) -> str:
        return REDACTED

    def __repr__(self) -> str:
        return "Secret('***')"

    def __format__(self, spec: str) -> str:
        return format(REDACTED, spec)

    def reveal(self) -> str:
        return str.__str__(self)


def _get(options: Any, key: str) -> Any:
    if isinstance(options, Mapping):
        return options.get(key)
    return getattr(options, key, None)


def _read_file(name: str, path: str) -> str:
    try:
        st = os.stat(path)
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise SecretError(f"{name}_file: cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise SecretError(f"{name}_file: {path} is not UTF-8 text") from None
    if st.st_mode & 0o077 and path not in _warned_modes:
        _warned_modes.add(path)
        log.warning("%s_file: %s is readable by group or others (mode %04o); chmod 600 it", name, path, stat.S_IMODE(st.st_mode))
    # Only the line ending an editor or `echo` adds; other whitespace may be part of the secret.
    return text.removesuffix("\n").removesuffix("\r")


def resolve(options: Any, name: str) -> Secret | None:
    """The secret option ``name`` of a pydantic options object or a dict; None when none is set.

    Exactly one of ``name``, ``name_file`` and ``name_env`` may be set; an empty file or
    variable is an error (a half-provisioned secret should fail loudly, not authenticate
    with an empty string).
    """
    inline, path, env = _get(options, name), _get(options, f"{name}_file"), _get(options, f"{name}_env")
    given = [k for k, v in ((name, inline), (f"{name}_file", path), (f"{name}_env", env)) if v not in (None, "")]
    if len(given) > 1:
        raise SecretError(f"{' and '.join(given)} are both set; use only one")
    if path:
        value = _read_file(name, str(path))
        if not value:
            raise SecretError(f"{name}_file: {path} is empty")
    elif env:
        raw = os.environ.get(str(env))
        if raw is None:
            raise SecretError(f"{name}_env: environment variable {env} is not set")
        if not raw:
            raise SecretError(f"{name}_env: environment variable {env} is empty")
        value = raw
    elif inline not in (None, ""):
        value = inline.reveal() if isinstance(inline, Secret) else str(inline)
    else:
        return None
    if len(value) >= 4:
        _known_values.add(value)
    return Secret(value)


class RedactFilter(logging.Filter):
    """Replaces every secret :func:`resolve` returned (4 characters or more) in log records with ``***``.

    Install it on handlers: ``handler.addFilter(RedactFilter())``. It formats the record's
    message once (``record.msg``/``args`` become the redacted text).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not _known_values:
            return True
        try:
            msg = record.getMessage()
        except Exception:  # a broken format string: let logging report it as usual
            return True
        redacted = msg
        for value in _known_values:
            if value in redacted:
                redacted = redacted.replace(value, REDACTED)
        if redacted != msg:
            record.msg, record.args = redacted, None
        return True
