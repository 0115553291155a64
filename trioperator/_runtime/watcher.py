"""The watcher of one (resource, namespace): a list+watch stream routed to per-object workers.

Task tree::

    run_watcher                      owns the workers' nursery
    ├── stream_events                list + watch (trioperator._client.watching), feeds a channel
    ├── the router (this task)       routes each event by uid to the object's worker
    └── run_worker (per object)         one per object with queued work; idles out when quiet

A graceful stop (``operator.stopping``) ends the stream first, then closes every worker's
channel so that each finishes what is already queued, for at most
``settings.queueing.exit_timeout`` seconds, after which the rest is cancelled.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from functools import partial

import trio

from trioperator._client.watching import LISTED, WatchItem, stream_events
from trioperator._engine.bodies import RawEvent
from trioperator._runtime.contexts import ResourceContext
from trioperator._runtime.workers import run_worker

logger = logging.getLogger(__name__)

STREAM_BUFFER = 1024
"""Events read ahead of routing; routing never blocks, so this only absorbs bursts."""


def object_key(body: dict[str, object]) -> str:
    """The uid, or for uid-less objects a key built from what identifies them."""
    metadata = body.get("metadata")
    meta = metadata if isinstance(metadata, dict) else {}
    uid = meta.get("uid")
    if isinstance(uid, str) and uid:
        return uid
    parts = (
        body.get("kind"),
        body.get("apiVersion"),
        meta.get("name"),
        meta.get("namespace"),
        meta.get("creationTimestamp"),
    )
    return "//".join(str(part) if part else "-" for part in parts)


async def run_watcher(
    ctx: ResourceContext,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve one resource in one namespace (``None``: cluster-wide) until stopped or cancelled.

    ``task_status.started()`` is reported once the initial listing has been routed, so the
    caller knows that every pre-existing object is queued for processing.
    """
    settings = ctx.settings
    streams: dict[str, trio.MemorySendChannel[RawEvent]] = {}
    send_events, receive_events = trio.open_memory_channel[WatchItem](STREAM_BUFFER)

    async with trio.open_nursery() as workers:
        async with trio.open_nursery() as streaming:
            streaming.start_soon(
                _stop_when_asked, ctx, streaming.cancel_scope, name="watcher stopper"
            )
            streaming.start_soon(
                partial(
                    stream_events,
                    ctx.api,
                    ctx.resource,
                    ctx.namespace,
                    settings=settings.watching,
                    send=send_events,
                    health=ctx.health,
                ),
                name=f"stream {ctx.resource} in {ctx.namespace or '*'}",
            )
            # The producer owns the send side; the router below owns the receive side.
            await _route(ctx, receive_events, streams, workers, task_status)

        # The stream has stopped. Let every worker finish what is queued, within the bound.
        for channel in streams.values():
            channel.close()
        workers.cancel_scope.deadline = trio.current_time() + settings.queueing.exit_timeout
    if workers.cancel_scope.cancelled_caught:
        logger.warning(f"Unprocessed streams left for {ctx.resource} after the exit timeout.")


async def _stop_when_asked(ctx: ResourceContext, scope: trio.CancelScope) -> None:
    await ctx.operator.stopping.wait()
    scope.cancel()


async def _route(
    ctx: ResourceContext,
    receive_events: trio.MemoryReceiveChannel[WatchItem],
    streams: dict[str, trio.MemorySendChannel[RawEvent]],
    workers: trio.Nursery,
    task_status: trio.TaskStatus[None],
) -> None:
    listing = True
    started = False
    async with receive_events:
        async for item in receive_events:
            if item is LISTED:
                listing = False
                if not started:
                    started = True
                    task_status.started()
                continue
            event: RawEvent = item  # type: ignore[assignment]
            key = object_key(event["object"])
            channel = streams.get(key)
            if channel is None:
                memory = ctx.memories.recall(
                    key, noticed_by_listing=listing and event["type"] is None
                )
                channel, receive = trio.open_memory_channel[RawEvent](math.inf)
                streams[key] = channel
                workers.start_soon(
                    run_worker,
                    ctx,
                    key,
                    receive,
                    memory,
                    _retirement(streams, key, receive),
                    _discarding(streams, key, channel),
                    name=f"worker {ctx.resource} {key}",
                )
            channel.send_nowait(event)


def _retirement(
    streams: dict[str, trio.MemorySendChannel[RawEvent]],
    key: str,
    receive: trio.MemoryReceiveChannel[RawEvent],
) -> Callable[[], bool]:
    def retire() -> bool:
        # No checkpoint between the check and the removal: the router cannot interleave.
        if receive.statistics().current_buffer_used:
            return False
        channel = streams.pop(key, None)
        if channel is not None:
            channel.close()
        return True

    return retire


def _discarding(
    streams: dict[str, trio.MemorySendChannel[RawEvent]],
    key: str,
    channel: trio.MemorySendChannel[RawEvent],
) -> Callable[[], None]:
    def discard() -> None:
        # Only our own channel: after a retirement, the key may already have a new worker.
        if streams.get(key) is channel:
            del streams[key]
        channel.close()

    return discard
