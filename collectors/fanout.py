"""Bounded fan-out: run a call per item, a fixed number at once, without a task per item.

The obvious form, one task per item behind one ``asyncio.Semaphore``, is quadratic when it is
cancelled: each cancelled waiter leaves the semaphore's queue by a ``deque.remove``, so a poll
timeout over 100,000 queued perfquery calls froze the event loop 27 s (166 s at 200,000,
issue 32). Here ``concurrency`` worker tasks pull items from one shared iterator: cancelling
costs one cancellation per worker, whatever the number of items.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


async def for_each(items: Sequence[T], call: Callable[[int, T], Awaitable[None]], concurrency: int) -> None:
    """``await call(i, item)`` for every item in order, at most ``concurrency`` at once. The first
    exception cancels the rest and is raised as itself (not as an ExceptionGroup)."""
    it = iter(enumerate(items))

    async def worker() -> None:
        for i, item in it:  # shared: each item is taken by exactly one worker
            await call(i, item)

    try:
        async with asyncio.TaskGroup() as tg:
            for _ in range(max(1, min(concurrency, len(items)))):
                tg.create_task(worker())
    except BaseExceptionGroup as eg:
        raise eg.exceptions[0] from None
