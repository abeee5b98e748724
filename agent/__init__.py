"""fabricmon agent: scheduler, counter store, detector, exporter, CLI.

Installed as ``fabricmon.agent``. The version is the one in ``pyproject.toml``, read from the
installed distribution's metadata, so it is written in one place only.
"""

from importlib.metadata import version

__version__ = version("fabricmon")
