"""The settings groups that the API client itself consumes.

They live here (not in the engine) because the client is a lower layer than the engine;
``trioperator._engine.settings.OperatorSettings`` composes them under Kopf's names.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

# Kopf's defaults: a Fibonacci-ish ramp, 8 retries (so 9 attempts) before escalating.
DEFAULT_ERROR_BACKOFFS: tuple[float, ...] = (1, 1, 2, 3, 5, 8, 13, 21)

DEFAULT_MAX_RESPONSE_SIZE = 64 * 1024 * 1024
"""64 MiB: an object is at most ~1.5 MiB (etcd's default request limit), and a page of a
listing (500 objects, see ``watching.LIST_PAGE_SIZE``) of objects averaging up to 128 KiB fits;
a page that does not fit is asked for again in smaller pages."""


@dataclasses.dataclass
class NetworkingSettings:
    """How requests to the API server are timed and retried."""

    request_timeout: float | None = 5 * 60
    """Total time for one regular (non-watch) request, in seconds."""

    connect_timeout: float | None = None
    """Time to establish a connection; ``None`` means only ``request_timeout`` bounds it."""

    error_backoffs: float | Iterable[float] = DEFAULT_ERROR_BACKOFFS
    """Delays between retries of retriable errors (TCP/TLS, 5xx, 429): a number or a sequence.

    The number of attempts is the number of backoffs plus one.
    """

    enforce_retry_after: bool = False
    """If true, the server's ``Retry-After`` replaces every backoff; else only the shorter ones."""

    max_retry_after: float = 60.0
    """The longest wait a server's ``Retry-After`` (or ``retryAfterSeconds``) can impose, in
    seconds: longer ones are cut to this. The value is the server's, hence untrusted."""

    backoff_jitter: float = 0.5
    """How much longer than its step of the ramp a backoff may be, from 0 to 1: each sleep is
    drawn uniformly between the step and ``(1 + backoff_jitter) * step``. Many clients (the
    watchers and workers of one operator, or the replicas of several) that failed at once then
    retry spread over half a step (by default) instead of in lock-step, and never sooner than
    the ramp says (so they ride out as long an outage as Kopf's). 0 sleeps exactly the steps,
    as Kopf does. Applies to ``error_backoffs`` and to the watchers' retries."""

    max_response_size: int = DEFAULT_MAX_RESPONSE_SIZE
    """The largest response body accepted, in bytes, as received and once decompressed (a
    larger one is an error, not read any further); also the longest line of a watch stream
    (one event: a longer one ends the stream, which reconnects after a backoff)."""

    qps: float | None = None
    """The most requests per second the operator's API client starts (a token bucket, as
    client-go's ``--kube-api-qps``), shared by all its workers, watchers and pollers; every
    attempt counts, a watch once per connection (not per event). ``None`` (the default): no
    limit, and nothing is counted. See docs/large-clusters.md for choosing a value."""

    burst: int | None = None
    """How many requests may go out at once above ``qps`` after a quiet time (the bucket's
    size, as client-go's ``--kube-api-burst``); ``None``: one second's worth of ``qps``."""

    retry_budget: float | None = 10.0
    """The most retries per second of the client as a whole (all its requests together), once
    ``retry_burst`` is spent: a retry due when the budget is empty waits for its share instead
    of adding to the load of an API server that is failing already. The number of attempts of
    each request stays as ``error_backoffs`` says; only their pace is bounded. ``None``: no
    budget (each request retries on its own ramp, as Kopf does)."""

    retry_burst: int = 100
    """How many retries may go out at once before ``retry_budget`` paces them."""

    trust_env: bool = False
    """Honour ``HTTP(S)_PROXY``, ``ALL_PROXY``, ``NO_PROXY`` and, for the proxy's credentials,
    ``.netrc`` from the environment."""

    def __setattr__(self, name: str, value: object) -> None:
        # Checked when set (a startup handler's typo fails there), not on a request's path.
        if name == "max_response_size" and not (
            isinstance(value, int) and not isinstance(value, bool) and value >= 1
        ):
            raise ValueError("max_response_size must be a positive integer (bytes).")
        if name == "max_retry_after" and not (
            isinstance(value, int | float) and not math.isnan(value) and value >= 0
        ):
            raise ValueError("max_retry_after must be a number of seconds, 0 or more.")
        if name == "backoff_jitter" and not (
            isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1
        ):
            raise ValueError("backoff_jitter must be a number from 0 to 1.")
        if name in ("qps", "retry_budget") and value is not None and not _is_rate(value):
            raise ValueError(f"{name} must be a positive number (per second) or None.")
        if name == "burst" and value is not None and not _is_count(value):
            raise ValueError("burst must be a positive integer or None.")
        if name == "retry_burst" and not _is_count(value):
            raise ValueError("retry_burst must be a positive integer.")
        super().__setattr__(name, value)


def _is_rate(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@dataclasses.dataclass(frozen=True)
class WatchSelector:
    """Server-side selectors for the listings and watches of one resource.

    ``labels`` and ``fields`` are in the API server's syntax (``labelSelector``,
    ``fieldSelector``), e.g. ``WatchSelector(labels="app=web,!legacy",
    fields="status.phase=Running")``. Objects outside of them are never sent to the operator.
    """

    labels: str | None = None
    fields: str | None = None

    def __post_init__(self) -> None:
        for name in ("labels", "fields"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, str) and value.strip()):
                raise ValueError(f"WatchSelector({name}=...) must be a non-empty string or None.")


@dataclasses.dataclass
class WatchingSettings:
    """How the list+watch streams behave."""

    selectors: dict[str, WatchSelector | str] = dataclasses.field(default_factory=dict)
    """Server-side selectors per resource (see docs/selectors.md): the key names a resource as
    the CLI does (``"kopfexamples"``, ``"kopfexamples.kopf.dev"``, the kind ``"KopfExample"``),
    or ``"*"`` for every resource without a key of its own; the value is a label selector, or a
    :class:`WatchSelector` with labels and/or fields. Read when a watcher starts."""

    derive_selectors: bool = True
    """Send, as a label selector, the part of the handlers' ``labels=`` filters that every
    handler of a resource shares and that a label selector expresses exactly (see
    docs/selectors.md). Objects outside of it match no handler anyway."""

    server_timeout: float | None = None
    """``timeoutSeconds`` asked from the server for one watch request."""

    client_timeout: float | None = None
    """Total time the client lets one watch request live before reconnecting."""

    connect_timeout: float | None = None
    """Time to establish a watch connection (falls back to the networking settings)."""

    reconnect_backoff: float = 0.1
    """Pause between the end of one watch stream and the next list/watch."""

    inactivity_timeout: float | None = 70.0
    """If no event (bookmarks included) arrives for this long, reconnect from the last version.

    The silence is noticed after this many seconds, or up to 1% later (never earlier)."""
