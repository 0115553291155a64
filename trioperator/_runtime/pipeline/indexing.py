"""Indexing objects as they arrive, and the readiness gate that waits for the indices.

Where indexing happens, and why it cannot deadlock
--------------------------------------------------
Indexing runs in the watcher's router task, for every event, before the event is routed to the
object's worker: never in the workers. The workers are what ``settings.queueing.worker_limit``
limits, and they are what waits for the indices to be ready. Kopf indexes inside the workers;
with fewer worker slots than indexed objects, the slots are all taken by workers waiting for the
indices while the remaining objects wait for a slot to be indexed: a deadlock (kopf#1243). Here
the indexing path holds no slot, so whatever the limit, every listed object is indexed, the
gate opens, and the waiting workers proceed. (The workers also wait for the gate before they
take a slot, so that waiting does not even occupy the limited slots.)

The price is that one watcher indexes its objects one after another, so a slow indexer slows
that watcher's stream; indexers are meant to be fast and side-effect-free (as in Kopf).

Readiness
---------
The gate is ``trioperator._runtime.support.gates.IndexingReadiness``, in the operator's context.
Every watcher of a resource that has indexing handlers holds the gate from its start until its
initial listing is routed (so every listed object has been indexed once). Resource handlers of
all resources (``on.event``, changing handlers, daemons and timers) run only while the gate is
open. A watcher started later (e.g. for a new namespace) closes the gate again until its own
listing is indexed, as in Kopf.

The operator holds the gate too while it starts its first watchers one by one: otherwise the
objects of a resource started first could be handled before a resource started later is indexed.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable

from trioperator._engine.bodies import Body, RawEvent
from trioperator._engine.causes import IndexingCause
from trioperator._engine.errors import ErrorsMode
from trioperator._engine.handlers import IndexingHandler
from trioperator._engine.ids import HandlerId
from trioperator._engine.patches import Patch
from trioperator._engine.progression import HandlerOutcome, State
from trioperator._runtime.handling.execution import Execution, run_handler_once
from trioperator._runtime.handling.loggers import ObjectLogger
from trioperator._runtime.objects.memories import ObjectMemory
from trioperator._runtime.pipeline.contexts import ResourceContext

__all__ = ["index_object"]

logger = logging.getLogger(__name__)


async def index_object(
    ctx: ResourceContext, key: Hashable, event: RawEvent, memory: ObjectMemory
) -> None:
    """(Re)index one object from one event, or drop it from the indices if it is deleted.

    Errors (Kopf's semantics): arbitrary exceptions are ignored by default and the object keeps
    its stale values; a permanent error (or ``errors=PERMANENT``) drops its values and excludes
    it from this index until the operator restarts; a temporary one (or ``errors=TEMPORARY``)
    drops them and excludes it until the delay (``backoff``, by default
    ``settings.execution.default_backoff``) is over, within ``retries``/``timeout``. Failures
    are remembered in memory only, and a success forgets them.
    """
    registry = ctx.registry
    resource = ctx.resource
    indexers = ctx.operator.indexers
    owned = registry.get_handlers(IndexingHandler, resource)
    if not owned:
        return
    raw = event["object"]
    if event["type"] == "DELETED":
        for handler in owned:
            indexers.discard(handler.id, key)
        memory.indexing_state = None
        return

    objlogger = ObjectLogger(raw)
    cause = IndexingCause(
        logger=objlogger,
        memo=memory.memo,
        indices=indexers.indices,
        resource=resource,
        patch=Patch(),  # indexers are not expected to patch; nothing is applied
        body=Body(raw),
    )
    handlers = registry.iter_indexing_handlers(
        resource=resource, body=raw, kwargs=lambda: cause.kwargs
    )
    execution = Execution.for_operator(ctx.operator)
    now = execution.now()
    state = memory.indexing_state or State.from_scratch()
    state = state.with_handlers(handlers, now=now)
    outcomes: dict[HandlerId, HandlerOutcome] = {}
    for handler in handlers:
        handler_state = state[handler.id]
        if handler_state.finished or handler_state.sleeping(now):
            continue  # excluded: forever (permanent failure) or until the delay is over
        outcomes[handler.id] = await run_handler_once(
            handler,
            cause=cause,
            handler_state=handler_state,
            execution=execution,
            logger=objlogger,
            default_errors=ErrorsMode.IGNORED,
        )

    for handler in owned:
        outcome = outcomes.get(handler.id)
        if outcome is None or outcome.exception is not None:
            # Not matching the filters (any more), excluded, or failed (not ignored).
            indexers.discard(handler.id, key)
        else:
            indexers.replace(handler.id, key, outcome.result)

    # Remember the failures and retries only: a success is re-run from scratch every time.
    state = state.with_outcomes(outcomes, now=execution.now()).without_successes()
    memory.indexing_state = state if len(state) else None
