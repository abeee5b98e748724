"""Secrets from options: ``<name>`` inline, ``<name>_file`` (a path) or ``<name>_env`` (a variable name).

:func:`resolve` reads them at use time (so a rotated file is picked up on the next poll)
and returns a :class:`Secret`: a ``str`` whose ``str()``/``repr()``/format are ``***``,
so an accidental ``log.info("%s", secret)`` or an f-string in an error prints nothing
useful. ``.reveal()`` gives the value to the one call that needs it. Errors name the
option and the file or variable, never the value.

:func:`redact` is the second line of defence for values that escaped as plain strings
(a device that echoes the request's ``Authorization`` header in an error body): it
replaces every resolved secret, every header value registered with :func:`remember`
(the base64 ``user:password`` of basic auth is not the password's text), and any
``Basic``/``Bearer`` credential token. :class:`RedactFilter` applies it to log records;
the CLI installs it on the root handlers, and HTTP error text is redacted the same way
before it reaches a target's ``last_error``, the API, the landing page or a recording.

**Every encoding.** A device echoes what it received in its own encoding: a JSON error body
has ``p@ss\\"w\\\\rd`` for ``p@ss"w\\rd``, a form echo ``p%40ss%22w%5Crd``, an HTML page
``p@ss&quot;w\\rd``. Each known value is registered with the forms a device may write it in
(:func:`encodings`: literal, JSON-escaped with and without ``\\/`` and ``\\uXXXX``, URL-encoded
in its common variants, HTML-escaped with named and numeric entities, base64 standard and
URL-safe), and each of those once more JSON-escaped, since a stored message is JSON (the API,
a recording line). :func:`redact` replaces all of them, longest first; :func:`redact_bytes` does
the same on an encoded recording line.

A ``<name>_file`` must be a regular file: a FIFO would block the read forever and a
device could be anything, so both are refused without being opened for reading.
"""

from __future__ import annotations

import base64
import html
import json
import logging
import os
import re
import stat
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger(__name__)

_warned_modes: set[str] = set()
_known_values: set[str] = set()  # revealed secrets, for RedactFilter (values only; never logged)
_forms: list[str] = []  # every encoding of every known value, longest first (see encodings())
_forms_bytes: list[bytes] = []
REDACTED = "***"
# redact_bytes (a whole recorded line, device data included) cuts out secrets of at least this
# many characters only: a shorter one (an SNMP community "public" or "cisco") is too likely an
# ordinary word of the data (a sysDescr, a target named after its community) to be cut out of
# what a device sent. Messages, log lines and pages (redact) lose every secret whatever its length.
MIN_PAYLOAD_SECRET = 8
MAX_SECRET_FILE_BYTES = 64 * 1024  # a password, token or community string; anything bigger is not a secret file
# An HTTP credential written out: `Basic <base64>`, `Bearer <token>` (RFC 7617, RFC 6750 token68 syntax).
_CREDENTIAL_TOKEN = re.compile(r"\b(Basic|Bearer|Token)\s+[A-Za-z0-9\-._~+/]{4,}=*", re.IGNORECASE)


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


def _not_regular(name: str, path: str, mode: int) -> SecretError:
    kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"
    return SecretError(f"{name}_file: {path} is {kind}; a secret file must be a regular file")


def _read_file(name: str, path: str, warn: Callable[[str], None] | None) -> str:
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(name, path, st.st_mode)
        # O_NONBLOCK: if a FIFO was swapped in after the stat, opening it does not block; fstat then refuses it.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise _not_regular(name, path, st.st_mode)
            data = fh.read(MAX_SECRET_FILE_BYTES + 1)
        if len(data) > MAX_SECRET_FILE_BYTES:
            raise SecretError(f"{name}_file: {path} is larger than {MAX_SECRET_FILE_BYTES} bytes; not a secret file")
        text = data.decode("utf-8")
    except OSError as exc:
        raise SecretError(f"{name}_file: cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise SecretError(f"{name}_file: {path} is not UTF-8 text") from None
    if st.st_mode & 0o077:
        loose = f"{name}_file: {path} is readable by group or others (mode {stat.S_IMODE(st.st_mode):04o}); chmod 600 it"
        if warn is not None:
            warn(loose)
        elif path not in _warned_modes:
            _warned_modes.add(path)
            log.warning("%s", loose)
    # Only the line ending an editor or `echo` adds; other whitespace may be part of the secret.
    return text.removesuffix("\n").removesuffix("\r")


def resolve(options: Any, name: str, warn: Callable[[str], None] | None = None) -> Secret | None:
    """The secret option ``name`` of a pydantic options object or a dict; None when none is set.

    Exactly one of ``name``, ``name_file`` and ``name_env`` may be set; an empty file or
    variable is an error (a half-provisioned secret should fail loudly, not authenticate
    with an empty string). A file readable by others is logged once, or handed to ``warn``
    (check-config reports it at the option's line).
    """
    inline, path, env = _get(options, name), _get(options, f"{name}_file"), _get(options, f"{name}_env")
    given = [k for k, v in ((name, inline), (f"{name}_file", path), (f"{name}_env", env)) if v not in (None, "")]
    if len(given) > 1:
        raise SecretError(f"{' and '.join(given)} are both set; use only one")
    if path:
        value = _read_file(name, str(path), warn)
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
    _know(value)
    return Secret(value)


def remember(value: str) -> None:
    """Register a credential derived from a secret (an ``Authorization`` header value) for :func:`redact`."""
    _know(value)


def _know(value: str) -> None:
    global _forms, _forms_bytes
    if len(value) < 4 or value in _known_values:
        return
    _known_values.add(value)
    forms = {f for v in _known_values for f in encodings(v)}
    _forms = sorted(forms, key=lambda f: (-len(f), f))
    long_forms = {f for v in _known_values if len(v) >= MIN_PAYLOAD_SECRET for f in encodings(v)}
    _forms_bytes = [f.encode("utf-8", "backslashreplace") for f in sorted(long_forms, key=lambda f: (-len(f), f))]


def _json_forms(v: str) -> set[str]:
    inner = json.dumps(v)[1:-1]  # \uXXXX for non-ASCII
    plain = json.dumps(v, ensure_ascii=False)[1:-1]
    return {inner, plain, inner.replace("/", "\\/"), plain.replace("/", "\\/")}


def encodings(value: str) -> set[str]:
    """The forms ``value`` may take in what a device sends back and in what fabricmon stores (see the module docstring)."""
    raw = value.encode("utf-8", "surrogatepass")
    first: set[str] = {value, *_json_forms(value)}
    for safe in ("", "/"):
        q = urllib.parse.quote(value, safe=safe)
        first |= {q, q.lower() if "%" in q else q, urllib.parse.quote_plus(value, safe=safe)}
    first |= {html.escape(value), html.escape(value, quote=False),
              html.escape(value).replace("&quot;", "&#34;").replace("&#x27;", "&#39;"),
              html.escape(value).replace("&quot;", "&#x22;")}
    for enc in (base64.b64encode(raw), base64.urlsafe_b64encode(raw)):
        text = enc.decode()
        first |= {text, text.rstrip("=")}
    out = set(first)
    for form in first:
        out |= _json_forms(form)
    return {f for f in out if len(f) >= 4}


def redact(text: str) -> str:
    """``text`` with every known secret (in every encoding, see :func:`encodings`) and every
    ``Basic``/``Bearer`` credential token replaced by ``***``."""
    for form in _forms:
        if form in text:
            text = text.replace(form, REDACTED)
    return _CREDENTIAL_TOKEN.sub(lambda m: f"{m.group(1)} {REDACTED}", text)


def redact_bytes(data: bytes) -> bytes:
    """:func:`redact` for encoded text (a recording line), secrets of MIN_PAYLOAD_SECRET
    characters and more: each form is searched in C."""
    for form in _forms_bytes:
        if form in data:
            data = data.replace(form, b"***")
    return data


_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with control characters (ESC, CR, NUL, newline, C1...) written as ``\\xNN``: a
    device's error body can neither forge a log line nor drive the operator's terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text) if _CONTROL.search(text) else text


class RedactFilter(logging.Filter):
    """Applies :func:`redact` and :func:`printable` to log records (message and traceback text).

    Install it on handlers: ``handler.addFilter(RedactFilter())``. It formats the record's
    message once (``record.msg``/``args`` become the redacted text).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            msg = record.getMessage()
        except Exception:  # a broken format string: let logging report it as usual
            return True
        redacted = printable(redact(msg))
        if redacted != msg:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True
