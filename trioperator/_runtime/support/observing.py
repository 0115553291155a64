"""Observing a whole resource: its listings, as a whole, and its changes, one by one.

The observers that keep a picture of all objects of a resource (the orchestrator's namespaces
and CRDs, the peering objects) all read a list + watch stream the same way: a listing is
complete and authoritative (what is not in it does not exist, even if its deletion was never
seen), so its objects are gathered until :data:`LISTED` and handed over at once; the changes
that follow are handed over one by one.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Final, NoReturn, TypeVar, cast

import trio

from trioperator._client.api import APIClient, Logger
from trioperator._client.resources import Resource
from trioperator._client.settings import WatchingSettings
from trioperator._client.watching import (
    LISTED,
    RawWatchEvent,
    WatchHealth,
    WatchItem,
    stream_events,
)

__all__ = ["OBSERVER_BUFFER", "observe_resource"]

OBSERVER_BUFFER: Final = 64
"""Events read ahead of an observer's loop; when it is full, the stream waits (bounded memory)."""

K = TypeVar("K")


def _never() -> float:
    return math.inf


async def _nothing() -> None:
    pass


async def observe_resource(
    api: APIClient,
    resource: Resource,
    namespace: str | None,
    *,
    settings: WatchingSettings,
    keep: Callable[[RawWatchEvent], K | None],
    on_listing: Callable[[list[K]], Awaitable[None]],
    on_event: Callable[[RawWatchEvent], Awaitable[None]],
    wake_at: Callable[[], float] = _never,
    on_wake: Callable[[], Awaitable[None]] = _nothing,
    health: WatchHealth | None = None,
    logger: Logger | None = None,
) -> NoReturn:
    """List and watch ``resource`` in ``namespace`` (``None``: cluster-wide) until cancelled.

    Every listed object goes through ``keep``, which picks what the observer needs of it
    (``None``: nothing), so that a listing holds no more than that; ``on_listing`` gets what
    was kept once the (re)listing is complete. ``on_event`` gets every change after a listing.
    ``on_wake`` is called when trio's clock reaches ``wake_at()`` (asked anew before every
    wait) with nothing received. The callbacks run one at a time, in this task; while they
    run, the stream reads ahead up to :data:`OBSERVER_BUFFER` items, then waits.

    Escalates what the stream escalates (see :func:`stream_events`).
    """
    send, receive = trio.open_memory_channel[WatchItem](OBSERVER_BUFFER)
    where = f"in {namespace!r}" if namespace is not None else "cluster-wide"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            partial(
                stream_events,
                api,
                resource,
                namespace,
                settings=settings,
                send=send,
                health=health,
                logger=logger,
            ),
            name=f"observer stream {resource} {where}",
        )
        listing: list[K] = []
        async with receive:
            while True:
                item: WatchItem | None = None
                with trio.move_on_at(wake_at()):
                    item = await receive.receive()
                if item is None:
                    await on_wake()
                elif item is LISTED:
                    complete, listing = listing, []
                    await on_listing(complete)
                else:
                    event = cast(RawWatchEvent, item)
                    if event["type"] is not None:
                        await on_event(event)
                    elif (kept := keep(event)) is not None:
                        listing.append(kept)
