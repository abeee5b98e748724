"""Reading a local file a source polls (a job placement file, a kubeconfig), bounded.

Through :func:`fabricmon.core.files.read_regular`: opened without blocking, a regular file only
(a FIFO or a device fails the poll at once instead of hanging the thread that reads it), at most
``limit`` bytes (a file over the limit fails the poll with ``size`` rather than being read whole);
a file that cannot be read fails it with the caller's reason (``command`` for a file the source
reads as its data, ``auth`` for credentials), naming it.
"""

from __future__ import annotations

from fabricmon.collectors.base import ErrorReason, FetchError
from fabricmon.core.files import FileRefused, FileTooLarge, read_regular


def read_bounded(path: str, limit: int, what: str, reason: ErrorReason) -> bytes:
    try:
        return read_regular(path, limit, what)
    except FileTooLarge as exc:
        raise FetchError(str(exc), ErrorReason.SIZE) from None
    except FileRefused as exc:
        raise FetchError(str(exc), reason) from None
