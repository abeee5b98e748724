"""Reading a file the agent was pointed at, without ever blocking on it or reading it whole.

A path in a config or on the command line can name anything: a FIFO (``open()`` blocks until
a writer appears, for ever), a character device (``/dev/zero`` never ends, ``/dev/tty`` waits
for a human), a socket, a directory, or a regular file of gigabytes. Each of those stalled or
exhausted the agent once (issue 32). Every file the agent reads (config, web config, state,
secrets, TLS certificates and keys, SNMP profiles, the config beside a recording) goes through
:func:`read_regular`:

- the file is opened with ``O_NONBLOCK`` (opening a FIFO or a tty returns at once) and
  ``O_NOCTTY``, then ``fstat``-ed on the descriptor (not the path: a swap between a stat and the
  open cannot slip a FIFO in);
- it must be a regular file, of at most ``limit`` bytes; anything else is a
  :class:`FileRefused` naming the file, what it is, and the limit;
- at most ``limit + 1`` bytes are read (a file that grows while it is read is refused too).

:func:`checked_path` gives a path to the already-checked descriptor (``/proc/self/fd/N``) for
libraries that only take a path (``ssl.SSLContext.load_cert_chain``): they open the same inode.

None of this moves a read off the event loop: callers on the loop run these in a thread.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

MAX_PEM_BYTES = 4 << 20  # a CA bundle (the system's is about 200 KB), a certificate chain or a key


class FileRefused(ValueError):
    """A file that cannot be read as asked: missing, not a regular file, too large, unreadable.
    The message names the file (and never its content)."""


class FileTooLarge(FileRefused):
    """A regular file over the limit (a source reports it as ``size``, not as unreadable)."""


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def _open_checked(path: str | os.PathLike[str], limit: int, what: str) -> tuple[int, os.stat_result]:
    """A descriptor of ``path``, opened without blocking and checked to be a regular file of at most ``limit`` bytes."""
    name = os.fspath(path)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise FileRefused(f"{name}: cannot read {what}: {exc.strerror or exc}") from None
    except ValueError as exc:  # a NUL byte in the path
        raise FileRefused(f"{name!r}: cannot read {what}: {exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileRefused(f"{name}: cannot read {what}: it is {_kind(st.st_mode)}, not a regular file")
        if st.st_size > limit:
            raise FileTooLarge(f"{name}: {what} is larger than {_human(limit)}; refused")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_regular(path: str | os.PathLike[str], limit: int, what: str = "file") -> bytes:
    """The bytes of regular file ``path`` (at most ``limit``); FileRefused otherwise (see the module doc)."""
    fd, _st = _open_checked(path, limit, what)
    chunks: list[bytes] = []
    total = 0
    try:
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise FileTooLarge(f"{os.fspath(path)}: {what} is larger than {_human(limit)}; refused")
    except OSError as exc:
        raise FileRefused(f"{os.fspath(path)}: cannot read {what}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


@contextlib.contextmanager
def checked_path(path: str | os.PathLike[str], limit: int, what: str = "file") -> Iterator[str]:
    """A path a library may open in place of ``path``: ``/proc/self/fd/N`` of a descriptor checked
    like :func:`read_regular` (opening it reopens the same inode, so nothing can be swapped in),
    or ``path`` itself where ``/proc`` is absent."""
    fd, _st = _open_checked(path, limit, what)
    try:
        proc = f"/proc/self/fd/{fd}"
        yield proc if Path(proc).exists() else os.fspath(path)
    finally:
        os.close(fd)


def _human(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"
