"""Sharding in labels mode: putting new objects into their buckets.

Each replica watches only the objects labelled with its buckets (``Shard.selector``). An
object nobody has labelled yet is in no replica's selection: one member of the ring -- the
one the members it sees place a fixed key on (``Shard.labels_new_objects``) -- watches the
unlabelled objects of each served resource and labels them with their bucket. The bucket is a
function of the object (its ring key hashed), so the label never has to change: membership
changes move buckets between replicas by changing their selectors, not the objects. Two
members labelling at once (while they disagree on the membership) write the same value.

Labelling is not working on an object (no handler runs): the hand-over protocol is untouched.
The labelled object then comes to its owner as ``ADDED`` on that owner's watch.
"""

from __future__ import annotations

import logging
from typing import Any, Final, cast

import trio

from trioperator._client.errors import APIConnectionError, APIError, APINotFoundError
from trioperator._client.watching import LISTED, RawWatchEvent, WatchItem
from trioperator._engine.sharding import SHARD_LABEL, bucket_of
from trioperator._runtime.coordination.sharding import Shard
from trioperator._runtime.pipeline.contexts import ResourceContext

__all__ = ["label_new_objects"]

logger = logging.getLogger("trioperator.sharding")

LABELLERS: Final = 16
"""Label patches in flight at once per watcher (a burst of creations is labelled in parallel)."""

LABEL_BUFFER: Final = 256
"""Unlabelled objects read ahead of the labellers."""


async def label_new_objects(ctx: ResourceContext, shard: Shard) -> None:
    """While we are the ring's labeller, label the unlabelled objects of this watcher's
    resource and namespace; runs until cancelled (with the watcher's stream)."""
    settings = ctx.settings.sharding
    while True:
        if not shard.labels_new_objects():
            with trio.move_on_after(settings.renew_interval):
                await shard.wait_changed()
            continue
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_label_while_labeller, ctx, shard, nursery.cancel_scope)
            send, receive = trio.open_memory_channel[WatchItem](LABEL_BUFFER)
            selection = ctx.selection
            labels = f"!{SHARD_LABEL}"
            if selection is not None and selection.labels:
                labels = f"{selection.labels},{labels}"
            nursery.start_soon(
                ctx.stream(send, labels=labels),
                name=f"unlabelled {ctx.resource} in {ctx.namespace or '*'}",
            )
            async with receive:
                for _ in range(LABELLERS):
                    nursery.start_soon(_label_from, ctx, shard, receive.clone())


async def _label_while_labeller(
    ctx: ResourceContext, shard: Shard, scope: trio.CancelScope
) -> None:
    """Stop labelling (cancel ``scope``) once another member is the labeller."""
    interval = ctx.settings.sharding.renew_interval
    while shard.labels_new_objects():
        with trio.move_on_after(interval):
            await shard.wait_changed()
    scope.cancel()


async def _label_from(
    ctx: ResourceContext, shard: Shard, receive: trio.MemoryReceiveChannel[WatchItem]
) -> None:
    async with receive:
        async for item in receive:
            if item is LISTED:
                continue
            event = cast(RawWatchEvent, item)
            if event["type"] == "DELETED":
                continue  # labelled meanwhile (it left this selection), or deleted
            await _label(ctx, shard, event["object"])


async def _label(ctx: ResourceContext, shard: Shard, body: dict[str, Any]) -> None:
    meta = body.get("metadata") or {}
    if SHARD_LABEL in (meta.get("labels") or {}):
        return
    name = meta.get("name")
    if not isinstance(name, str):
        return
    bucket = bucket_of(body, shard.buckets)
    patch = {"metadata": {"labels": {SHARD_LABEL: bucket}}}
    try:
        await ctx.api.patch(ctx.resource, namespace=meta.get("namespace"), name=name, payload=patch)
    except APINotFoundError:
        return
    except (APIError, APIConnectionError) as exc:
        # It stays unlabelled (unserved) until the next listing of the unlabelled objects
        # (a reconnection, a membership change) tries again.
        logger.error(f"Cannot label {ctx.resource} {name!r} with its shard bucket: {exc}")
