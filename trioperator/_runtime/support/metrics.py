"""Prometheus metrics of one operator: what is counted where, and the endpoint serving them.

Every operator has its own :class:`OperatorMetrics` with its own ``CollectorRegistry`` (never
prometheus_client's global one), so several operators in one process -- and tests -- keep their
numbers apart. The names, types and labels are documented in ``docs/metrics.md``.

Two kinds of numbers, chosen by how often they change:

* Things that happen (handler runs, API requests, admission reviews) are counted where they
  happen, in prometheus_client's counters and histograms. The label children are looked up once
  per label combination and cached here: on the hot path an observation costs a dict lookup and
  the child's own update, never a label validation.
* States (objects in memory, workers, queued events, daemons, the pause) are read from the
  runtime's own structures when the endpoint is scraped, by :class:`_StateCollector`; the hot
  path does nothing for them. The counters of the watch streams (events, reconnects, listings)
  are plain integers kept by the watchers and read at scrape time too: an event costs one
  integer addition.

Watchers come and go with namespaces and CRDs; their counters are carried over into per-resource
totals when they end, so the counters of a resource never go backwards.

prometheus_client is imported only when the metrics are read (:meth:`OperatorMetrics.render`,
the endpoint, :attr:`OperatorMetrics.registry`): it brings ~60 modules (an HTTP server, email,
urllib.request, ...) that an operator whose metrics nobody scrapes would carry all its life.
Until then, and after, the counters and histograms are this module's own (:class:`_Counter`,
:class:`_Histogram`), exported with the very samples prometheus_client's would have.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Collection, Iterable, Mapping, Sequence, Sized
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Protocol

import trio

from trioperator._client.resources import Resource
from trioperator._client.watching import WatchHealth, WatchItem
from trioperator._engine.errors import HandlerTimeoutError
from trioperator._engine.handlers import DaemonHandler, SpawningHandler
from trioperator._engine.progression import HandlerOutcome
from trioperator._engine.settings import ServingSettings
from trioperator._runtime.support.gates import OperatorPause
from trioperator._runtime.support.httpserver import Request, Response, for_queries, serve_http
from trioperator._util.endpoints import parse_endpoint

if TYPE_CHECKING:
    # At run time, imported when the metrics are first read (see the module's docstring).
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import GaugeMetricFamily, Metric

__all__ = [
    "API_BUCKETS",
    "HANDLER_BUCKETS",
    "NO_RESOURCE",
    "OperatorMetrics",
    "WatchCounts",
    "metrics_response",
    "render",
    "serve_metrics",
]

logger = logging.getLogger("trioperator.metrics")

HANDLER_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
"""Seconds: handlers range from a dict update to minutes of talking to other systems."""

API_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
"""Seconds: API requests take milliseconds normally; the tail shows a struggling server."""

NO_RESOURCE: Final = ""
"""The ``resource`` label of handlers that serve no resource (activities: startup, probes...)."""

EVENT_TYPES: Final = ("ADDED", "MODIFIED", "DELETED")
LISTED: Final = "LISTED"
"""The ``type`` label of objects that came in a listing rather than as a watch event."""


class ShardState(Protocol):
    """What the metrics read of a sharded replica's place in its ring (its ``Shard``)."""

    @property
    def fenced(self) -> bool: ...

    @property
    def settled(self) -> bool: ...

    @property
    def members(self) -> frozenset[str]: ...


class OperatorState(Protocol):
    """What the metrics read of the running operator (its ``OperatorContext``)."""

    @property
    def pause(self) -> OperatorPause: ...

    @property
    def shard(self) -> ShardState | None: ...


class SpawnedState(Protocol):
    """What the metrics read of a running daemon or timer."""

    @property
    def handler(self) -> SpawningHandler: ...


class DaemonsState(Protocol):
    """What the metrics read of a watcher's daemons and timers (its ``DaemonsKeeper``)."""

    def running(self) -> Collection[SpawnedState]: ...


class WatcherState(Protocol):
    """What the metrics read of a running watcher (its ``ResourceContext``), when scraped.

    The contexts hold the metrics, so the metrics know the contexts by these protocols only.
    """

    @property
    def resource(self) -> Resource: ...
    @property
    def health(self) -> WatchHealth: ...
    @property
    def memories(self) -> Sized: ...
    @property
    def streams(self) -> Mapping[str, Sized]: ...
    @property
    def workers_busy(self) -> int: ...
    @property
    def incoming(self) -> trio.MemoryReceiveChannel[WatchItem] | None: ...
    @property
    def daemons(self) -> DaemonsState | None: ...


@dataclasses.dataclass(eq=False)
class WatchCounts:
    """The counters of the watch streams of one resource, over all its namespaces.

    ``events`` is written by the watchers' routers (one addition per event); ``reconnects``
    and ``listings`` hold what the watchers that have ended counted (the running ones keep
    theirs in their ``WatchHealth`` until they end).
    """

    events: dict[str | None, int] = dataclasses.field(
        default_factory=lambda: dict.fromkeys((None, *EVENT_TYPES), 0)
    )
    reconnects: int = 0
    listings: int = 0


class OperatorMetrics:
    """The metrics of one operator; read them with :meth:`render` or the metrics endpoint."""

    def __init__(self) -> None:
        self._registry: CollectorRegistry | None = None
        self.context: OperatorState | None = None
        """The running operator's shared state (its pause), once it runs."""
        self._watchers: dict[int, WatcherState] = {}
        self._watch_counts: dict[Resource, WatchCounts] = {}

        self._handler_runs = _Counter(
            "trioperator_handler_runs",
            "Handler runs by handler id, resource and outcome (success/failure/retry/timeout).",
            ("handler", "resource", "outcome"),
        )
        self._handler_errors = _Counter(
            "trioperator_handler_errors",
            "Handler runs that raised an error (ignored, temporary or permanent).",
            ("handler", "resource"),
        )
        self._handler_retries = _Counter(
            "trioperator_handler_retries",
            "Handler runs that were retries of an earlier failed or unfinished run.",
            ("handler", "resource"),
        )
        self._handler_durations = _Histogram(
            "trioperator_handler_duration_seconds",
            "How long handler runs took (daemons: their whole run).",
            ("handler",),
            HANDLER_BUCKETS,
        )
        self._api_requests = _Counter(
            "trioperator_api_requests",
            "Requests to the Kubernetes API by verb and HTTP status code (error: no response).",
            ("verb", "code"),
        )
        self._api_durations = _Histogram(
            "trioperator_api_request_duration_seconds",
            "Latency of requests to the Kubernetes API (watches: until the stream is open).",
            ("verb",),
            API_BUCKETS,
        )
        self._reviews = _Counter(
            "trioperator_admission_reviews",
            "Admission reviews answered, by webhook (handler id) and result (allowed/denied).",
            ("webhook", "result"),
        )
        self._families: tuple[_Counter | _Histogram, ...] = (
            self._handler_runs,
            self._handler_errors,
            self._handler_retries,
            self._handler_durations,
            self._api_requests,
            self._api_durations,
            self._reviews,
        )

        # Label children by their label values: looked up once, then reused.
        self._run_children: dict[tuple[str, Resource | None, str], Any] = {}
        self._error_children: dict[tuple[str, Resource | None], Any] = {}
        self._retry_children: dict[tuple[str, Resource | None], Any] = {}
        self._duration_children: dict[str, Any] = {}
        self._request_children: dict[tuple[str, int | None], tuple[Any, Any]] = {}
        self._review_children: dict[tuple[str, bool], Any] = {}

    @property
    def registry(self) -> CollectorRegistry:
        """This operator's own registry of prometheus_client (made when first asked for)."""
        if self._registry is None:
            from prometheus_client import CollectorRegistry, ProcessCollector

            registry = CollectorRegistry()
            registry.register(_FamiliesCollector(self._families))
            registry.register(_StateCollector(self))
            # The process's CPU, memory and file descriptors (from /proc, read when scraped):
            # what a deployment's resources are sized by. Nothing on systems without /proc.
            ProcessCollector(registry=registry)
            self._registry = registry
        return self._registry

    def render(self) -> bytes:
        """The metrics in Prometheus' text exposition format."""
        return render(self.registry)

    # ------------------------------------------------------------------ observations

    def handler_ran(
        self,
        handler_id: str,
        resource: Resource | None,
        outcome: HandlerOutcome,
        seconds: float,
        *,
        retry: bool,
    ) -> None:
        """One run of a handler has ended with ``outcome`` after ``seconds``."""
        exception = outcome.exception
        if isinstance(exception, HandlerTimeoutError):
            verdict = "timeout"
        elif not outcome.final:
            verdict = "retry"
        elif exception is not None:
            verdict = "failure"
        else:
            verdict = "success"
        key = (handler_id, resource, verdict)
        child = self._run_children.get(key)
        if child is None:
            child = self._handler_runs.labels(handler_id, _resource_label(resource), verdict)
            self._run_children[key] = child
        child.inc()
        duration = self._duration_children.get(handler_id)
        if duration is None:
            duration = self._handler_durations.labels(handler_id)
            self._duration_children[handler_id] = duration
        duration.observe(seconds)
        if exception is not None or outcome.ignored_error is not None:
            self._count(self._error_children, self._handler_errors, handler_id, resource)
        if retry:
            self._count(self._retry_children, self._handler_retries, handler_id, resource)

    def request_done(self, verb: str, code: int | None, seconds: float) -> None:
        """A request to the API has been answered with ``code`` (``None``: no answer)."""
        key = (verb, code)
        children = self._request_children.get(key)
        if children is None:
            label = "error" if code is None else str(code)
            children = (self._api_requests.labels(verb, label), self._api_durations.labels(verb))
            self._request_children[key] = children
        children[0].inc()
        children[1].observe(seconds)

    def review_done(self, webhook: str, allowed: bool) -> None:
        """An admission review has been answered."""
        key = (webhook, allowed)
        child = self._review_children.get(key)
        if child is None:
            child = self._reviews.labels(webhook, "allowed" if allowed else "denied")
            self._review_children[key] = child
        child.inc()

    @staticmethod
    def _count(
        children: dict[tuple[str, Resource | None], Any],
        counter: _Counter,
        handler_id: str,
        resource: Resource | None,
    ) -> None:
        key = (handler_id, resource)
        child = children.get(key)
        if child is None:
            child = children[key] = counter.labels(handler_id, _resource_label(resource))
        child.inc()

    # ------------------------------------------------------------------ watchers

    def watcher_started(self, ctx: WatcherState) -> WatchCounts:
        """Register a running watcher; return the counters its router adds its events to."""
        self._watchers[id(ctx)] = ctx
        counts = self._watch_counts.get(ctx.resource)
        if counts is None:
            counts = self._watch_counts[ctx.resource] = WatchCounts()
        return counts

    def watcher_ended(self, ctx: WatcherState) -> None:
        """Carry the ended watcher's counters over into its resource's totals."""
        if self._watchers.pop(id(ctx), None) is None:
            return
        counts = self._watch_counts[ctx.resource]
        counts.reconnects += ctx.health.reconnects
        counts.listings += ctx.health.listings

    def collect_state(self) -> Iterable[Metric]:
        """The metrics read from the running operator's state (when the metrics are scraped)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        labels = ["resource"]
        watchers = GaugeMetricFamily(
            "trioperator_watchers", "Watchers running (one per served namespace).", labels=labels
        )
        objects = GaugeMetricFamily(
            "trioperator_objects", "Objects of the resource held in memory.", labels=labels
        )
        workers = GaugeMetricFamily(
            "trioperator_workers",
            "Per-object workers alive (one per object with recent work).",
            labels=labels,
        )
        busy = GaugeMetricFamily(
            "trioperator_workers_busy",
            "Workers processing their object now (not waiting for events or delays).",
            labels=labels,
        )
        queued = GaugeMetricFamily(
            "trioperator_queue_depth",
            "Watch events received and not yet taken by a worker.",
            labels=labels,
        )
        daemons = GaugeMetricFamily(
            "trioperator_daemons_running",
            "Daemons and timers running, by kind (daemon/timer).",
            labels=["resource", "kind"],
        )
        events = CounterMetricFamily(
            "trioperator_watch_events",
            "Objects received from the watch streams, by type (LISTED: from a listing).",
            labels=["resource", "type"],
        )
        reconnects = CounterMetricFamily(
            "trioperator_watch_reconnects",
            "Watch streams re-established (server timeouts, dropped connections, 410s).",
            labels=labels,
        )
        listings = CounterMetricFamily(
            "trioperator_watch_listings",
            "Complete listings of a resource (at start, after a pause, after a 410).",
            labels=labels,
        )

        by_resource: dict[Resource, list[WatcherState]] = {}
        for ctx in self._watchers.values():
            by_resource.setdefault(ctx.resource, []).append(ctx)
        for resource in sorted(self._watch_counts, key=str):
            label = str(resource)
            live = by_resource.get(resource, [])
            counts = self._watch_counts[resource]
            watchers.add_metric([label], len(live))
            objects.add_metric([label], sum(len(ctx.memories) for ctx in live))
            workers.add_metric([label], sum(len(ctx.streams) for ctx in live))
            busy.add_metric([label], sum(ctx.workers_busy for ctx in live))
            queued.add_metric([label], sum(_queued(ctx) for ctx in live))
            running = {"daemon": 0, "timer": 0}
            for ctx in live:
                if ctx.daemons is not None:
                    for daemon in ctx.daemons.running():
                        kind = "daemon" if isinstance(daemon.handler, DaemonHandler) else "timer"
                        running[kind] += 1
            for kind, count in running.items():
                daemons.add_metric([label, kind], count)
            for event_type, count in counts.events.items():
                events.add_metric([label, event_type or LISTED], count)
            reconnects.add_metric(
                [label], counts.reconnects + sum(ctx.health.reconnects for ctx in live)
            )
            listings.add_metric([label], counts.listings + sum(ctx.health.listings for ctx in live))

        paused = GaugeMetricFamily(
            "trioperator_paused",
            "1 while the operator is paused by peering (a peer with a higher priority is alive).",
        )
        context = self.context
        paused.add_metric([], 1 if context is not None and context.pause.is_paused() else 0)
        families = (watchers, objects, workers, busy, queued, daemons)
        sharding = _shard_families(context.shard if context is not None else None)
        return [*families, events, reconnects, listings, paused, *sharding]


class _StateCollector:
    """Reads the states of the running operator when the metrics are scraped."""

    def __init__(self, metrics: OperatorMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self._metrics.collect_state()


def _resource_label(resource: Resource | None) -> str:
    return NO_RESOURCE if resource is None else str(resource)


def _queued(ctx: WatcherState) -> int:
    total = 0
    if ctx.incoming is not None:
        total += ctx.incoming.statistics().current_buffer_used
    for mailbox in ctx.streams.values():
        total += len(mailbox)
    return total


def render(registry: CollectorRegistry) -> bytes:
    """The metrics of ``registry`` in Prometheus' text exposition format."""
    from prometheus_client import generate_latest

    return generate_latest(registry)


# ------------------------------------------------------------------- counters and histograms


class _Counter:
    """A labelled counter: what ``prometheus_client.Counter`` counts, without importing it."""

    __slots__ = ("_children", "documentation", "labelnames", "name")
    kind: Final = "counter"

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], _CounterChild] = {}

    def labels(self, *values: str) -> _CounterChild:
        key = tuple(str(value) for value in values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = _CounterChild()
        return child

    def samples(self, created: bool) -> Iterable[tuple[str, dict[str, str], float]]:
        for values, child in list(self._children.items()):
            labels = dict(zip(self.labelnames, values, strict=True))
            yield f"{self.name}_total", labels, child.value
            if created:
                yield f"{self.name}_created", labels, child.created


class _CounterChild:
    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()  # as prometheus_client's: when the labels were first used

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class _Histogram:
    """A labelled histogram, as ``prometheus_client.Histogram`` without importing it."""

    __slots__ = ("_children", "bounds", "documentation", "labelnames", "name")
    kind: Final = "histogram"

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = (*(float(bound) for bound in buckets), math.inf)
        self._children: dict[tuple[str, ...], _HistogramChild] = {}

    def labels(self, *values: str) -> _HistogramChild:
        key = tuple(str(value) for value in values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = _HistogramChild(self.bounds)
        return child

    def samples(self, created: bool) -> Iterable[tuple[str, dict[str, str], float]]:
        from prometheus_client.utils import floatToGoString

        les = [str(floatToGoString(bound)) for bound in self.bounds]  # type: ignore[no-untyped-call]
        for values, child in list(self._children.items()):
            labels = dict(zip(self.labelnames, values, strict=True))
            total = 0.0
            for le, count in zip(les, child.counts, strict=True):
                total += count
                yield f"{self.name}_bucket", {**labels, "le": le}, total
            yield f"{self.name}_count", labels, total
            yield f"{self.name}_sum", labels, child.sum
            if created:
                yield f"{self.name}_created", labels, child.created


class _HistogramChild:
    __slots__ = ("bounds", "counts", "created", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0.0] * len(bounds)  # per bucket, not cumulative (as prometheus_client)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        self.sum += amount
        for index, bound in enumerate(self.bounds):
            if amount <= bound:
                self.counts[index] += 1.0
                break


class _FamiliesCollector:
    """Exports the counters and histograms to prometheus_client when the metrics are read."""

    def __init__(self, families: Sequence[_Counter | _Histogram]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        from prometheus_client.core import Metric

        created = _created_series_exported()
        collected = []
        for family in self._families:
            metric = Metric(family.name, family.documentation, family.kind)
            for name, labels, value in family.samples(created):
                metric.add_sample(name, labels, value)
            collected.append(metric)
        return collected


def _created_series_exported() -> bool:
    """Whether prometheus_client exports the ``_created`` series now.

    Its switch (``PROMETHEUS_DISABLE_CREATED_SERIES``, ``disable_created_metrics()``) has no
    public getter, so it is read from what the library does: a counter of its own, registered
    nowhere, collected once per scrape (which is rare, and does much more than this).
    """
    from prometheus_client import Counter

    probe = Counter("trioperator_probe", "Whether _created series are exported.", registry=None)
    return any(
        sample.name.endswith("_created") for metric in probe.collect() for sample in metric.samples
    )


# ----------------------------------------------------------------------------------- serving


async def serve_metrics(
    *,
    endpoint: str,
    metrics: OperatorMetrics,
    limits: ServingSettings,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the metrics at ``endpoint`` (``http://host:port/path``) until cancelled.

    ``task_status.started()`` gets the bound port (port ``0``: any free port, e.g. in tests).
    """
    host, port, path = parse_endpoint(endpoint, what="metrics")
    handle = partial(_handle, path, metrics)
    async with trio.open_nursery() as nursery:
        serve = partial(serve_http, handle, host=host, port=port, limits=for_queries(limits))
        listeners = await nursery.start(serve)
        bound: int = listeners[0].socket.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        logger.info(f"Serving the metrics at http://{shown}:{bound}{path}")
        task_status.started(bound)


async def _handle(path: str, metrics: OperatorMetrics, request: Request) -> Response:
    if request.path != path:
        return Response(404, b"Not found\n", content_type="text/plain")
    return metrics_response(metrics, request)


def metrics_response(metrics: OperatorMetrics, request: Request) -> Response:
    """The answer to a scrape (a ``GET`` of the metrics' path)."""
    if request.method not in ("GET", "HEAD"):
        return Response(
            405, b"Method not allowed\n", headers={"allow": "GET"}, content_type="text/plain"
        )
    from prometheus_client.exposition import choose_encoder

    # As prometheus_client's own servers do: OpenMetrics or a newer text format if asked for.
    encode, content_type = choose_encoder(request.headers.get("accept", ""))
    body = b"" if request.method == "HEAD" else encode(metrics.registry)
    return Response(200, body, content_type=content_type)


def _shard_families(shard: ShardState | None) -> list[GaugeMetricFamily]:
    """The ring as this replica sees it (only when sharded: docs/sharding.md)."""
    if shard is None:
        return []
    from prometheus_client.core import GaugeMetricFamily

    members = GaugeMetricFamily(
        "trioperator_shard_members", "The members of the ring with live Leases, as seen here."
    )
    members.add_metric([], len(shard.members))
    fenced = GaugeMetricFamily(
        "trioperator_shard_fenced",
        "1 while this replica is fenced (its Lease not renewed in time): it works on nothing.",
    )
    fenced.add_metric([], 1 if shard.fenced else 0)
    settled = GaugeMetricFamily(
        "trioperator_shard_settled",
        "1 while this replica serves its share of the membership it sees (0: a hand-over is in "
        "progress, or fenced).",
    )
    settled.add_metric([], 1 if shard.settled else 0)
    return [members, fenced, settled]
