"""Reading a local file a source polls (a job placement file, a kubeconfig), bounded.

One read of at most ``limit + 1`` bytes: a file over the limit fails the poll with ``size``
rather than being read whole; a file that cannot be opened fails it with the caller's reason
(``command`` for a file the source reads as its data, ``auth`` for credentials), naming it.
"""

from __future__ import annotations

from fabricmon.collectors.base import ErrorReason, FetchError


def read_bounded(path: str, limit: int, what: str, reason: ErrorReason) -> bytes:
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise FetchError(f"cannot read {what} {path}: {exc.strerror or exc}", reason) from None
    if len(data) > limit:
        raise FetchError(f"{what} {path} is larger than {limit} bytes", ErrorReason.SIZE)
    return data
