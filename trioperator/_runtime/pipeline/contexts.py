"""What the tasks serving one resource share: the API, handlers, settings and memories."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any

import trio

from trioperator._client.api import APIClient
from trioperator._client.resources import Resource
from trioperator._client.settings import WatchSelector
from trioperator._client.watching import WatchHealth, WatchItem, stream_events
from trioperator._engine.handlers import IndexingHandler
from trioperator._engine.indexing import Index, Indexers
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.coordination.sharding import Shard
from trioperator._runtime.objects.daemon_keeper import DaemonsKeeper
from trioperator._runtime.objects.mailboxes import Backlog, Mailbox, QueueStats
from trioperator._runtime.objects.memories import Memories
from trioperator._runtime.objects.reconcile_state import ReconcileHub, Reconciler
from trioperator._runtime.support.gates import IndexingReadiness, OperatorPause
from trioperator._runtime.support.metrics import OperatorMetrics
from trioperator._runtime.support.waiting import wait_any
from trioperator._util import clock
from trioperator._util.ordering import OrderedSlots


@dataclasses.dataclass
class OperatorContext:
    """Shared by every task of one running operator."""

    api: APIClient
    registry: OperatorRegistry
    settings: OperatorSettings
    memo: Any
    thread_limiter: trio.CapacityLimiter
    stopping: trio.Event = dataclasses.field(default_factory=trio.Event)
    """Set when a graceful stop begins: stop taking new work, finish what is running."""

    indexers: Indexers = dataclasses.field(default_factory=Indexers)
    """The in-memory indices of all ``@index`` handlers (written only by the watchers)."""

    indexing: IndexingReadiness = dataclasses.field(default_factory=IndexingReadiness)
    """Open once every indexed resource is listed and indexed: resource handlers wait for it."""

    pause: OperatorPause = dataclasses.field(default_factory=OperatorPause)
    """While paused (peering: another operator outranks this one), watchers do not stream."""

    metrics: OperatorMetrics | None = None
    """Where handler runs and watch events are counted (``None``: not counted)."""
    queueing: QueueStats = dataclasses.field(default_factory=QueueStats)
    """What the watchers' per-object mailboxes hold, all watchers together (see mailboxes.py)."""
    shard: Shard | None = None
    """This replica's share of the objects when sharded (see sharding.py); ``None``: all."""
    reconcilers: ReconcileHub = dataclasses.field(default_factory=ReconcileHub)
    """The running reconcilers (``on.reconcile``), for the watchers of children to enqueue
    their owners (see reconciling.py)."""

    def __post_init__(self) -> None:
        # Every declared index exists from the start, empty, so handlers can rely on it.
        self.indexers.ensure(handler.id for handler in self.registry.get_handlers(IndexingHandler))

    @property
    def indices(self) -> Mapping[str, Index[Any, Any]]:
        """The read-only indices by handler id, for handler kwargs (activities and probes too)."""
        return self.indexers.indices

    def now(self) -> datetime.datetime:
        """Wall-clock "now" derived from trio's clock, so a mock clock governs it in tests."""
        return clock.now()


@dataclasses.dataclass
class ResourceContext:
    """Shared by the watcher of one (resource, namespace) and its workers."""

    operator: OperatorContext
    resource: Resource
    namespace: str | None
    memories: Memories
    worker_slots: OrderedSlots | None = None
    """``settings.queueing.worker_limit`` places, given to the oldest work first."""
    health: WatchHealth = dataclasses.field(default_factory=WatchHealth)
    """The watcher's signs of life, for the liveness probe."""
    daemons: DaemonsKeeper | None = None
    """The daemons and timers of this watcher's objects; set by the watcher while it runs."""
    stopping: trio.Event = dataclasses.field(default_factory=trio.Event)
    """Set to stop this watcher alone, gracefully (as the operator's ``stopping`` does for all):
    e.g. when its namespace goes away."""
    streams: dict[str, Mailbox] = dataclasses.field(default_factory=dict)
    """The mailboxes of the running workers by object key (the watcher's routing table)."""
    incoming: trio.MemoryReceiveChannel[WatchItem] | None = None
    """The watch stream's buffer, read by the router (for the queue depth in the metrics)."""
    reconciler: Reconciler | None = None
    """Reconcile requests and bodies of this watcher's objects, if the resource has
    ``on.reconcile`` handlers (set by the watcher while it runs)."""
    selection: WatchSelector | None = None
    """The server-side selectors of this watcher's listings and watches (set by the watcher
    when it starts; see _engine/watch_selection.py)."""
    workers_busy: int = 0
    """Workers processing their object now, not waiting for events or delays (metrics)."""
    backlog: Backlog = dataclasses.field(init=False)
    """The events queued for this watcher's workers, bounded by ``queueing.max_pending``."""

    def __post_init__(self) -> None:
        self.backlog = Backlog(self.operator.queueing)

    @property
    def is_stopping(self) -> bool:
        return self.stopping.is_set() or self.operator.stopping.is_set()

    async def wait_stopping(self) -> None:
        """Return when this watcher is to stop (alone, or with the whole operator)."""
        await wait_any(self.stopping, self.operator.stopping)

    @property
    def api(self) -> APIClient:
        return self.operator.api

    @property
    def registry(self) -> OperatorRegistry:
        return self.operator.registry

    @property
    def settings(self) -> OperatorSettings:
        return self.operator.settings

    def stream(
        self,
        send: trio.MemorySendChannel[WatchItem],
        *,
        labels: str | None,
        health: WatchHealth | None = None,
    ) -> Callable[[], Awaitable[None]]:
        """The list-and-watch of this watcher's resource and namespace into ``send``, with
        ``labels`` as the label selector and the selection's fields (to start in a nursery)."""
        return partial(
            stream_events,
            self.api,
            self.resource,
            self.namespace,
            settings=self.settings.watching,
            send=send,
            health=health,
            label_selector=labels,
            field_selector=self.selection.fields if self.selection is not None else None,
        )
