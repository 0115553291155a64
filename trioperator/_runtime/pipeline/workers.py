"""One worker per object: it processes the newest state of its object, one cycle at a time.

A worker is fed by its own mailbox (see mailboxes.py: the newest event only, or every event if
there are ``on.event`` handlers). Before each cycle it drains everything queued, lets the
low-level consumers (``on.event`` handlers) see every event exactly once, and runs the change
handling only for the newest state (level-triggered). It waits for its own last patch to
come back on the stream (consistency), sleeps for delayed handlers (interrupted by any new
event), throttles itself after unexpected errors, and exits when idle; the watcher re-creates
it on demand. Idle with nothing but new events to wait for, it parks (see mailboxes.py): its
task ends at once, and the router starts a new one on the same mailbox and memory for the next
event within ``idle_timeout``.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from functools import partial
from typing import Literal, TypeAlias

import trio

from trioperator._engine.bodies import RawBody, RawEvent
from trioperator._engine.causes import is_deletion_ongoing
from trioperator._engine.patches import Patch
from trioperator._runtime.handling.loggers import ObjectLogger
from trioperator._runtime.objects.mailboxes import Mailbox
from trioperator._runtime.objects.memories import ObjectMemory
from trioperator._runtime.objects.reconcile_state import Reconciler
from trioperator._runtime.pipeline.contexts import ResourceContext
from trioperator._runtime.pipeline.daemon_spawning import process_spawning
from trioperator._runtime.pipeline.processing import (
    CycleOutcome,
    apply_carried,
    log_noop,
    process_changes,
    process_events,
    touch,
)
from trioperator._runtime.pipeline.reconciling import reconcile_object
from trioperator._runtime.support.waiting import first_of
from trioperator._util.lognames import framework_logger
from trioperator._util.ordering import OrderedSlots, current_ticket

WAITING_KEEPALIVE_INTERVAL = 10 * 60
"""The longest a delay sleeps before touching the object anyway (as Kopf does)."""

logger = framework_logger("kopf._core.reactor.queueing", __name__)


async def _wait(
    ctx: ResourceContext,
    mailbox: Mailbox,
    into: list[RawEvent],
    seconds: float,
    wake: trio.Event | None = None,
    awaited: str | None = None,
) -> bool:
    """Wait up to ``seconds`` for events (into ``into``); return False if the mailbox closed.

    ``wake`` (if given) ends the wait early too, with nothing received: the caller checks it.
    ``awaited`` (if given): only that version wakes the worker up, or a deletion, a listing, a
    stall (see ``Mailbox.await_version``). A waiting worker is not busy (for the metrics).
    """
    ctx.workers_busy -= 1
    mailbox.await_version(awaited)
    # Not woken up by the states in between, the worker must be by a stall: its queued event
    # counts in the backlog, and the router may be waiting for exactly that room.
    stalls = ctx.backlog.waking_on_stall(mailbox) if awaited is not None else nullcontext()
    try:
        with stalls, trio.move_on_after(max(seconds, 0)):
            if wake is None:
                return await mailbox.wait(into)
            first = await first_of(partial(mailbox.wait, into), wake.wait)
            # Woken up (the second wait): nothing received; the mailbox is asked again later.
            return bool(first.value) if first.index == 0 else True
        return True  # the time is up: nothing received, still open
    finally:
        mailbox.await_version(None)
        ctx.workers_busy += 1


async def run_worker(
    ctx: ResourceContext,
    key: str,
    mailbox: Mailbox,
    memory: ObjectMemory,
    retire: Callable[[], bool],
    discard: Callable[[], None] = lambda: None,
    park: Callable[[], bool] | None = None,
) -> None:
    """Serve one object until it is idle, gone, or its mailbox is closed (a stop).

    ``retire()`` is called when the worker wants to exit for idleness; it returns False if an
    event arrived in the meantime (the worker then continues). ``discard()`` is called when the
    worker exits for any other reason, so that the watcher routes later events to a new worker
    instead of into a mailbox nobody reads. What is left in the mailbox then is dropped.
    ``park()`` (if given) is called instead of waiting idle in the task; if it returns True,
    the task ends and the mailbox stays, to be served by a new task (see mailboxes.py).
    """
    parked = False
    try:
        # Before taking a slot: waiting for the indices must not hold back the objects
        # that are still to be indexed (it would not, anyway: see _runtime/pipeline/indexing.py).
        await ctx.operator.indexing.wait()
        # Its slot, and the first request of each cycle, go to the oldest work first: objects
        # are handled in the order they came (see _util/ordering.py).
        current_ticket.set(mailbox.ticket)
        slot = _Slot(ctx.worker_slots)
        try:
            await slot.acquire()
            parked = await _Service(ctx, key, mailbox, memory, retire, slot, park).serve()
        finally:
            slot.release()
    finally:
        if not parked:
            discard()
            mailbox.discard()


class _Slot:
    """A worker's place among ``settings.queueing.worker_limit`` (none if unlimited).

    Given back while the worker waits for its own patch behind a held-back stream: the stream
    is held back until waiting workers take their events, which needs free slots.
    """

    def __init__(self, slots: OrderedSlots | None) -> None:
        self._slots = slots
        self.held = False
        self.ticket = current_ticket.get()  # taken again after a wait: still the old work

    async def acquire(self) -> None:
        if self._slots is not None and not self.held:
            await self._slots.acquire(self.ticket)
            self.held = True

    def release(self) -> None:
        if self._slots is not None and self.held:
            self.held = False
            self._slots.release()


class _Then(enum.Enum):
    """What a step of a pass tells the loop besides exiting (a bool: ``True`` if parked)."""

    AGAIN = "again"
    """The pass is over: the loop starts over with what it has."""


# A step that may fall through: ``None`` goes on with the pass.
_Step: TypeAlias = "bool | Literal[_Then.AGAIN] | None"
_Exit: TypeAlias = "bool | Literal[_Then.AGAIN]"


class _Service:
    """One worker's service of its object: the loop and its steps, with the state they share.

    A pass of the loop either waits while idle (``_idle``) or handles what came (``_pass``):
    the ``on.event`` handlers and daemons (``_deliver``), the wait for our own last patch
    (``_await_consistency``), then the change handling (``_handle_changes``) and what its
    outcome asks for (a sleep for the delayed handlers, a touch).
    """

    __slots__ = (
        "body",
        "carried",
        "ctx",
        "events",
        "idle_timeout",
        "key",
        "last",
        "latest",
        "listed_noop",
        "mailbox",
        "memory",
        "objlogger",
        "open_",
        "park",
        "pending",
        "retire",
        "slot",
    )

    def __init__(
        self,
        ctx: ResourceContext,
        key: str,
        mailbox: Mailbox,
        memory: ObjectMemory,
        retire: Callable[[], bool],
        slot: _Slot,
        park: Callable[[], bool] | None,
    ) -> None:
        self.ctx = ctx
        self.key = key
        self.mailbox = mailbox
        self.memory = memory
        self.retire = retire
        self.slot = slot
        self.park = park
        self.pending: list[RawEvent] = []  # received, not yet seen by the on.event handlers
        self.latest: RawEvent | None = None  # the newest state, not yet seen by change handling
        self.last: RawEvent | None = None  # the newest state the change handling has seen
        self.body: RawBody | None = None  # the object of ``last``, for the touch after a delay
        self.events: list[RawEvent] = []  # the batch being seen by the on.event handlers
        self.carried = Patch()  # what the on.event handlers produced, for the next cycle
        # The last cycle was a listed object's with nothing to do and nothing written: no echo
        # of ours is coming, so the worker retires at once instead of parking for idle_timeout.
        self.listed_noop = False
        # One logger for the worker's life: a worker serves one uid, so the object's reference
        # (name, namespace, uid, kind) in every line stays the same from event to event.
        self.objlogger: ObjectLogger | None = None
        self.open_ = True
        self.idle_timeout = ctx.settings.queueing.idle_timeout

    async def serve(self) -> bool:
        """Serve the object, counted as a busy worker meanwhile (metrics); True if the worker
        has parked (its mailbox stays), else False."""
        ctx = self.ctx
        ctx.workers_busy += 1
        try:
            return await self._loop()
        finally:
            ctx.workers_busy -= 1

    async def _loop(self) -> bool:
        mailbox = self.mailbox
        while True:
            if mailbox.discarded:
                return False  # taken away (sharding: the object moved to another replica)
            step = await self._idle() if self.latest is None and not self.pending else None
            if step is None:
                step = await self._pass()
            if step is not _Then.AGAIN:
                return step

    async def _idle(self) -> _Step:
        """Nothing to handle: wait for events (or park, or retire), or run a reconcile.

        ``None``: events came while waiting; the pass goes on with them at once.
        """
        ctx, mailbox, memory = self.ctx, self.mailbox, self.memory
        if not self.open_:
            return False
        # Nothing of the object is needed any more unless it is being deleted (its last state
        # is seen again when a daemon that holds it ends). Dropping the rest now frees the
        # bodies of a listing of many objects as they are handled, rather than keeping each
        # one alive for ``idle_timeout`` in its waiting worker.
        self.events = []
        self.body = None
        last = self.last
        if last is not None and not is_deletion_ongoing(last["object"]):
            last = self.last = None
        # While daemons hold the object being deleted, their end must lead to a new cycle
        # (which releases the object): stay, and be woken up by it.
        holding = (
            last is not None
            and is_deletion_ongoing(last["object"])
            and bool(memory.daemons.stopping)
        )
        wake = memory.daemons.changed if holding else None
        if len(mailbox):
            # Already there (a new worker's first event, or one that came meanwhile): the
            # wait would return at once, without a checkpoint, only at a higher cost.
            self.open_ = mailbox.drain(self.pending) and self.open_
            return _Then.AGAIN
        reconciler = ctx.reconciler
        if reconciler is not None and reconciler.coalescer.is_queued(self.key):
            # Kopf's handlers are done with the object: its reconcile run (trioperator's own
            # handler kind) sees the newest known state.
            self.objlogger = await _reconcile(ctx, reconciler, self.key, memory, self.objlogger)
            return _Then.AGAIN
        awaited = _awaited(ctx, memory)
        # Awaited is only the echo of our own write that settled the object: the router takes
        # it without the worker (see Mailbox.echo), which has nothing else to wait for.
        echo = awaited if awaited is not None and awaited == memory.settled_version else None
        # Nothing to wait for but a new event, whoever brings it: wait without a task.
        # Not under a worker limit, where an idle worker keeps its slot (as in Kopf).
        park = self.park
        if (
            park is not None
            and wake is None
            and (awaited is None or echo is not None)
            and not self.carried
            and ctx.worker_slots is None
        ):
            # After a restart over thousands of handled objects, their retirements would all
            # come ``idle_timeout`` later, in what is otherwise a quiet minute.
            if self.listed_noop and self.retire():
                return False
            mailbox.echo = echo
            if park():
                return True
            mailbox.echo = None
        pending = self.pending
        mailbox.idling = True
        try:
            self.open_ = await _wait(ctx, mailbox, pending, self.idle_timeout, wake, awaited)
        finally:
            mailbox.idling = False
        # Woken up for a reconcile run (see reconciling.py): not idle, stay for it.
        requested = reconciler is not None and reconciler.coalescer.is_queued(self.key)
        if not pending:
            self.open_ = mailbox.drain(pending) and self.open_
            if not pending and wake is not None and wake.is_set() and self.open_:
                memory.daemons.rearm()  # each end wakes us up once
                self.latest = last
                return _Then.AGAIN
            if not pending and (
                not self.open_ or (not holding and not requested and self.retire())
            ):
                return False
            return _Then.AGAIN
        return None

    async def _pass(self) -> _Exit:
        """Handle what came: events first, then the newest state, once it is consistent."""
        ctx, mailbox = self.ctx, self.mailbox
        self.open_ = mailbox.drain(self.pending) and self.open_
        if self.pending and not ctx.operator.indexing.ready:
            # A watcher of an indexed resource has (re)started: wait until it is indexed.
            await ctx.operator.indexing.wait()
            self.open_ = mailbox.drain(self.pending) and self.open_
        if self.pending:
            step = await self._deliver()
            if step is not None:
                return step
        latest = self.latest
        assert latest is not None
        if self.objlogger is None:
            self.objlogger = ObjectLogger(latest["object"])
        if self.memory.expected_version is not None and latest["type"] != "DELETED":
            step = await self._await_consistency(latest, self.objlogger)
            if step is not None:
                return step
        return await self._handle_changes(latest, self.objlogger)

    async def _deliver(self) -> _Step:
        """Give the new events to the ``on.event`` handlers, the newest state to the daemons."""
        ctx, memory, pending = self.ctx, self.memory, self.pending
        # Our own last patch is among the new events: the states after it are consistent.
        expected = memory.expected_version
        if expected is not None and self.mailbox.has_seen(expected):
            memory.expected_version = None
            memory.superseded_versions = ()
        latest = self.latest = pending[-1]
        current_ticket.set(self.mailbox.ticket)
        events = self.events = list(pending)
        pending.clear()
        objlogger = self.objlogger
        if objlogger is None:
            objlogger = self.objlogger = ObjectLogger(latest["object"])
        try:
            await process_events(ctx, events, memory, self.carried)
            # Daemons and timers follow the newest state at once, consistent or not.
            await process_spawning(ctx, latest, memory, objlogger)
        except Exception as exc:
            # The events are delivered (or lost in the error); the newest state stays.
            return await self._throttled(exc, objlogger, again=latest)
        return None

    async def _await_consistency(self, latest: RawEvent, objlogger: ObjectLogger) -> _Step:
        """Our own last patch must come back on the stream before change handlers look at the
        object, or they would act on a state older than what they wrote.

        A new event wakes us up: it may be ours. DELETED needs no waiting (the caller checks):
        nothing is left to do. The time the watcher held its stream back (a storm) does not
        count: our event may be among what was not read meanwhile.
        """
        ctx, memory = self.ctx, self.memory
        held_back = ctx.backlog.stalled_time() - memory.consistency_stalls
        remaining = memory.consistency_deadline + held_back - trio.current_time()
        if remaining > 0 and self.carried:
            # As Kopf: no waiting with a patch at hand; apply it, skip the change handling.
            try:
                outcome = await apply_carried(ctx, latest, memory, objlogger, self.carried)
            except Exception as exc:
                return await self._throttled(exc, objlogger, again=latest)
            self.carried = Patch()
            _expect(ctx, memory, outcome.resource_version, outcome.earlier_versions)
            return _Then.AGAIN
        if remaining > 0:
            if not self.open_:
                return False  # stopping: our version will never come; the next run handles it
            # Woken up when the stream is held back meanwhile, to give the slot back.
            awaited = _awaited(ctx, memory)
            if ctx.backlog.stalled:
                self.slot.release()
                self.open_ = await _wait(
                    ctx, self.mailbox, self.pending, remaining, awaited=awaited
                )
            else:
                with ctx.backlog.waking_on_stall(self.mailbox):
                    self.open_ = await _wait(
                        ctx, self.mailbox, self.pending, remaining, awaited=awaited
                    )
            await self.slot.acquire()
            return _Then.AGAIN  # with the events that came, or to see if the deadline has moved
        timeout = ctx.settings.persistence.consistency_timeout
        if _version(latest) in memory.superseded_versions:
            # The newest state is our own write of the status, before the body's: taking it
            # for consistent would run the handlers again on a state without their marks.
            # The stream brings the newer one after it, however late (or a relisting).
            if not self.open_:
                return False  # stopping: the next run of the operator sees the newest state
            objlogger.debug(
                f"Version {memory.expected_version!r} has not arrived within "
                f"{timeout} seconds, but an earlier write of ours has: waiting on."
            )
            _expect(ctx, memory, memory.expected_version, memory.superseded_versions)
            return _Then.AGAIN
        objlogger.debug(
            f"Consistency is assumed: version {memory.expected_version!r} has not arrived "
            f"within {timeout} seconds."
        )
        memory.expected_version = None
        memory.superseded_versions = ()
        return None

    async def _handle_changes(self, latest: RawEvent, objlogger: ObjectLogger) -> _Exit:
        """Run the change handling on the newest state, then do what its outcome asks for."""
        ctx, memory = self.ctx, self.memory
        settled, memory.settled_version = memory.settled_version, None
        carried = self.carried
        if (
            settled is not None
            and latest["type"] == "MODIFIED"
            and not carried
            and _version(latest) == settled
        ):
            # The echo of our own write that settled the object: the change handling would
            # find the essence it has just handled (see _engine/echoes.py).
            log_noop(objlogger)
            self.body = latest["object"]
            self.last, self.latest = latest, None
            self.listed_noop = False
            return _Then.AGAIN

        try:
            outcome = await process_changes(ctx, latest, memory, objlogger, carried)
        except Exception as exc:
            # Retry the newest state (newer events replace it), or wait for the next one.
            return await self._throttled(exc, objlogger, again=latest)
        _recover(memory, objlogger)
        self.carried = Patch()
        self.body = latest["object"]
        self.last, self.latest = latest, None
        self.listed_noop = (
            latest["type"] is None
            and not outcome.patched
            and outcome.resource_version is None
            and outcome.delay is None
        )

        if outcome.gone:
            ctx.memories.forget(self.key)
            if latest["type"] == "DELETED":
                return False  # really deleted: no more events can come for this uid
            return _Then.AGAIN
        _expect(ctx, memory, outcome.resource_version, outcome.earlier_versions)
        if outcome.settled:
            memory.settled_version = outcome.resource_version
        if outcome.delay is None:
            return _Then.AGAIN
        return await self._follow_delay(outcome, outcome.delay, objlogger)

    async def _follow_delay(
        self, outcome: CycleOutcome, requested: float, objlogger: ObjectLogger
    ) -> _Exit:
        """Sleep until the delayed handlers are due (interrupted by new events), then touch the
        object, so that its new event starts their cycle."""
        delay = min(max(requested, 0.0), WAITING_KEEPALIVE_INTERVAL)
        if outcome.patched:
            # Our patch comes back as an event; the next cycle decides how long to sleep.
            if delay > 0:
                objlogger.debug(f"Sleeping was skipped because of the patch, {delay} seconds left.")
            return _Then.AGAIN
        if not self.open_:
            return False  # stopping: the delayed handlers are for the next run of the operator
        memory = self.memory
        if delay > 0:
            if requested > WAITING_KEEPALIVE_INTERVAL:
                objlogger.debug(
                    f"Sleeping for {requested} (capped {delay}) seconds for the delayed handlers."
                )
            elif outcome.awaiting_daemons:
                objlogger.debug(f"Sleeping for {delay} seconds, or until a daemon exits.")
            else:
                objlogger.debug(f"Sleeping for {delay} seconds for the delayed handlers.")
            deadline = trio.current_time() + delay
            wake = memory.daemons.changed if outcome.awaiting_daemons else None
            self.open_ = await _wait(self.ctx, self.mailbox, self.pending, delay, wake)
            if self.pending:
                left = max(0.0, deadline - trio.current_time())
                objlogger.debug(f"Sleeping was interrupted by new changes, {left:g} seconds left.")
                return _Then.AGAIN
            if not self.open_:
                return False
            if wake is not None and wake.is_set():
                memory.daemons.rearm()  # each end wakes us up once
                self.latest = self.last  # a daemon has ended: see if the object can be released
                return _Then.AGAIN
        # The sleep was not interrupted: provoke a new event with the touch-dummy.
        body = self.body
        assert body is not None
        try:
            version = await touch(self.ctx, body, objlogger)
        except Exception as exc:
            # Run the delayed handlers again on the same object, or wait for the next event.
            return await self._throttled(exc, objlogger, again={"type": "MODIFIED", "object": body})
        _expect(self.ctx, memory, version)
        return _Then.AGAIN

    async def _throttled(
        self, exc: Exception, objlogger: ObjectLogger, *, again: RawEvent
    ) -> _Exit:
        """After an unexpected error: back off, then handle ``again`` (or wait for the next
        event if there is nothing to back off with); exit if the operator is stopping."""
        retry = await _throttle(self.ctx, self.memory, objlogger, exc)
        if retry is None:
            return False
        self.latest = again if retry else None
        return _Then.AGAIN


async def _reconcile(
    ctx: ResourceContext,
    reconciler: Reconciler,
    key: str,
    memory: ObjectMemory,
    objlogger: ObjectLogger | None,
) -> ObjectLogger | None:
    """Run the queued reconcile of the object (see reconciling.py), unless it cannot run now.

    While the operator is paused (peering) or fenced (sharding), the request is dropped: the
    stream lists every object again when it resumes, and that requests them all anew.
    """
    body = reconciler.bodies.get(key)
    shard = ctx.operator.shard
    if body is None or ctx.operator.pause.is_paused() or (shard is not None and shard.fenced):
        reconciler.coalescer.forget(key)
        return objlogger
    if objlogger is None:
        objlogger = ObjectLogger(body)
    await reconcile_object(ctx, reconciler, key, memory, objlogger)
    return objlogger


def _awaited(ctx: ResourceContext, memory: ObjectMemory) -> str | None:
    """The version to be woken up for only (see ``Mailbox.await_version``), if any.

    Only with nothing to do for the states in between: event handlers see every event, and
    daemons follow the newest state, as it comes.
    """
    if memory.expected_version is None:
        return None
    registry = ctx.registry
    if registry.has_watching_handlers(ctx.resource) or registry.has_spawning_handlers(ctx.resource):
        return None
    return memory.expected_version


def _version(event: RawEvent) -> str | None:
    metadata = event["object"].get("metadata")
    version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
    return version if isinstance(version, str) else None


def _expect(
    ctx: ResourceContext,
    memory: ObjectMemory,
    version: str | None,
    earlier: Sequence[str] = (),
) -> None:
    """Remember the version of our own patch, to wait for it before the next change handling."""
    timeout = ctx.settings.persistence.consistency_timeout
    if version is not None and timeout > 0:
        memory.expected_version = version
        memory.superseded_versions = tuple(earlier)
        memory.consistency_deadline = trio.current_time() + timeout
        memory.consistency_stalls = ctx.backlog.stalled_time()


async def _throttle(
    ctx: ResourceContext,
    memory: ObjectMemory,
    objlogger: logging.LoggerAdapter[logging.Logger],
    exc: Exception,
) -> bool | None:
    """Back off after an unexpected error (not a handler's, e.g. of the API).

    Returns True to process the newest state again, False to wait for the next event (no
    ``settings.queueing.error_delays`` configured: nothing to back off with), ``None`` to exit
    (the operator is stopping). Events keep being queued while throttled.
    """
    delays = tuple(ctx.settings.queueing.error_delays or ())
    if not delays:
        objlogger.exception(f"Unexpected error; waiting for the next event: {exc!r}")
        return None if ctx.is_stopping else False
    delay = delays[min(memory.error_count, len(delays) - 1)]
    memory.error_count += 1
    objlogger.exception(f"Throttling for {delay} seconds due to an unexpected error: {exc!r}")
    with trio.move_on_after(delay):
        await ctx.wait_stopping()
        return None
    return True


def _recover(memory: ObjectMemory, objlogger: logging.LoggerAdapter[logging.Logger]) -> None:
    if memory.error_count:
        memory.error_count = 0
        objlogger.info("Throttling is over. Switching back to normal operations.")
