"""Reconcile handlers at run time (trioperator's own handler kind, beyond Kopf's model).

Who asks for a run of an object, and where it runs:

- the watcher's router, for every event of a reconciled resource (:func:`observe`): the newest
  body is kept, and the object is requested unless the handlers' ``when`` filters say the
  change does not matter (e.g. ``generation_changed`` and a status write);
- the router of a child or watched resource (:func:`relay`): a child's controller
  ownerReference, or a ``watches=`` mapper, names the objects; the operator's
  :class:`ReconcileHub` finds their reconcilers;
- the reconciler's timers (:func:`run_timers`, a task in the watcher's nursery): requeues,
  backoffs after errors, and the periodic resync.

A request is coalesced (see ``_engine/reconciling.Coalescer``) and wakes the object's worker
(workers.py), which runs :func:`reconcile_object` when it has nothing else to do for the
object: one run per object at a time, after Kopf's handlers of the same object, and always on
the newest known state. Kopf's handler kinds and their progress storage are not involved.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import trio

from trioperator._engine.bodies import Body, RawBody, RawEvent
from trioperator._engine.causes import ReconcilingCause, ResourceCause
from trioperator._engine.errors import ErrorsMode
from trioperator._engine.filters import match
from trioperator._engine.finalizers import is_deletion_ongoing
from trioperator._engine.handlers import RelayingHandler
from trioperator._engine.patches import Patch
from trioperator._engine.progression import HandlerState
from trioperator._engine.reconciling import (
    backoff_delay,
    controller_owner,
    mapped_keys,
    requested_delay,
)
from trioperator._runtime.handling.applying import apply_patch
from trioperator._runtime.handling.execution import Execution, run_handler_once
from trioperator._runtime.handling.invocation import invoke
from trioperator._runtime.handling.loggers import Logger, ObjectLogger
from trioperator._runtime.objects.memories import ObjectMemory
from trioperator._runtime.objects.reconcile_state import Reconciler
from trioperator._runtime.pipeline.contexts import ResourceContext

__all__ = ["observe", "reconcile_object", "relay", "run_timers"]


def observe(ctx: ResourceContext, reconciler: Reconciler, uid: str, event: RawEvent) -> None:
    """An event of a reconciled object (in the router): keep its body, request a run."""
    body = event["object"]
    if event["type"] == "DELETED":
        reconciler.forget(uid)
        return
    old = reconciler.remember(uid, body)
    if not reconciler.filtered or old is None:
        reconciler.request(uid)
        return
    kwargs = _filter_kwargs(ctx, body, old)
    for handler in reconciler.handlers:
        if match(handler, body=body, kwargs=kwargs):
            reconciler.request(uid)
            return


def _filter_kwargs(ctx: ResourceContext, body: RawBody, old: RawBody) -> dict[str, Any]:
    return {**_object_kwargs(ctx, body), "old": old, "new": body, "diff": None}


async def relay(ctx: ResourceContext, relays: Sequence[RelayingHandler], event: RawEvent) -> None:
    """An event of a child or watched object (in the router): request its owners' runs.

    A mapper's error is logged and the event skipped for that mapper: one bad object must not
    stop the watcher.
    """
    body = event["object"]
    hub = ctx.operator.reconcilers
    metadata = body.get("metadata")
    namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
    for handler in relays:
        if not match(handler, body=body, kwargs=lambda: _object_kwargs(ctx, body)):
            continue
        if handler.by_owner:
            for reconciler_kind in _target_kinds(ctx, handler):
                group, kind = reconciler_kind
                owner = controller_owner(body, group=group, kind=kind)
                if owner is not None:
                    hub.request(handler.target, owner[0], owner[1])
            continue
        try:
            result = await invoke(
                handler.fn, kwargs=_object_kwargs(ctx, body), limiter=ctx.operator.thread_limiter
            )
            keys = mapped_keys(result, default_namespace=namespace)
        except Exception as exc:
            ObjectLogger(body).exception(f"Mapper {handler.id!r} failed: {exc!r}")
            continue
        for key in keys:
            hub.request(handler.target, key)


def _target_kinds(ctx: ResourceContext, handler: RelayingHandler) -> set[tuple[str, str]]:
    """The (group, kind) of the running reconcilers that ``handler`` enqueues."""
    return {
        (reconciler.resource.group, reconciler.resource.kind)
        for reconciler in ctx.operator.reconcilers.matching(handler.target)
    }


def _object_kwargs(ctx: ResourceContext, body: RawBody) -> dict[str, Any]:
    """The kwargs of a handler or filter about ``body`` outside its worker (no memo, no patch
    that anybody applies): the relays' mappers and filters, the reconcilers' filters."""
    return ResourceCause(
        logger=ObjectLogger(body),
        memo=None,
        indices=ctx.operator.indices,
        resource=ctx.resource,
        patch=Patch(),
        body=Body(body),
    ).kwargs


async def run_timers(reconciler: Reconciler) -> None:
    """Request the objects whose requeue or backoff time has come, and resync them all
    every ``resync`` seconds; runs until cancelled (with the watcher)."""
    resync = reconciler.resync
    next_resync = trio.current_time() + resync if resync is not None else math.inf
    while True:
        reconciler.changed = trio.Event()
        due = reconciler.due.next_time()
        until = min(due if due is not None else math.inf, next_resync)
        with trio.move_on_at(until):
            await reconciler.changed.wait()
        now = trio.current_time()
        for uid in reconciler.due.pop_due(now):
            reconciler.request(uid)
        if resync is not None and now >= next_resync:
            next_resync = now + resync
            for uid in list(reconciler.bodies):
                reconciler.request(uid)


async def reconcile_object(
    ctx: ResourceContext,
    reconciler: Reconciler,
    uid: str,
    memory: ObjectMemory,
    objlogger: Logger,
) -> None:
    """Run the reconcile handlers for the newest state of one object, if a run is wanted.

    Success: the handlers' patch is applied (with ``status.observedGeneration`` if the settings
    ask), and a requested delay scheduled. An error (the handler's or the API's): the object
    is retried after an exponential backoff. A ``PermanentError``: not retried until the next
    request.
    """
    if not reconciler.coalescer.start(uid):
        return
    try:
        body = reconciler.bodies.get(uid)
        if body is None:
            return
        await _reconcile(ctx, reconciler, uid, body, memory, objlogger)
    finally:
        reconciler.coalescer.finish(uid)


async def _reconcile(
    ctx: ResourceContext,
    reconciler: Reconciler,
    uid: str,
    body: RawBody,
    memory: ObjectMemory,
    objlogger: Logger,
) -> None:
    settings = ctx.settings.reconciling
    patch = Patch()
    cause = ReconcilingCause(
        logger=objlogger,
        memo=memory.memo,
        indices=ctx.operator.indices,
        resource=ctx.resource,
        patch=patch,
        body=Body(body),
        deleting=is_deletion_ongoing(body),
    )
    execution = Execution.for_operator(ctx.operator)
    failed = False
    ran = False
    delays: list[float] = []
    kwargs = cause.kwargs
    for handler in reconciler.unfiltered:
        if not match(handler, body=body, kwargs=kwargs):
            continue
        ran = True
        outcome = await run_handler_once(
            handler,
            cause=cause,
            handler_state=HandlerState.from_scratch(now=execution.now()),
            execution=execution,
            logger=objlogger,
            default_errors=ErrorsMode.TEMPORARY,
        )
        if outcome.exception is not None:
            # A permanent error (final) waits for the next change; anything else backs off.
            failed = failed or not outcome.final
            continue
        delay = requested_delay(outcome.result)
        if delay is not None:
            delays.append(delay)
    metadata = body.get("metadata") or {}
    generation = metadata.get("generation")
    if ran and not failed and settings.observed_generation and isinstance(generation, int):
        status = body.get("status")
        observed = status.get("observedGeneration") if isinstance(status, dict) else None
        if observed != generation:
            patch.setdefault("status", {})["observedGeneration"] = generation
    try:
        await apply_patch(ctx.api, resource=ctx.resource, body=body, patch=patch, logger=objlogger)
    except Exception as exc:
        objlogger.exception(f"Applying the reconcile patch failed: {exc!r}")
        failed = True
    now = trio.current_time()
    if failed:
        failures = reconciler.failures[uid] = reconciler.failures.get(uid, 0) + 1
        delay = backoff_delay(failures, base=settings.backoff, cap=settings.backoff_max)
        objlogger.warning(f"Reconciling failed ({failures} in a row); retrying in {delay:g} s.")
        reconciler.schedule(uid, now + delay)
        return
    if reconciler.failures.pop(uid, None):
        objlogger.info("Reconciling succeeded after failures.")
    reconciler.due.cancel(uid)
    if delays:
        reconciler.schedule(uid, now + min(delays))
