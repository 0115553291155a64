"""One processing cycle of one object: from its newest state to handlers and back to the API.

The decisions (which cause, which handlers, what to store) are the engine's; this module
sequences them, runs the handlers and applies the single patch the cycle produced.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from trioperator._client.resources import Resource
from trioperator._engine.bodies import Body, RawBody, RawEvent
from trioperator._engine.causes import (
    ChangingCause,
    ResourceCause,
    WatchingCause,
    cause_initial,
    detect_changing_cause,
)
from trioperator._engine.diffbase import gives_own_essences
from trioperator._engine.diffs import Diff
from trioperator._engine.diffs import diff as make_diff
from trioperator._engine.echoes import echo_is_noop
from trioperator._engine.errors import ErrorsMode
from trioperator._engine.finalizers import (
    RemoveFinalizer,
    allow_deletion,
    block_deletion,
    is_deletion_blocked,
    is_deletion_ongoing,
)
from trioperator._engine.handlers import ChangingHandler
from trioperator._engine.journal import annotation_prefixes, pending_write, prepare
from trioperator._engine.patches import Patch, apply_merge_patch
from trioperator._engine.progress import ProgressStorage, clear_owned
from trioperator._engine.progression import HandlerState, State, deliver_results, format_iso8601
from trioperator._engine.reasons import TITLES, Reason
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.settings import PersistenceSettings
from trioperator._runtime.handling.applying import apply_patch
from trioperator._runtime.handling.execution import (
    Execution,
    run_handler_once,
    run_handlers,
    warn_corrupt_progress,
)
from trioperator._runtime.handling.loggers import Logger, ObjectLogger
from trioperator._runtime.objects.memories import ObjectMemory
from trioperator._runtime.pipeline.contexts import ResourceContext
from trioperator._runtime.pipeline.daemon_spawning import settle_daemons


@dataclasses.dataclass
class CycleOutcome:
    resource_version: str | None = None
    """The version our patch produced, to be awaited on the stream before the next cycle."""

    earlier_versions: Sequence[str] = ()
    """Versions of our writes before the last one: states that are older than what we wrote."""

    delay: float | None = None
    """Seconds until some handler is due again; ``None`` if nothing is pending."""

    patched: bool = False
    gone: bool = False
    awaiting_daemons: bool = False
    """Daemons still hold the object being deleted: wake up when one of them ends."""

    written: RawBody | None = None
    """The API server's answer to our last write: the object at ``resource_version``."""

    settled: bool = False
    """Nothing is left to do, and the echo of our patch (``resource_version``) is known to
    need no change handling (see ``_engine/echoes.py``)."""


async def process_events(
    ctx: ResourceContext, events: Sequence[RawEvent], memory: ObjectMemory, patch: Patch
) -> None:
    """Give every event to the ``on.event`` handlers; they never block the change handling.

    What they put into ``patch`` is applied with the next cycle's patch (as in Kopf, where
    all handlers of one event share one patch).
    """
    if not ctx.registry.has_watching_handlers(ctx.resource):
        return
    execution = Execution.for_operator(ctx.operator, progress=True)
    for event in events:
        body = Body(event["object"])
        logger = ObjectLogger(event["object"])
        cause = WatchingCause(
            logger=logger,
            memo=memory.memo,
            indices=ctx.operator.indices,
            resource=ctx.resource,
            patch=patch,
            body=body,
            type=event["type"],
            event=event,
        )
        handlers = ctx.registry.iter_watching_handlers(
            resource=ctx.resource, body=event["object"], kwargs=cause.kwargs
        )
        for handler in handlers:
            await run_handler_once(
                handler,
                cause=cause,
                handler_state=HandlerState.from_scratch(now=execution.now()),
                execution=execution,
                logger=logger,
                default_errors=ErrorsMode.IGNORED,
            )


def _start_patch(memory: ObjectMemory, carried: Patch | None) -> Patch:
    """The cycle's patch: functions rejected earlier (422) first, then what is carried over.

    A copy: if the cycle fails, the originals are still there for the retry.
    """
    carried = carried if carried is not None else Patch()
    contents = dict(carried)
    fns = [*memory.pending_fns, *carried.fns]
    return Patch(copy.deepcopy(contents) if contents else None, fns=fns)


async def apply_carried(
    ctx: ResourceContext,
    event: RawEvent,
    memory: ObjectMemory,
    logger: Logger,
    patch: Patch,
) -> CycleOutcome:
    """Apply what the low-level handlers produced, without any change handling."""
    if event["type"] == "DELETED":
        return CycleOutcome()
    patch = _start_patch(memory, patch)
    return await _apply(ctx, event["object"], patch, logger, delay=None, memory=memory)


async def process_changes(
    ctx: ResourceContext,
    event: RawEvent,
    memory: ObjectMemory,
    logger: Logger,
    patch: Patch | None = None,
) -> CycleOutcome:
    """Detect the cause of the newest state, run the due handlers, apply one patch.

    ``patch`` is what the low-level handlers of the same events have produced, if anything.
    """
    registry = ctx.registry
    resource = ctx.resource
    persistence = ctx.settings.persistence
    raw_body = event["object"]

    changing = registry.has_changing_handlers(resource)
    spawning = registry.has_spawning_handlers(resource)
    if event["type"] == "DELETED":
        # The filters are checked only for the debug line's sake: not unless it is logged.
        if (
            changing
            and logger.isEnabledFor(logging.DEBUG)
            and _takes_in_gone(ctx, raw_body, memory, logger, patch)
        ):
            logger.debug("Deleted, really deleted, and we are notified.")
        return CycleOutcome(gone=True)
    if memory.journal_unchecked:
        memory.journal_unchecked = False
        prefixes = annotation_prefixes(persistence.progress_storage, persistence.diffbase_storage)
        written = pending_write(raw_body, prefixes)
        if written is not None:
            return await _complete_interrupted_write(ctx, event, memory, logger, patch, written)
    if not (changing or spawning) or (memory.released and is_deletion_ongoing(raw_body)):
        # After we have removed our finalizer, events of the states in between (e.g. of our
        # own merge-patch just before that) must not start the deletion anew. Removing the
        # last finalizer does not change the resourceVersion: consistency cannot tell this.
        if memory.released:
            logger.debug("Deletion, but we are done with it, and we do not care.")
        return await apply_carried(ctx, event, memory, logger, patch or Patch())

    body = Body(raw_body)
    patch = _start_patch(memory, patch)
    deleting = is_deletion_ongoing(raw_body)
    blocked = is_deletion_blocked(raw_body, persistence.finalizer)
    delay, settled, awaiting_daemons = await _handle_object(
        ctx,
        event,
        raw_body,
        body,
        patch,
        memory,
        logger,
        deleting=deleting,
        blocked=blocked,
        changing=changing,
        spawning=spawning,
    )
    releasing = deleting and blocked and any(isinstance(fn, RemoveFinalizer) for fn in patch.fns)
    outcome = await _apply(ctx, raw_body, patch, logger, delay=delay, memory=memory)
    outcome.awaiting_daemons = awaiting_daemons
    # ``settled`` implies no delay and no deletion (see _process_changing_cause); ``written``
    # is there only with a new version. Daemons are left out: one that exits for good may end
    # the need of the finalizer, which only the next cycle would see.
    outcome.settled = (
        settled
        and not spawning
        and _echo_settles(registry, resource, persistence, raw_body, patch, outcome)
    )
    if releasing and not memory.pending_fns:
        memory.released = True
    return outcome


async def _handle_object(
    ctx: ResourceContext,
    event: RawEvent,
    raw_body: RawBody,
    body: Body,
    patch: Patch,
    memory: ObjectMemory,
    logger: Logger,
    *,
    deleting: bool,
    blocked: bool,
    changing: bool,
    spawning: bool,
) -> tuple[float | None, bool, bool]:
    """Our finalizer first (added or removed as the handlers need it), else the daemons of a
    deleted object and the changing cause.

    Returns the delay until some handler is due again (``None`` if none is), whether the cause
    is settled (see ``_process_changing_cause``), and whether daemons still hold the object.
    """
    registry = ctx.registry
    resource = ctx.resource
    finalizer = ctx.settings.persistence.finalizer
    requires = registry.requires_finalizer(
        resource=resource,
        body=raw_body,
        # As for the handlers themselves (a ``when`` may ask for the status, the name, ...);
        # made only if some filter is a callback.
        kwargs=lambda: (
            ResourceCause(
                logger=logger,
                memo=memory.memo,
                indices=ctx.operator.indices,
                resource=resource,
                patch=patch,
                body=body,
            ).kwargs
        ),
        excluded=memory.forever_stopped,
    )
    if requires and not blocked and not deleting:
        # Changing handlers wait for the next cycle: the finalizer must be in place first.
        logger.debug("Adding the finalizer, thus preventing the actual deletion.")
        block_deletion(body=raw_body, patch=patch, finalizer=finalizer)
        return None, False, False
    if not requires and blocked:
        logger.debug("Removing the finalizer, as there are no handlers requiring it.")
        allow_deletion(body=raw_body, patch=patch, finalizer=finalizer)
        return None, False, False
    # The daemons are stopped as soon as the deletion is seen (process_spawning); the object
    # is released only when they are all done and the delete handlers too.
    delay: float | None = None
    settled = False
    daemons_delay = None
    if deleting and spawning:
        daemons_delay = await settle_daemons(ctx, memory, logger)
    awaiting_daemons = daemons_delay is not None
    if changing and not (deleting and memory.deletion_handled):
        delay, settled = await _process_changing_cause(
            ctx, event, body, patch, memory, logger, may_release=not awaiting_daemons
        )
    elif deleting and blocked and not awaiting_daemons:
        logger.debug("Removing the finalizer, thus allowing the actual deletion.")
        allow_deletion(body=raw_body, patch=patch, finalizer=finalizer)
    if daemons_delay is not None:
        delay = daemons_delay if delay is None else min(delay, daemons_delay)
    return delay, settled, awaiting_daemons


def _echo_settles(
    registry: OperatorRegistry,
    resource: Resource,
    persistence: PersistenceSettings,
    raw_body: RawBody,
    patch: Patch,
    outcome: CycleOutcome,
) -> bool:
    """Whether the echo of our write (``outcome``) will need no change handling, so that the
    worker skips it (see ``_engine/echoes.py``)."""
    return (
        outcome.written is not None
        and registry.finalizer_follows_labels(resource)
        and echo_is_noop(
            before=raw_body,
            patch=patch,
            written=outcome.written,
            diffbase=persistence.diffbase_storage,
            progress=persistence.progress_storage,
            extra_fields=registry.get_extra_fields(resource),
        )
    )


async def _complete_interrupted_write(
    ctx: ResourceContext,
    event: RawEvent,
    memory: ObjectMemory,
    logger: Logger,
    carried: Patch | None,
    written: dict[str, Any],
) -> CycleOutcome:
    """Do the body write whose status write has landed (the results are stored, the marks are
    not): the handlers of that cycle are not run again. Its echo is then handled as usual."""
    logger.info(
        "The last write was interrupted after the results were stored: "
        "storing the marks of the handled changes now (the handlers are not run again)."
    )
    carried_patch = _start_patch(memory, carried)
    merged = apply_merge_patch(written, dict(carried_patch)) if carried_patch else written
    patch = Patch(copy.deepcopy(merged), fns=list(carried_patch.fns))
    memory.journal_unchecked = True  # until it has landed: if it fails, the next cycle retries
    outcome = await _apply(ctx, event["object"], patch, logger, delay=None, memory=memory)
    memory.journal_unchecked = False
    return outcome


async def _process_changing_cause(
    ctx: ResourceContext,
    event: RawEvent,
    body: Body,
    patch: Patch,
    memory: ObjectMemory,
    logger: Logger,
    *,
    may_release: bool = True,
) -> tuple[float | None, bool]:
    """Detect and handle the changing cause; ``may_release=False`` keeps our finalizer on a
    deleted object (its daemons are still stopping) even when the delete handlers are done.

    Returns the delay until some handler is due again (``None`` if none is) and whether the
    cause is settled: handled completely (or there was none), so that the same essence
    again has nothing to do.
    """
    registry = ctx.registry
    resource = ctx.resource
    persistence = ctx.settings.persistence
    old, new = _essences(registry, resource, persistence, body)
    diff = make_diff(old, new)
    initial = memory.noticed_by_listing and not memory.fully_handled_once
    reason = detect_changing_cause(
        event_type=event["type"],
        body=body,
        old=old,
        new=new,
        diff=diff,
        initial=initial,
        finalizer=persistence.finalizer,
    )
    initial = cause_initial(reason, initial)
    cause: ChangingCause | None = None
    if not registry.changing_unfiltered(resource):
        # Kopf's "stealth mode": an object that none of the filtered handlers takes in is not
        # handled at all (nothing logged, no diff-base stored), so when it starts to match
        # later, that is its creation. Unfiltered handlers (the usual case) skip this check.
        made = _changing_cause(ctx, body, patch, memory, logger, reason, initial, diff, old, new)
        if not registry.prematch_changing(resource=resource, body=body, kwargs=lambda: made.kwargs):
            return None, False
        cause = made
    if reason is Reason.NOOP:
        log_noop(logger)
        return None, True
    if reason is Reason.FREE:
        logger.debug("Deletion, but we are done with it, and we do not care.")
        return None, False
    if reason is Reason.GONE:
        logger.debug("Deleted, really deleted, and we are notified.")
        return None, False

    if cause is None:
        cause = _changing_cause(ctx, body, patch, memory, logger, reason, initial, diff, old, new)
    handlers = registry.iter_changing_handlers(
        resource=resource,
        reason=reason,
        body=body,
        old=old,
        new=new,
        diff=diff,
        initial=initial,
        kwargs=lambda: cause.kwargs,
    )
    title = TITLES[reason]
    done = True
    delay: float | None = None
    if handlers:
        # Only now: most cycles (e.g. the echo of our own patch) have no handler to run.
        done, delay = await _run_cause_handlers(
            ctx, cause, handlers, persistence.progress_storage, title, logger
        )
    else:
        # As Kopf: shown even without handlers, to tell why the diff-base is stored.
        _log_progress(logger, title, body, diff, old=old, new=new)

    if done:
        # As Kopf: the essence is stored whenever a cause is fully handled, deletions included.
        if old != new:
            persistence.diffbase_storage.store(body=body, patch=patch, essence=new)
        memory.fully_handled_once = True
        if reason is Reason.DELETE and may_release:
            logger.debug("Removing the finalizer, thus allowing the actual deletion.")
            allow_deletion(body=body.raw, patch=patch, finalizer=persistence.finalizer)
        elif reason is Reason.DELETE:
            # Not again when the daemons are done (the records say so too, after a restart).
            memory.deletion_handled = True
    return delay, done and reason is not Reason.DELETE


def _takes_in_gone(
    ctx: ResourceContext, raw_body: Any, memory: ObjectMemory, logger: Logger, patch: Patch | None
) -> bool:
    """Whether some change handler takes in an object that is gone (its last state): as in
    Kopf, the goodbye is logged only for those, nothing for the objects left alone (stealth)."""
    registry = ctx.registry
    if registry.changing_unfiltered(ctx.resource):
        return True
    body = Body(raw_body)
    old, new = _essences(registry, ctx.resource, ctx.settings.persistence, body)
    made = _changing_cause(
        ctx,
        body,
        patch or Patch(),
        memory,
        logger,
        Reason.GONE,
        False,
        make_diff(old, new),
        old,
        new,
    )
    return registry.prematch_changing(resource=ctx.resource, body=body, kwargs=lambda: made.kwargs)


def _changing_cause(
    ctx: ResourceContext,
    body: Body,
    patch: Patch,
    memory: ObjectMemory,
    logger: Logger,
    reason: Reason,
    initial: bool,
    diff: Diff,
    old: Any,
    new: Any,
) -> ChangingCause:
    return ChangingCause(
        logger=logger,
        memo=memory.memo,
        indices=ctx.operator.indices,
        resource=ctx.resource,
        patch=patch,
        body=body,
        reason=reason,
        initial=initial,
        diff=diff,
        old=old,
        new=new,
    )


def _essences(
    registry: OperatorRegistry, resource: Resource, persistence: PersistenceSettings, body: Body
) -> tuple[Any, Any]:
    """The object's stored essence (``None`` if never handled) and its current one, both
    without the progress records (whatever storage keeps them)."""
    progress = persistence.progress_storage
    diffbase = persistence.diffbase_storage
    old = diffbase.fetch(body=body)
    extra_fields = registry.get_extra_fields(resource)
    if gives_own_essences(diffbase):
        # Both essences are new dicts of ours: cleared in place, not copied once more.
        new = diffbase.build(body=body, extra_fields=extra_fields)
        old = clear_owned(progress, old) if old is not None else None
        new = clear_owned(progress, new)
    else:
        # Users' storages get the fields as dotted strings, as they always have.
        new = diffbase.build(body=body, extra_fields=[".".join(f) for f in extra_fields])
        old = progress.clear(essence=old) if old is not None else None
        new = progress.clear(essence=new)
    return old, new


async def _run_cause_handlers(
    ctx: ResourceContext,
    cause: ChangingCause,
    handlers: Sequence[ChangingHandler],
    progress: ProgressStorage,
    title: str,
    logger: Logger,
) -> tuple[bool, float | None]:
    """Run the cause's due handlers with their progress records (read and stored back).

    Returns whether all of them are done and, if not, the delay until one is due again.
    """
    body, patch, reason = cause.body, cause.patch, cause.reason
    execution = Execution.for_operator(ctx.operator, progress=True)
    now = execution.now()
    owned = ctx.registry.get_handlers(ChangingHandler, cause.resource)
    state = State.from_storage(
        body=body,
        storage=progress,
        handlers=owned,
        now=now,
        on_corrupt=warn_corrupt_progress(logger),
    )
    state = state.with_purpose(reason.value).with_handlers(handlers, now=now)
    for extra_purpose, counters in state.extras.items():
        extra_title = _title(extra_purpose)
        logger.info(
            f"{extra_title.capitalize()} is superseded by {title}: "
            f"{counters.success} succeeded; {counters.failure} failed; "
            f"{counters.running} left to the moment."
        )
        state = state.with_purpose(reason.value, handlers=handlers)
    if state.extras:
        state.purge(body=body, patch=patch, storage=progress, handlers=owned)

    _log_progress(logger, title, body, cause.diff, old=cause.old, new=cause.new)
    outcomes = await run_handlers(
        handlers, cause=cause, state=state, execution=execution, logger=logger
    )
    state = state.with_outcomes(outcomes, now=execution.now())
    state.store(body=body, patch=patch, storage=progress)
    deliver_results(outcomes=outcomes, patch=patch)
    if not state.done:
        return False, state.delay(execution.now())
    counts = state.counts
    logger.info(
        f"{title.capitalize()} is processed: {counts.success} succeeded; {counts.failure} failed."
    )
    if reason is not Reason.DELETE:
        state.purge(body=body, patch=patch, storage=progress, handlers=owned)
    # A deletion's records stay, final, until the object is gone: our finalizer is removed by
    # a write of its own after this cycle's (or later, when the daemons are done), and a crash
    # before it must find the deletion handled, not run its handlers again. Kopf reads such
    # records as done too.
    return True, None


def log_noop(logger: Logger) -> None:
    """The line of a cycle whose essence is the one last handled (or of a skipped echo)."""
    logger.debug("Something has changed, but we are not interested (the essence is the same).")


def _log_progress(
    logger: Logger, title: str, body: Body, diff: Diff, *, old: Any, new: Any
) -> None:
    # The whole body's repr is the costliest string of a cycle: not built unless it is shown.
    if not logger.isEnabledFor(logging.DEBUG):
        return
    logger.debug(f"{title.capitalize()} is in progress: {dict(body.raw)!r}")
    if diff and old is not None and new is not None:
        logger.debug(f"{title.capitalize()} diff: {diff!r}")


def _title(purpose: str) -> str:
    try:
        return TITLES[Reason(purpose)]
    except ValueError:
        return purpose


async def _apply(
    ctx: ResourceContext,
    raw_body: RawBody,
    patch: Patch,
    logger: Logger,
    *,
    delay: float | None,
    memory: ObjectMemory,
) -> CycleOutcome:
    persistence = ctx.settings.persistence
    if patch:
        # A real change provokes an event anyway: the touch-dummy is not needed any more.
        persistence.progress_storage.touch(body=Body(raw_body), patch=patch, value=None)
        if "status" in ctx.resource.subresources:
            # Two writes: the status one carries the body one (the results with their marks).
            prefixes = annotation_prefixes(
                persistence.progress_storage, persistence.diffbase_storage
            )
            prepare(raw_body, patch, prefixes)
    journaled = _has_journal(patch)
    if journaled:
        # Until it has all landed: if it fails half-way, the next cycle completes it.
        memory.journal_unchecked = True
    result = await apply_patch(
        ctx.api, resource=ctx.resource, body=raw_body, patch=patch, logger=logger
    )
    if journaled:
        memory.journal_unchecked = False
    # The shared empty tuple, not an empty list per object: it is kept for the object's life.
    memory.pending_fns = result.remaining_fns or ()
    # A write that changed nothing keeps the version and makes no event: nothing to wait for.
    before = (raw_body.get("metadata") or {}).get("resourceVersion")
    version = result.resource_version if result.resource_version != before else None
    return CycleOutcome(
        resource_version=version,
        earlier_versions=result.earlier_versions if version is not None else (),
        delay=delay,
        patched=version is not None or bool(result.remaining_fns),  # an event is coming
        gone=result.gone,
        written=result.body if version is not None else None,
    )


def _has_journal(patch: Patch) -> bool:
    status = patch.get("status")
    kopf = status.get("kopf") if isinstance(status, dict) else None
    return isinstance(kopf, dict) and kopf.get("journal") is not None


async def touch(ctx: ResourceContext, raw_body: RawBody, logger: Logger) -> str | None:
    """Write the touch-dummy annotation so that a new event wakes the object's worker up."""
    patch = Patch()
    value = format_iso8601(ctx.operator.now())
    ctx.settings.persistence.progress_storage.touch(body=Body(raw_body), patch=patch, value=value)
    result = await apply_patch(
        ctx.api, resource=ctx.resource, body=raw_body, patch=patch, logger=logger
    )
    return result.resource_version
