"""Keeping each object's daemons and timers in line with the object, event after event.

A daemon is spawned when its object is first seen with matching filters (at creation or when the
operator starts); it is never spawned while the object is being deleted or the operator stops.
Every event re-checks the filters: a daemon that no longer matches is stopped
(``FILTERS_MISMATCH``) and spawned again by a later event that matches. A daemon that ends on its
own (returned, failed permanently) is not spawned again in this process.

On deletion, the object's finalizer stays until all its daemons have ended or been abandoned:
the deletion cycle gives them a chance to exit instantly (``settings.background.instant_exit_*``)
so that the finalizer goes in the same patch, and otherwise the worker sleeps until a daemon ends
(``DaemonsMemory.changed`` wakes it up), with the polling interval as a fallback.

The tasks themselves and their staged termination are the keeper's (``daemon_keeper``).
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

import trio

from trioperator._engine.bodies import Body, RawEvent
from trioperator._engine.causes import SpawningCause, is_deletion_ongoing
from trioperator._engine.finalizers import is_deletion_blocked
from trioperator._engine.patches import Patch
from trioperator._engine.stoppers import DaemonStoppingReason
from trioperator._runtime.handling.execution import Execution
from trioperator._runtime.handling.loggers import ObjectLogger
from trioperator._runtime.objects.daemon_keeper import DaemonsKeeper, termination_limits
from trioperator._runtime.objects.memories import ObjectMemory
from trioperator._runtime.pipeline.contexts import ResourceContext

__all__ = ["new_keeper", "process_spawning", "settle_daemons"]


def new_keeper(ctx: ResourceContext, nursery: trio.Nursery) -> DaemonsKeeper:
    """The keeper of a watcher's daemons and timers, running them in ``nursery``."""
    operator = ctx.operator
    # A stuck sync daemon's thread can be let go of (stage 3 of the termination).
    execution = Execution.for_operator(operator, abandon_threads=True)
    return DaemonsKeeper(
        nursery,
        api=ctx.api,
        resource=ctx.resource,
        settings=ctx.settings,
        indices=operator.indices,
        execution=execution,
    )


def _essence_digest(ctx: ResourceContext, body: Body) -> bytes:
    """What counts as a change for idle timers: the same essence as the diff-base's (so not
    the status, nor our own annotations), as a digest to keep no copy per object."""
    persistence = ctx.settings.persistence
    essence = persistence.diffbase_storage.build(
        body=body, extra_fields=[".".join(f) for f in ctx.registry.get_extra_fields(ctx.resource)]
    )
    essence = persistence.progress_storage.clear(essence=essence)
    encoded = json.dumps(essence, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.blake2b(encoded.encode(), digest_size=16).digest()


async def process_spawning(
    ctx: ResourceContext, event: RawEvent, memory: ObjectMemory, objlogger: ObjectLogger
) -> None:
    """Keep the object's daemons in line with its newest state (on every batch of events).

    Refreshes the live body, restarts the idle time on essential changes, stops the daemons
    of objects being deleted (``RESOURCE_DELETED``) or not matching any more
    (``FILTERS_MISMATCH``), and spawns the missing ones.
    """
    registry = ctx.registry
    resource = ctx.resource
    if not registry.has_spawning_handlers(resource):
        return
    keeper = ctx.daemons
    daemons = memory.daemons
    raw = event["object"]
    if event["type"] == "DELETED":
        if keeper is not None:
            keeper.stop_all(daemons.running.values(), DaemonStoppingReason.RESOURCE_DELETED)
        return

    if daemons.live_body is None:
        daemons.live_body = Body(raw)
    else:
        daemons.live_body.replace(raw)
    digest = _essence_digest(ctx, daemons.live_body)
    changed = digest != daemons.essence
    if changed:
        daemons.essence = digest
        daemons.reset_idle(trio.current_time())

    if keeper is None:
        return
    if is_deletion_ongoing(raw):
        keeper.stop_all(daemons.running.values(), DaemonStoppingReason.RESOURCE_DELETED)
        return
    if keeper.closed or keeper.paused or ctx.is_stopping:
        return  # nothing new while stopping: it would only be stopped again

    cause = SpawningCause(
        logger=objlogger,
        memo=memory.memo,
        indices=ctx.operator.indices,
        resource=resource,
        patch=Patch(),
        body=daemons.live_body,
        reset=changed,
    )
    handlers = registry.iter_spawning_handlers(
        resource=resource,
        body=raw,
        kwargs=lambda: cause.kwargs,
        excluded=daemons.forever_stopped,
    )
    matching = {handler.id for handler in handlers}
    for daemon in list(daemons.running.values()):
        if daemon.handler.id not in matching and not daemon.stopper.is_set():
            objlogger.debug(f"{daemon.handler} does not match the filters any more; stopping it.")
            keeper.stop(daemon, DaemonStoppingReason.FILTERS_MISMATCH)
    missing = [handler for handler in handlers if handler.id not in daemons.running]
    finalizer = ctx.settings.persistence.finalizer
    if any(h.requires_finalizer for h in missing) and not is_deletion_blocked(raw, finalizer):
        # As in Kopf: new daemons start only once our finalizer is on the object, so that its
        # deletion always waits for them. The patch adding it is on its way (the same cycle
        # has just sent it); its echo on the stream brings this function back here.
        return
    for handler in missing:
        keeper.spawn(handler, memory, objlogger)


async def settle_daemons(
    ctx: ResourceContext,
    memory: ObjectMemory,
    objlogger: logging.Logger | logging.LoggerAdapter[Any],
) -> float | None:
    """For an object being deleted: stop its daemons; ``None`` once none holds the object.

    Otherwise, the seconds after which to look again at the latest (a fallback: the worker is
    woken up by ``memory.daemons.changed`` as soon as one ends or is abandoned).
    """
    daemons = memory.daemons
    daemons.rearm()  # before looking: whatever ends after this moment wakes the worker up
    keeper = ctx.daemons
    holding = [daemon for daemon in daemons.running.values() if not daemon.done]
    if not holding or keeper is None:
        return None
    keeper.stop_all(holding, DaemonStoppingReason.RESOURCE_DELETED)
    await keeper.wait_instant_exit(holding)
    holding = [daemon for daemon in holding if not daemon.done]
    if not holding:
        return None
    settings = ctx.settings.background
    names = ", ".join(repr(str(daemon.handler.id)) for daemon in holding)
    objlogger.debug(f"Waiting for the daemons to exit before releasing the object: {names}.")
    return min(termination_limits(daemon.handler, settings)[2] for daemon in holding)
