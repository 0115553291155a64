"""All operator settings, with Kopf's group and field names and defaults.

Users change them in ``@on.startup`` handlers (``settings.watching.server_timeout = 600``) or
pass an ``OperatorSettings`` when embedding. Every group is a plain mutable dataclass.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import warnings
from typing import Any, Literal, TypeGuard

from trioperator._client.settings import NetworkingSettings, WatchingSettings
from trioperator._engine.diffbase import DiffBaseStorage
from trioperator._engine.flavors import FlavorSetting, check_flavor_setting
from trioperator._engine.progress import ProgressStorage

__all__ = [
    "AdmissionSettings",
    "BackgroundSettings",
    "ExecutionSettings",
    "NetworkingSettings",
    "OperatorSettings",
    "PeeringSettings",
    "PersistenceSettings",
    "PostingSettings",
    "ProcessSettings",
    "QueueingSettings",
    "ReconcilingSettings",
    "ScanningSettings",
    "ServingSettings",
    "ShardingSettings",
    "WatchingSettings",
]


def _is_positive_integer(value: object) -> TypeGuard[int]:
    """A whole number from 1 up (a bool is an int to Python, but not a count)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@dataclasses.dataclass
class ProcessSettings:
    """The operator process as a whole."""

    ultimate_exiting_timeout: float | None = 10 * 60
    """After a stop is requested, the process is forcibly ended if it has not exited by then."""

    memory_trim_interval: float | None = 5 * 60
    """Seconds between handing free memory back to the system (glibc's ``malloc_trim``); None
    or 0: never. Without it, memory freed inside the C allocator's heap stays in the RSS."""


@dataclasses.dataclass
class PostingSettings:
    """Kubernetes Events about the handled objects."""

    enabled: bool = True
    """Post the explicitly requested k8s events (``trioperator.event/info/warn/exception``)."""

    loggers: bool = False
    """Also post per-object log records as k8s events (off by default, as in Kopf 1.44+)."""

    level: int = logging.INFO
    """The minimal level of what is posted."""

    reporting_component: str = "kopf"
    """The ``reportingComponent`` (and ``source.component``) of the posted events."""

    reporting_instance: str = "dev"
    """The ``reportingInstance`` of the posted events."""

    event_name_prefix: str = "kopf-event-"
    """The ``generateName`` of the posted events: the server appends a random suffix."""

    aggregation_window: float = 600.0
    """Beyond Kopf: an Event that repeats one posted less than this many seconds before (the
    same object, type, reason and message) is not posted anew: the existing Event's ``count``
    and ``lastTimestamp`` are patched, as ``kubectl describe`` shows them (``x5 over 10m``).
    The window restarts with every repeat. 0 posts every Event as a new object, as Kopf does."""

    aggregation_size: int = 4096
    """The most distinct Events remembered for counting their repeats (the least recently
    repeated are forgotten first: a repeat of one of those is posted anew)."""

    def __setattr__(self, name: str, value: object) -> None:
        if name == "aggregation_window" and not (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and value >= 0
        ):
            raise ValueError("aggregation_window must be a number of seconds, 0 or more.")
        if name == "aggregation_size" and not _is_positive_integer(value):
            raise ValueError("aggregation_size must be a positive integer.")
        super().__setattr__(name, value)


@dataclasses.dataclass
class PeeringSettings:
    """Pausing while an operator with a higher priority serves the same objects (Kopf's
    peering: ``KopfPeering``/``ClusterKopfPeering`` objects, see ``manifests/peering.yaml``)."""

    name: str = "default"
    """The peering object's name (``--peering``)."""

    stealth: bool = False
    """Keep the successful keep-alives out of the debug log."""

    priority: int = 0
    """This operator's priority among its peers (``--priority``): it pauses while a live peer
    with a higher one exists; peers with equal priorities all pause, with a warning."""

    lifetime: int = 60
    """Seconds this operator's peer record stays valid; it is renewed 5 to 10 seconds before."""

    mandatory: bool = False
    """The peering object must exist: the operator stays paused until it does (set by
    ``--peering``). Otherwise a missing ``default`` peering means no peering."""

    standalone: bool = False
    """No peering at all: no keep-alives, never paused by a peer (``--standalone``)."""

    clusterwide: bool = False
    """Peer through a ``ClusterKopfPeering`` rather than a ``KopfPeering`` in each served
    namespace (set from the command line: true when serving the whole cluster)."""

    @property
    def namespaced(self) -> bool:
        return not self.clusterwide

    @namespaced.setter
    def namespaced(self, value: bool) -> None:
        self.clusterwide = not value


@dataclasses.dataclass
class ShardingSettings:
    """Several active replicas sharing the objects (trioperator's own; not in Kopf).

    Off by default: one replica serves everything, as in Kopf. See docs/sharding.md.
    """

    enabled: bool = False
    """Share the objects with the other live replicas of the ring (``--shards auto``)."""

    ring: str = "default"
    """The ring's name: replicas with the same name (and namespace) share the objects."""
    namespace: str | None = None
    """Where the ring's Leases live; ``None``: ``POD_NAMESPACE``, else ``default``."""
    lease_duration: float = 15.0
    """Seconds a member's Lease holds after a renewal; then its objects are taken over."""
    renew_deadline: float = 10.0
    """Seconds after the last successful renewal (as sent) at which a member fences itself:
    it stops working on every object until it renews again. Less than ``lease_duration``."""
    renew_interval: float = 3.0
    """Seconds between renewals (and between retries of a failed one)."""
    takeover_margin: float = 5.0
    """Seconds beyond a silent member's lease duration before its objects are taken over:
    time for its fencing to finish what was running."""
    vnodes: int = 64
    """Virtual nodes per member on the hash ring."""
    mode: Literal["filter", "labels"] = "filter"
    """``filter``: every replica watches every object and drops the others' events itself.
    ``labels``: objects carry their bucket in the label ``trioperator.dev/shard`` (set once, by
    one replica), and each replica watches only its buckets with a server-side selector, so
    the watch traffic divides by the replicas (docs/sharding.md)."""
    buckets: int = 128
    """Labels mode: how many buckets the objects are hashed into; the ring divides the buckets.
    Changing it relabels nothing: keep it the same on every replica and over time."""

    def __setattr__(self, name: str, value: object) -> None:
        # Checked when set, so that a startup handler's typo fails there, not in the watchers.
        if name == "mode" and value not in ("filter", "labels"):
            raise ValueError(f"sharding.mode must be 'filter' or 'labels', not {value!r}.")
        if name == "buckets" and not _is_positive_integer(value):
            raise ValueError(f"sharding.buckets must be a positive integer, not {value!r}.")
        super().__setattr__(name, value)


# Kopf's per-object throttling ramp after unexpected errors; the last value repeats.
DEFAULT_ERROR_DELAYS: tuple[float, ...] = (1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610)


@dataclasses.dataclass
class QueueingSettings:
    """The per-object workers that process a watcher's events."""

    worker_limit: int | None = None
    """At most this many per-object workers per watcher at once; ``None`` is unlimited."""

    idle_timeout: float = 5.0
    """A worker with nothing to do for this long exits (and is re-created on the next event)."""

    max_pending: int = 1000
    """Per watcher, the most event bodies queued for its workers before it stops reading its
    watch-stream until they take some (backpressure). A queue keeps only the newest event of
    each object, or every event for resources with ``on.event`` handlers; listings are never
    held back. The memory of a watcher in an event storm is thus bounded by this many bodies
    (plus what the stream reads ahead and what the workers hold while they process)."""

    exit_timeout: float = 2.0
    """On a watcher's stop, how long its workers may take to drain what is already queued."""

    error_delays: tuple[float, ...] = DEFAULT_ERROR_DELAYS
    """Per-object backoff after unexpected (non-handler) errors in processing."""

    batch_window: float = 0.1
    """Deprecated and inert: consistency tracking on ``resourceVersion`` replaced batching."""

    def __setattr__(self, name: str, value: object) -> None:
        if name == "max_pending" and not _is_positive_integer(value):
            raise ValueError("max_pending must be a positive integer.")
        super().__setattr__(name, value)


@dataclasses.dataclass
class ScanningSettings:
    """Discovering resources and namespaces while the operator runs."""

    disabled: bool = False
    """Do not watch CRDs and namespaces at runtime; serve what exists at startup."""


@dataclasses.dataclass
class AdmissionSettings:
    """Admission webhooks: the server that receives the reviews, and the webhook
    configurations the operator keeps up to date."""

    server: Any = None
    """A webhook server or tunnel (``kopf.WebhookServer`` & co., or any callable that takes the
    operator's ``WebhookFn`` and returns an async iterator of client configs, as in Kopf);
    ``None`` for none (an operator with admission handlers then fails at startup)."""

    managed: str | None = None
    """The name of the webhook configurations to create and keep up to date."""

    namespace_selector: dict[str, Any] | None = None
    """Beyond Kopf: a ``namespaceSelector`` (``matchLabels``/``matchExpressions``) put on every
    managed webhook, e.g. to keep the operator's own or system namespaces out of admission."""

    timeout_seconds: int = 30
    """Beyond Kopf (which hard-codes 30): ``timeoutSeconds`` of every managed webhook (1..30)."""

    def __setattr__(self, name: str, value: object) -> None:
        if name == "timeout_seconds" and not (_is_positive_integer(value) and value <= 30):
            raise ValueError("timeout_seconds must be an integer from 1 to 30 (the API's limits).")
        super().__setattr__(name, value)


@dataclasses.dataclass
class ServingSettings:
    """Beyond Kopf: the bounds of the operator's servers (webhooks, liveness, metrics), which
    face peers it does not trust (``trioperator._runtime.support.httpserver``).

    Timeouts are in seconds; each bounds a whole phase, not a single read, so a peer that sends
    a byte now and then gains nothing. ``None`` disables a timeout or a cap (not advisable for
    servers reachable from the cluster). They are read when a server starts.
    """

    handshake_timeout: float | None = 10.0
    """For the TLS handshake of a new connection."""

    idle_timeout: float | None = 30.0
    """For the first byte of a request: of a new connection's first request, and between
    requests on a kept-alive one. A connection that stays silent longer is closed."""

    header_timeout: float | None = 10.0
    """For a request's whole head (request line and headers), from its first byte."""

    body_timeout: float | None = 30.0
    """For a request's whole body, from the end of its head (waiting for the memory budget
    included). The API server gives a webhook at most 30 seconds for the whole review."""

    send_timeout: float | None = 30.0
    """For writing one response (each part of a streamed one) to a peer that does not read."""

    max_connections: int | None = 100
    """Connections served at once by one listener; more are closed as soon as accepted."""

    max_header_size: int = 64 * 1024
    """Bytes of a request's head (431 beyond)."""

    max_body_size: int = 16 * 1024 * 1024
    """Bytes of one request's body (413 beyond, checked against ``Content-Length`` before
    reading). The API server accepts objects of up to 3 MiB in a request, and a review of an
    update carries the object and the old object: 16 MiB leaves room for both in JSON."""

    max_buffered: int | None = 16 * 1024 * 1024
    """Bytes of request bodies in memory at once, over all connections of one server; a
    request whose body does not fit waits (within ``body_timeout``) for others to finish.
    Decoded, a review takes several times its size: this keeps a burst of large reviews
    within a small pod's memory."""

    def __setattr__(self, name: str, value: object) -> None:
        if value is None and name in _OPTIONAL_SERVING:
            pass
        elif name in _SERVING_SIZES and not _is_positive_integer(value):
            raise ValueError(f"serving.{name} must be a positive integer (bytes or a count).")
        elif name in _SERVING_TIMEOUTS and not (
            isinstance(value, int | float) and not isinstance(value, bool) and value > 0
        ):
            raise ValueError(f"serving.{name} must be a positive number of seconds.")
        super().__setattr__(name, value)


_SERVING_TIMEOUTS = frozenset(
    {"handshake_timeout", "idle_timeout", "header_timeout", "body_timeout", "send_timeout"}
)
_SERVING_SIZES = frozenset({"max_connections", "max_header_size", "max_body_size", "max_buffered"})
_OPTIONAL_SERVING = _SERVING_TIMEOUTS | {"max_connections", "max_buffered"}


@dataclasses.dataclass
class ExecutionSettings:
    """How handlers are run: retries, threads for sync handlers, async flavours."""

    default_backoff: float = 60
    """The retry delay after an arbitrary exception in a handler without its own ``backoff``."""

    max_workers: int | None = None
    """The most sync handlers running in threads at once; ``None`` is trio's default (40)."""

    executor: Any = None
    """Accepted for Kopf compatibility and ignored: sync handlers run in trio's threads."""

    async_flavor: FlavorSetting = "auto"
    """The library async handlers are written for: ``"trio"``, ``"asyncio"`` (run on an asyncio
    loop on top of trio), or ``"auto"``: per handler, from what its module imports (see
    ``trioperator._engine.flavors``). A handler's own ``flavor=`` option wins over this."""

    def __setattr__(self, name: str, value: object) -> None:
        if name == "async_flavor":
            check_flavor_setting(value)
        if name == "max_workers" and value is not None and not _is_positive_integer(value):
            raise ValueError("max_workers must be a positive integer or None.")
        super().__setattr__(name, value)


@dataclasses.dataclass
class BackgroundSettings:
    """Stopping daemons (``@kopf.on.daemon``)."""

    cancellation_polling: float = 60
    """How often a stopping daemon without a cancellation timeout is checked again."""

    instant_exit_timeout: float | None = None
    """How long a stopped daemon is given to exit instantly before the staged stop starts."""

    instant_exit_zero_time_cycles: int = 10
    """How many scheduler passes a stopped daemon is given to exit instantly."""


def _default_progress_storage() -> ProgressStorage:
    from trioperator._engine.progress import SmartProgressStorage

    return SmartProgressStorage()


def _default_diffbase_storage() -> DiffBaseStorage:
    from trioperator._engine.diffbase import AnnotationsDiffBaseStorage

    return AnnotationsDiffBaseStorage()


@dataclasses.dataclass
class PersistenceSettings:
    """The state trioperator keeps on the objects themselves (Kopf's, so that either
    framework can continue where the other stopped)."""

    finalizer: str = "kopf.zalando.org/KopfFinalizerMarker"
    """The finalizer put on objects with deletion handlers (Kopf's, so both frameworks
    recognise it)."""

    progress_storage: ProgressStorage = dataclasses.field(default_factory=_default_progress_storage)
    """Where the handlers' progress (retries, results of finished handlers) is kept: by default
    in annotations, and read from ``status.kopf.progress`` too (Kopf's "smart" storage)."""

    diffbase_storage: DiffBaseStorage = dataclasses.field(default_factory=_default_diffbase_storage)
    """Where the last handled state (the base of the next diff) is kept: by default the
    ``kopf.zalando.org/last-handled-configuration`` annotation."""
    consistency_timeout: float = 5.0
    """How long to wait for our own patch to come back on the stream; 0 disables the wait."""


@dataclasses.dataclass
class ReconcilingSettings:
    """``on.reconcile`` handlers (trioperator's own group, not Kopf's)."""

    observed_generation: bool = False
    """After a successful reconcile run, write ``status.observedGeneration`` (the
    ``metadata.generation`` the run saw), as the Kubernetes API conventions describe."""

    backoff: float = 1.0
    """Seconds before retrying an object whose reconcile failed; doubled per failure in a row."""

    backoff_max: float = 300.0
    """The longest backoff between retries of one object."""


@dataclasses.dataclass
class OperatorSettings:
    """Everything configurable in an operator, grouped as in Kopf."""

    process: ProcessSettings = dataclasses.field(default_factory=ProcessSettings)
    posting: PostingSettings = dataclasses.field(default_factory=PostingSettings)
    peering: PeeringSettings = dataclasses.field(default_factory=PeeringSettings)
    watching: WatchingSettings = dataclasses.field(default_factory=WatchingSettings)
    queueing: QueueingSettings = dataclasses.field(default_factory=QueueingSettings)
    scanning: ScanningSettings = dataclasses.field(default_factory=ScanningSettings)
    admission: AdmissionSettings = dataclasses.field(default_factory=AdmissionSettings)
    execution: ExecutionSettings = dataclasses.field(default_factory=ExecutionSettings)
    background: BackgroundSettings = dataclasses.field(default_factory=BackgroundSettings)
    networking: NetworkingSettings = dataclasses.field(default_factory=NetworkingSettings)
    persistence: PersistenceSettings = dataclasses.field(default_factory=PersistenceSettings)
    sharding: ShardingSettings = dataclasses.field(default_factory=ShardingSettings)
    serving: ServingSettings = dataclasses.field(default_factory=ServingSettings)
    reconciling: ReconcilingSettings = dataclasses.field(default_factory=ReconcilingSettings)

    @property
    def batching(self) -> QueueingSettings:
        """Deprecated name of ``queueing``."""
        warnings.warn(
            "settings.batching is deprecated; use settings.queueing.",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.queueing
