"""What ``check-config`` proves beyond the file itself, without touching the network.

The daemon would fail at start, or every poll of a target would fail, on each of these:
the web config (TLS certificates and keys, bcrypt hashes) does not load, a secret reference
does not resolve for the user running the check (under systemd ``ExecStartPre=`` runs as the
service user, so a file the service cannot read is caught), or a source's executable is not
on ``PATH`` (a warning: the agent may run elsewhere than the check). Secret values are read
to prove they resolve and are never printed: errors come from :mod:`fabricmon.core.secrets`,
whose messages name the option and the file or variable only.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from typing import Any

from fabricmon import collectors
from fabricmon.agent.config import LoadedConfig, _at
from fabricmon.core import secrets


@dataclass
class Preflight:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def secret_names(options: Any) -> list[str]:
    """Secret options of a collector's options model: every ``X`` that also has ``X_file`` and ``X_env``."""
    fields = type(options).model_fields
    return [n for n in fields if f"{n}_file" in fields and f"{n}_env" in fields]


def check(loaded: LoadedConfig) -> Preflight:
    result = Preflight()
    path, pos = loaded.path, loaded.positions
    web = loaded.config.web.config_file
    if web:
        from fabricmon.agent.exporter import webconfig

        try:
            webconfig.load(web)
        except (ValueError, OSError) as exc:  # WebConfigError is a ValueError; ssl errors are OSErrors
            result.errors.append(_at(path, pos, ("web", "config_file"), f"the web config does not load: {exc}"))
    for i, target in enumerate(loaded.config.targets):
        options = loaded.options.get(target.name)
        if options is None or not target.enabled:
            continue
        for name in secret_names(options):
            try:
                secrets.resolve(options, name)
            except ValueError as exc:  # SecretError, or a path the OS refuses
                key = next((k for k in (f"{name}_file", f"{name}_env", name) if getattr(options, k, None)), name)
                result.errors.append(_at(path, pos, ("targets", i, key), str(exc).removeprefix(f"{key}: ")))
        for option, command in collectors.get(target.source).commands(options):  # the source's Collector.executables
            if shutil.which(command) is None:
                result.warnings.append(_at(path, pos, ("targets", i, option),
                                           f"warning: {command!r} is not on PATH here; the {target.source} target cannot poll without it"))
    return result
