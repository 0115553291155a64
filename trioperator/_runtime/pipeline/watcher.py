"""The watcher of one (resource, namespace): a list+watch stream routed to per-object workers.

Task tree::

    run_watcher                      owns the background and the workers' nurseries
    └── background nursery           daemons and timers (trioperator._runtime.objects.daemon_keeper)
        ├── exit relay               the operator's stop -> all daemons stop (OPERATOR_EXITING)
        ├── daemon/timer tasks       one per (object, handler), with their terminators
        └── workers' nursery
            ├── stream_events        list + watch (trioperator._client.watching), feeds a channel;
            │                        closed while the operator is paused (peering), with the
            │                        daemons stopped; listed again on resuming
            ├── the router (this task)  indexes each event, then routes it by uid to its worker
            ├── idle workers' retirer     retires parked workers when their idle_timeout ends
            └── run_worker (per object)    one per object with queued work; parks when idle

The router never queues more than the newest event per object (every event, if there are
``on.event`` handlers), and stops reading the stream while ``settings.queueing.max_pending``
bodies wait for their workers (see mailboxes.py): memory stays bounded under event storms.

A graceful stop (``operator.stopping``, or ``ctx.stopping`` for this watcher alone) ends the
stream first and asks every daemon to stop;
then every worker's mailbox is closed so that each finishes what is already queued, for at most
``settings.queueing.exit_timeout`` seconds, after which the rest is cancelled. The daemons end
within their own termination limits (see daemon_keeper.py); the watcher returns when all have.

Indexing happens here, in the router, not in the workers (see _runtime/pipeline/indexing.py
for why).
A watcher of an indexed resource holds the operator's indexing gate closed until its initial
listing is routed and indexed.
"""

from __future__ import annotations

import logging
from functools import partial

import trio

from trioperator._client.watching import LISTED, WatchItem
from trioperator._engine.bodies import RawEvent
from trioperator._engine.handlers import ReconcilingHandler, RelayingHandler
from trioperator._engine.stoppers import DaemonStoppingReason
from trioperator._engine.watch_selection import watch_selector
from trioperator._runtime.coordination.sharding import ShardShare, wait_paused_or_reassigned
from trioperator._runtime.handling.loggers import OBJECTS_LOGGER_NAME, ObjectLogger
from trioperator._runtime.objects.daemon_keeper import DaemonsKeeper
from trioperator._runtime.objects.mailboxes import RETIREMENT_SLACK, IdleWorkers, Mailbox
from trioperator._runtime.objects.memories import ObjectMemory
from trioperator._runtime.objects.reconcile_state import Reconciler
from trioperator._runtime.pipeline.contexts import ResourceContext
from trioperator._runtime.pipeline.daemon_spawning import new_keeper
from trioperator._runtime.pipeline.departures import is_departure, release_departed
from trioperator._runtime.pipeline.indexing import index_object
from trioperator._runtime.pipeline.processing import log_noop
from trioperator._runtime.pipeline.reconciling import observe, relay, run_timers
from trioperator._runtime.pipeline.shard_labelling import label_new_objects
from trioperator._runtime.pipeline.workers import run_worker
from trioperator._runtime.support.metrics import WatchCounts
from trioperator._util.lognames import framework_logger

_OBJECTS_LOGGER = framework_logger(OBJECTS_LOGGER_NAME)

# Kopf's names: the multiplexing into workers is "queueing", the streams are "watching".
logger = framework_logger("kopf._core.reactor.queueing", "trioperator._runtime.pipeline.workers")
stream_logger = framework_logger("kopf._cogs.clients.watching", __name__)

STREAM_BUFFER = 1024
"""Events read ahead of routing, to absorb bursts; routing blocks only when the workers' queues
are full (``settings.queueing.max_pending``), and then this buffer fills and the stream waits."""


ROUTING_BATCH = 32
"""Events routed in a row, when the stream has them ready, before the router checkpoints."""


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
    streams = ctx.streams
    ctx.selection = watch_selector(settings.watching, ctx.registry, ctx.resource)
    if ctx.selection is not None:
        stream_logger.debug(
            f"Watching {ctx.resource} in {ctx.namespace or '*'} with server-side selectors:"
            f" labels={ctx.selection.labels!r}, fields={ctx.selection.fields!r}."
        )
    send_events, receive_events = trio.open_memory_channel[WatchItem](STREAM_BUFFER)
    ctx.incoming = receive_events
    metrics = ctx.operator.metrics
    counts = metrics.watcher_started(ctx) if metrics is not None else None
    # Before the first checkpoint: watchers started together all hold the gate before any
    # worker of any of them can run.
    indexed = ctx.registry.has_indexing_handlers(ctx.resource)
    gate = ctx.operator.indexing.hold() if indexed else None
    shard = ctx.operator.shard
    share = None
    if shard is not None:
        share = shard.join(
            streams=ctx.streams,
            memories=ctx.memories,
            indexers=ctx.operator.indexers,
            daemons=lambda: ctx.daemons,
        )

    reconciling = ctx.registry.get_handlers(ReconcilingHandler, ctx.resource)
    reconciler = None
    if reconciling:
        reconciler = ctx.reconciler = Reconciler(ctx.resource, ctx.namespace, reconciling)
        ctx.operator.reconcilers.add(reconciler)

    try:
        async with trio.open_nursery() as background:
            keeper = ctx.daemons = new_keeper(ctx, background)
            relay = trio.CancelScope()
            background.start_soon(_close_when_stopping, ctx, keeper, relay, name="exit relay")
            try:
                async with trio.open_nursery() as workers:
                    async with trio.open_nursery() as streaming:
                        streaming.start_soon(
                            _stop_when_asked, ctx, streaming.cancel_scope, name="watcher stopper"
                        )
                        idle = IdleWorkers()
                        streaming.start_soon(idle.run, name="idle workers' retirer")
                        if reconciler is not None:
                            reconciler.wake = partial(
                                _wake_for_reconcile, ctx, streams, workers, idle
                            )
                            streaming.start_soon(
                                run_timers, reconciler, name=f"reconcile timers {ctx.resource}"
                            )
                        started = _StartedOnce(task_status)
                        streaming.start_soon(
                            _stream_unless_paused,
                            ctx,
                            keeper,
                            send_events,
                            started,
                            name=f"stream {ctx.resource} in {ctx.namespace or '*'}",
                        )
                        # The producer owns the send side; the router owns the receive side.
                        await _route(
                            ctx,
                            receive_events,
                            streams,
                            workers,
                            started,
                            gate,
                            counts,
                            share,
                            idle,
                        )

                    # No more reconcile requests start workers here: they are draining.
                    if reconciler is not None:
                        reconciler.wake = _ignore_wake
                    # The stream has stopped. Let every worker finish what is queued, within
                    # the bound.
                    for mailbox in streams.values():
                        mailbox.close()
                    deadline = trio.current_time() + settings.queueing.exit_timeout
                    workers.cancel_scope.deadline = deadline
                if workers.cancel_scope.cancelled_caught:
                    logger.warning(
                        f"Unprocessed streams left for {ctx.resource} after the exit timeout."
                    )
            finally:
                # Whatever ended the watcher, no daemon outlives it (normally, they are asked
                # to stop as soon as the operator begins to stop, by the relay).
                keeper.close(DaemonStoppingReason.OPERATOR_EXITING)
                relay.cancel()
    finally:
        if reconciler is not None:
            reconciler.wake = _ignore_wake
            ctx.operator.reconcilers.remove(reconciler)
            ctx.reconciler = None
        if share is not None:
            share.shard.leave(share)
        if gate is not None:
            ctx.operator.indexing.release(gate)
        ctx.daemons = None
        ctx.incoming = None
        if metrics is not None:
            metrics.watcher_ended(ctx)


class _StartedOnce:
    """The watcher's ``task_status``, reported by whichever comes first: the initial listing
    routed, or a pause before it (a paused operator is started, just not streaming)."""

    def __init__(self, task_status: trio.TaskStatus[None]) -> None:
        self._task_status = task_status
        self.reported = False

    def started(self, value: None = None) -> None:
        if not self.reported:
            self.reported = True
            self._task_status.started()


PAUSED_HEALTH_INTERVAL = 10.0
"""While paused, the watcher tells the liveness probe this often that it waits on purpose."""


async def _stream_unless_paused(
    ctx: ResourceContext,
    keeper: DaemonsKeeper,
    send: trio.MemorySendChannel[WatchItem],
    started: _StartedOnce,
) -> None:
    """List and watch while the operator is not paused (peering); as Kopf does, a pause
    closes the stream and stops the daemons; the resumed stream lists everything again."""
    pause = ctx.operator.pause
    where = f"in {ctx.namespace!r}" if ctx.namespace is not None else "cluster-wide"
    while True:
        if pause.is_paused():
            blockers = ", ".join(pause.reasons)
            stream_logger.debug(
                f"Pausing the watch-stream for {ctx.resource} {where} (blockers: {blockers})."
            )
            keeper.pause()
            started.started()
            ctx.health.alive = True
            while pause.is_paused():
                ctx.health.touch()
                with trio.move_on_after(PAUSED_HEALTH_INTERVAL):
                    await pause.wait_for(False)
            stream_logger.debug(f"Resuming the watch-stream for {ctx.resource} {where}.")
            keeper.resume()
        # Read before the listing: a reassignment during it lists again.
        shard = ctx.operator.shard
        generation = shard.generation if shard is not None else 0
        labels = ctx.selection.labels if ctx.selection is not None else None
        if shard is not None and shard.divides_traffic:
            # Only our buckets, as the view served now gives them (docs/sharding.md).
            buckets = shard.selector()
            labels = f"{labels},{buckets}" if labels else buckets
        async with trio.open_nursery() as nursery:
            if shard is not None and shard.divides_traffic:
                nursery.start_soon(
                    label_new_objects, ctx, shard, name=f"shard labeller {ctx.resource} {where}"
                )
            nursery.start_soon(
                ctx.stream(send, labels=labels, health=ctx.health),
                name=f"stream {ctx.resource} {where}",
            )
            # A pause, or (sharded) a share that may have grown: list again.
            await wait_paused_or_reassigned(pause, ctx.operator.shard, generation)
            nursery.cancel_scope.cancel()


async def _stop_when_asked(ctx: ResourceContext, scope: trio.CancelScope) -> None:
    await ctx.wait_stopping()
    scope.cancel()


async def _close_when_stopping(
    ctx: ResourceContext, keeper: DaemonsKeeper, scope: trio.CancelScope
) -> None:
    with scope:
        await ctx.wait_stopping()
        keeper.close(DaemonStoppingReason.OPERATOR_EXITING)


async def _route(
    ctx: ResourceContext,
    receive_events: trio.MemoryReceiveChannel[WatchItem],
    streams: dict[str, Mailbox],
    workers: trio.Nursery,
    task_status: _StartedOnce,
    gate: object | None,
    counts: WatchCounts | None = None,
    share: ShardShare | None = None,
    idle: IdleWorkers | None = None,
) -> None:
    listing = True
    # Counted per event with one integer addition; the metrics read the totals when scraped.
    tally = counts.events if counts is not None else None
    started = False
    indexed = ctx.registry.has_indexing_handlers(ctx.resource)
    listed: set[str] = set()  # the objects of the current listing (initial, or after a 410)
    # trioperator's own reconcile handlers: nothing of it runs per event when none is declared.
    reconciler = ctx.reconciler
    relays = ctx.registry.get_handlers(RelayingHandler, ctx.resource)
    relayed_only = ctx.registry.is_relayed_only(ctx.resource)
    selection = ctx.selection
    async with receive_events:
        in_a_row = 0
        while True:
            # What the stream has read ahead is taken without a trip through the scheduler per
            # event (a checkpoint each, then the next event); one checkpoint per batch keeps the
            # router cancellable and fair. Before taking an event, so none is lost to a cancel.
            if in_a_row >= ROUTING_BATCH:
                in_a_row = 0
                await trio.lowlevel.checkpoint()
            try:
                item = receive_events.receive_nowait()
                in_a_row += 1
            except trio.WouldBlock:
                try:
                    item = await receive_events.receive()
                except trio.EndOfChannel:
                    break
                in_a_row = 0
            except trio.EndOfChannel:
                break
            if item is LISTED:
                listing = False
                _forget_unlisted(ctx, listed, streams)
                listed = set()
                if gate is not None:
                    # Every listed object is indexed (above, in this task): the gate may open.
                    ctx.operator.indexing.release(gate)
                if not started:
                    started = True
                    task_status.started()
                continue
            event: RawEvent = item  # type: ignore[assignment]
            if tally is not None:
                try:
                    tally[event["type"]] += 1
                except KeyError:  # not from a watch stream (e.g. a test feeding the router)
                    tally[event["type"]] = 1
            key = object_key(event["object"])
            if share is not None and not share.admit(key, event):
                continue  # another replica's object (sharding): not even indexed here
            if event["type"] is None:
                listed.add(key)
            elif (
                selection is not None
                and event["type"] == "DELETED"
                and is_departure(ctx, event["object"])
            ):
                # Left the selection holding our finalizer (see departures.py). The event goes
                # on as a deletion (the object's memory, daemons, index values go); the release
                # runs beside the workers, so routing does not wait for its requests.
                workers.start_soon(
                    release_departed,
                    ctx,
                    selection,
                    event["object"],
                    name=f"release of a departed {ctx.resource} {key}",
                )
            if relays:
                await relay(ctx, relays, event)
                if relayed_only:
                    continue  # a child resource only: no workers for its objects
            if reconciler is not None:
                observe(ctx, reconciler, key, event)
            if indexed:
                memory = ctx.memories.recall(
                    key, noticed_by_listing=listing and event["type"] is None
                )
                try:
                    await index_object(ctx, key, event, memory)
                except Exception as exc:
                    # Not an indexer's error (those are handled per their options): ours, e.g. a
                    # failing filter callback. Logged; never fatal to the whole watcher.
                    ObjectLogger(event["object"]).exception(f"Indexing failed: {exc!r}")
            mailbox = streams.get(key)
            if (mailbox is None or mailbox.would_grow()) and event["type"] is not None:
                # Backpressure: the stream is not read further until workers take some. Not
                # for listings (initial, or after a 410), whose pages could expire meanwhile;
                # nor while the indexing gate is closed: the workers could take nothing until
                # the listings open it.
                if ctx.operator.indexing.ready:
                    await ctx.backlog.wait_for_room(ctx.settings.queueing.max_pending)
                mailbox = streams.get(key)  # its worker may have retired meanwhile
            if mailbox is None:
                memory = ctx.memories.recall(
                    key, noticed_by_listing=listing and event["type"] is None
                )
                keep_all = ctx.registry.has_watching_handlers(ctx.resource)
                mailbox = Mailbox(ctx.backlog, keep_all=keep_all)
                streams[key] = mailbox
                _Worker(ctx, key, mailbox, memory, streams, workers, idle).start()
            elif mailbox.revive is not None:
                if mailbox.echo is not None and _absorbed(ctx, key, mailbox, event):
                    continue  # the parked worker's own echo: nothing for it to do
                IdleWorkers.unpark(mailbox)  # its parked worker wakes up for this event
            mailbox.put(event)


class _Worker:
    """How the router starts, parks, revives and retires the worker of one object."""

    __slots__ = ("ctx", "idle", "key", "mailbox", "memory", "nursery", "streams")

    def __init__(
        self,
        ctx: ResourceContext,
        key: str,
        mailbox: Mailbox,
        memory: ObjectMemory,
        streams: dict[str, Mailbox],
        nursery: trio.Nursery,
        idle: IdleWorkers | None,
    ) -> None:
        self.ctx = ctx
        self.key = key
        self.mailbox = mailbox
        self.memory = memory
        self.streams = streams
        self.nursery = nursery
        self.idle = idle

    def start(self) -> None:
        self.nursery.start_soon(
            run_worker,
            self.ctx,
            self.key,
            self.mailbox,
            self.memory,
            self.retire,
            self.discard,
            self.park if self.idle is not None else None,
            name=f"worker {self.ctx.resource} {self.key}",
        )

    def retire(self) -> bool:
        # No checkpoint between the check and the removal: the router cannot interleave.
        mailbox = self.mailbox
        if len(mailbox):
            return False
        if self.streams.get(self.key) is mailbox:
            del self.streams[self.key]
        mailbox.close()
        return True

    def discard(self) -> None:
        # Only our own mailbox: after a retirement, the key may already have a new worker.
        if self.streams.get(self.key) is self.mailbox:
            del self.streams[self.key]
        self.mailbox.discard()

    def park(self) -> bool:
        # As for a retirement: no checkpoint between the check and the parking.
        mailbox = self.mailbox
        if self.idle is None or len(mailbox) or mailbox.closed:
            return False
        if self.streams.get(self.key) is not mailbox:
            return False
        timeout = self.ctx.settings.queueing.idle_timeout
        slack = min(RETIREMENT_SLACK, timeout / 10)
        self.idle.park(mailbox, trio.current_time() + timeout, self.start, self.retire, slack=slack)
        return True


def _absorbed(ctx: ResourceContext, key: str, mailbox: Mailbox, event: RawEvent) -> bool:
    """Take the echo of a parked worker's own settling write without reviving the worker.

    The worker parked right after that write instead of waiting for its echo in its task (see
    ``Mailbox.echo``); here the echo is taken as the waiting worker would have taken it: its
    version is seen (the object is consistent again), and the cycle it would run is known to
    find the essence it has just handled: the same line is logged, nothing else is done.
    """
    memory = ctx.memories.recall(key)
    if not mailbox.absorbs(event, memory.superseded_versions):
        return False
    if mailbox.echo is None:  # the settling write's own echo (not an earlier write's)
        memory.expected_version = None
        memory.superseded_versions = ()
        memory.settled_version = None
        if _OBJECTS_LOGGER.isEnabledFor(logging.DEBUG):
            log_noop(ObjectLogger(event["object"]))
    return True


def _ignore_wake(key: str) -> None:
    """A reconciler's wake-up once its watcher no longer starts workers."""


def _wake_for_reconcile(
    ctx: ResourceContext,
    streams: dict[str, Mailbox],
    workers: trio.Nursery,
    idle: IdleWorkers,
    key: str,
) -> None:
    """Make sure the worker of ``key`` runs, for a reconcile request (see reconciling.py):
    a new one if it has retired, a parked one revived, an idle one woken up. A busy worker
    gets to the request when it is done with what it does."""
    if ctx.is_stopping or ctx.operator.pause.is_paused():
        return  # paused: the stream lists every object again on resuming, requesting them all
    mailbox = streams.get(key)
    if mailbox is None:
        memory = ctx.memories.recall(key)
        keep_all = ctx.registry.has_watching_handlers(ctx.resource)
        mailbox = Mailbox(ctx.backlog, keep_all=keep_all)
        streams[key] = mailbox
        _Worker(ctx, key, mailbox, memory, streams, workers, idle).start()
    elif mailbox.revive is not None:
        IdleWorkers.unpark(mailbox)
    elif mailbox.idling:
        mailbox.wake()


def _forget_unlisted(
    ctx: ResourceContext,
    listed: set[str],
    streams: dict[str, Mailbox],
) -> None:
    """After a listing, drop what is known of objects that were not in it.

    They were deleted while the watch-stream was down (e.g. before a 410 re-listing), so their
    DELETED events never came: their index values go, their daemons stop.
    """
    if ctx.reconciler is not None:
        for key in [key for key in ctx.reconciler.bodies if key not in listed]:
            ctx.reconciler.forget(key)
    for key in ctx.memories:
        if key in listed:
            continue
        memory = ctx.memories.get(key)
        if memory is None:
            continue
        ctx.operator.indexers.discard_all(key)
        if ctx.daemons is not None and memory.daemons.running:
            ctx.daemons.stop_all(
                memory.daemons.running.values(), DaemonStoppingReason.RESOURCE_DELETED
            )
        if key not in streams:
            ctx.memories.forget(key)
