"""What ``check-config`` proves beyond the file itself, without touching the network.

The daemon would fail at start, or every poll of a target would fail, on each of these:
the web config (TLS certificates and keys, bcrypt hashes) does not load, a secret reference
does not resolve for the user running the check (under systemd ``ExecStartPre=`` runs as the
service user, so a file the service cannot read is caught), a file a source reads to poll (a
CA bundle) is missing or unreadable, the state directory cannot be used or created with the
right owner (:func:`fabricmon.agent.state.dir_problem`), or a source's executable is not on
``PATH`` (a warning: the agent may run elsewhere than the check). Secret values are read to
prove they resolve and are never printed: errors come from :mod:`fabricmon.core.secrets`,
whose messages name the option and the file or variable only.

Every valid part of the file is checked, even when another part has problems
(:class:`fabricmon.agent.config.Checked`): one run reports everything.

``credentials_dir``: outside the unit, ``/run/credentials/<unit>/<name>`` does not exist (systemd
makes it while the unit runs, from ``LoadCredential=<name>:<source>``); with the directory the
``LoadCredential=`` sources are in, each such path is read there instead (``DIR/<name>``).
"""

from __future__ import annotations

import os
import shutil
import ssl
import stat
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from fabricmon import collectors
from fabricmon.agent.config import Checked, _at
from fabricmon.core import secrets
from fabricmon.core.files import MAX_PEM_BYTES, FileRefused, checked_path

CREDENTIALS_ROOT = PurePosixPath("/run/credentials")


@dataclass
class Preflight:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def secret_names(options: Any) -> list[str]:
    """Secret options of a collector's options model: every ``X`` that also has ``X_file`` and ``X_env``."""
    fields = type(options).model_fields
    return [n for n in fields if f"{n}_file" in fields and f"{n}_env" in fields]


def credential_path(path: str, credentials_dir: str | None) -> str:
    """``path``, or where a ``/run/credentials/<unit>/<name>`` path is read from outside the unit."""
    p = PurePosixPath(path)
    if credentials_dir is None or not p.is_relative_to(CREDENTIALS_ROOT) or len(p.relative_to(CREDENTIALS_ROOT).parts) < 2:
        return path
    return os.path.join(credentials_dir, *p.relative_to(CREDENTIALS_ROOT).parts[1:])


def _hint(path: str, credentials_dir: str | None) -> str:
    """What to do about an unreadable /run/credentials path outside the unit."""
    if credentials_dir is None and PurePosixPath(path).is_relative_to(CREDENTIALS_ROOT):
        return (" (it exists only while the unit runs, from LoadCredential=: check with --credentials-dir and the "
                "directory the credentials are loaded from)")
    return ""


def file_problem(path: str, kind: str) -> str | None:
    """Why the file a source reads cannot be used, or None: missing, not a regular file,
    unreadable, or (``ca``) not PEM CA certificates."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block the read: never opened
            return f"{path} is not a regular file"
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    if kind == "ca":
        try:  # the descriptor checked again (a FIFO swapped in after the stat is refused, never read)
            with checked_path(path, MAX_PEM_BYTES, "CA file") as checked:
                ssl.create_default_context(cafile=checked)
        except FileRefused as exc:
            return str(exc)
        except (OSError, ssl.SSLError) as exc:
            return f"{path} does not load as CA certificates (PEM): {exc}"
    return None


def check(checked: Checked, credentials_dir: str | None = None) -> Preflight:
    result = Preflight()
    path, pos = checked.path, checked.positions
    web = checked.sections.get("web")
    if web is not None and web.config_file:
        from fabricmon.agent.exporter import webconfig

        try:
            webconfig.load(credential_path(web.config_file, credentials_dir))
        except (ValueError, OSError) as exc:  # WebConfigError is a ValueError; ssl errors are OSErrors
            result.errors.append(_at(path, pos, ("web", "config_file"), f"the web config does not load: {exc}"))
    _check_state_dir(checked, result)
    switches = checked.sections.get("collectors") or {}
    for target in checked.targets:
        if target.config.enabled and switches.get(target.config.source, True):
            _check_target(checked, target.index, target.config.source, target.options, credentials_dir, result)
    return result


def _check_state_dir(checked: Checked, result: Preflight) -> None:
    from fabricmon.agent import state

    g = checked.sections.get("global")
    state_dir = state.default_state_dir(g.state_dir) if g is not None else None
    if state_dir is None:
        return
    error, note = state.dir_problem(state_dir)
    loc = ("global", "state_dir")
    if error is not None:
        result.errors.append(_at(checked.path, checked.positions, loc, error))
    elif note is not None:
        result.warnings.append(_at(checked.path, checked.positions, loc, f"warning: {note}"))


def _check_target(checked: Checked, i: int, source: str, options: Any, credentials_dir: str | None, result: Preflight) -> None:
    """Secrets, files and commands of one valid target."""
    path, pos = checked.path, checked.positions
    cls = collectors.get(source)
    for name in secret_names(options):
        key = next((k for k in (f"{name}_file", f"{name}_env", name) if getattr(options, k, None)), name)
        mapped = options
        if getattr(options, f"{name}_file", None):
            mapped = options.model_copy(update={f"{name}_file": credential_path(getattr(options, f"{name}_file"), credentials_dir)})

        def warn(message: str, key: str = key) -> None:
            result.warnings.append(_at(path, pos, ("targets", i, key), "warning: " + message.removeprefix(f"{key}: ")))
        try:
            secrets.resolve(mapped, name, warn=warn)
        except ValueError as exc:  # SecretError, or a path the OS refuses
            hint = _hint(str(getattr(options, f"{name}_file", None) or ""), credentials_dir)
            result.errors.append(_at(path, pos, ("targets", i, key), str(exc).removeprefix(f"{key}: ") + hint))
    for declared, file in cls.local_files(options):
        problem = file_problem(credential_path(file, credentials_dir), declared.kind)
        if problem is not None:
            result.errors.append(_at(path, pos, ("targets", i, declared.option),
                                     f"{problem}; every poll of this target would fail{_hint(file, credentials_dir)}"))
    for option, command in cls.commands(options):  # the source's Collector.executables
        if shutil.which(command) is None:
            result.warnings.append(_at(path, pos, ("targets", i, option),
                                       f"warning: {command!r} is not on PATH here; the {source} target cannot poll without it"))
