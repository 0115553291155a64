"""The list+watch stream of one resource in one namespace (or cluster-wide), as a producer task.

:func:`stream_events` runs forever and feeds a memory channel with:

1. every object of a LIST, as ``{"type": None, "object": obj}``;
2. the :data:`LISTED` marker (the listing is complete: e.g. indices are now populated);
3. ``ADDED``/``MODIFIED``/``DELETED`` events of a WATCH started from the listing's version.

It keeps the latest ``resourceVersion`` seen (from events and from BOOKMARKs) and, whenever a
watch request ends -- the server closed it, the connection dropped, the client timeout passed,
or the stream stayed silent for ``inactivity_timeout`` -- it waits ``reconnect_backoff`` and
resumes watching from that version. Only when the server says that version is gone (HTTP 410,
or an ``ERROR`` event with code 410) does it LIST again. Any other ``ERROR`` event is fatal
(:class:`WatchingError`), since retrying it blindly would hide a real problem.

An answer that no API server gives -- a redirect, a response that breaks HTTP or exceeds the
client's limits (a page, a watch line), a listing that is not one -- is logged as an error and
the same step (the listing, or the watch from the same version) is tried again after a backoff
that grows with every failure in a row (``settings.networking.error_backoffs``, its last step
repeating, with ``backoff_jitter``; see ``backoff.py``): whoever sends them (a hostile or
broken proxy, a wrong server URL), the operator stays up, and nothing half-read is taken for
the resource's state (a redirected LIST is not an empty one). Throttling (429) that outlived
the client's retries backs off the same way, for at least the server's capped ``Retry-After``.

It is a task feeding a channel rather than an async generator, so that no cancel scope is ever
suspended across a ``yield`` into foreign code.
"""

from __future__ import annotations

import math
from typing import Any, Final, Literal, NoReturn, TypeAlias, TypedDict, cast

import trio

from trioperator._client.api import APIClient, Logger
from trioperator._client.backoff import capped_retry_after, jittered, nth_backoff
from trioperator._client.errors import (
    APIConnectionError,
    APIError,
    APIGoneError,
    APIProtocolError,
    APIRedirectError,
    APITooManyRequestsError,
)
from trioperator._client.resources import Resource
from trioperator._client.settings import WatchingSettings
from trioperator._util.lognames import framework_logger
from trioperator._wire.watch import WatchLineError, decode_watch_line

__all__ = [
    "LISTED",
    "EventType",
    "LIST_PAGE_SIZE",
    "Listed",
    "RawWatchEvent",
    "WatchHealth",
    "WatchItem",
    "WatchingError",
    "stream_events",
]

_LOGGER = framework_logger("kopf._cogs.clients.watching", __name__)

LIST_PAGE_SIZE: Final = 500
"""Objects per page of the initial listing (the page size Kubernetes' own clients use)."""

_EXCERPT = 200


class Listed:
    """The type of :data:`LISTED`: marks the end of a listing in the stream of watch items."""

    _instance: Listed | None = None

    def __new__(cls) -> Listed:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "LISTED"

    def __reduce__(self) -> str:
        return "LISTED"


LISTED: Final = Listed()
"""Sent after the objects of every (re)listing, before the watch events that follow it."""


EventType: TypeAlias = Literal["ADDED", "MODIFIED", "DELETED"]


class RawWatchEvent(TypedDict):
    """The same shape as the engine's ``RawEvent``: ``type`` is ``None`` for listed objects."""

    type: EventType | None
    object: dict[str, Any]


WatchItem: TypeAlias = RawWatchEvent | Listed


class WatchingError(Exception):
    """The watch stream reported an error that is not a plain "too old version" (410)."""

    def __init__(self, message: str, status: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status


class WatchHealth:
    """A cheap liveness signal of one watcher, for probes.

    ``last_activity`` is the trio time of the last sign of life from the API server (a listing
    completed, or any line of the watch stream, bookmarks included); ``alive`` is true while the
    producer task runs.
    """

    __slots__ = ("alive", "last_activity", "listings", "reconnects")

    def __init__(self) -> None:
        self.alive = False
        self.last_activity = -math.inf
        self.listings = 0
        self.reconnects = 0

    def touch(self) -> None:
        self.last_activity = trio.current_time()

    def silent_for(self) -> float:
        """Seconds since the last sign of life (``inf`` if there was none yet)."""
        return trio.current_time() - self.last_activity


_FORWARDED: Final = frozenset({"ADDED", "MODIFIED", "DELETED"})
_SILENCE_SLACK: Final = 1.01
"""How far the inactivity deadline may run over, so that a busy stream moves it rarely."""
# A watch ERROR that means "that resourceVersion is too old": list again, do not fail.
_EXPIRED_REASONS: Final = frozenset({"Expired", "Gone"})


def _describe(resource: Resource, namespace: str | None) -> str:
    return str(resource) if namespace is None else f"{resource} in {namespace!r}"


def _seconds(value: float) -> str:
    return f"{value:g}"


def _connect_timeout(api: APIClient, settings: WatchingSettings) -> float | None:
    if settings.connect_timeout is not None:
        return settings.connect_timeout
    if api.settings.connect_timeout is not None:
        return api.settings.connect_timeout
    return api.settings.request_timeout


async def stream_events(
    api: APIClient,
    resource: Resource,
    namespace: str | None,
    *,
    settings: WatchingSettings,
    send: trio.MemorySendChannel[WatchItem],
    health: WatchHealth | None = None,
    logger: Logger | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """List and watch ``resource`` in ``namespace`` (``None``: cluster-wide) forever.

    ``task_status.started()`` is called once the first page of the first listing has been
    fetched, before its objects are sent (the listing is passed on page by page): the caller
    can thus ``await nursery.start(...)`` and only then begin receiving, whatever the
    channel's buffer size. The objects, :data:`LISTED` and the events
    follow on the channel in order.

    ``label_selector``/``field_selector`` go on the listings and the watches alike: the
    server sends only the objects within them, and an object that leaves them as ``DELETED``.

    Escalates: :class:`WatchingError` (an ``ERROR`` event other than 410) and API errors that
    outlived the client's retries, except 429, redirects and unusable answers (protocol errors,
    over-size responses), which are logged and retried after a growing backoff. Settings are
    read anew for every request.
    """
    log: Logger = logger if logger is not None else _LOGGER
    health = health if health is not None else WatchHealth()
    what = _describe(resource, namespace)
    version: str | None = None
    started = False
    failures = 0  # attempts in a row that failed (see _failure_backoff)
    health.alive = True
    try:
        while True:
            trouble: APIError | APIConnectionError | None = None
            try:
                if version is None:

                    async def forward(items: list[dict[str, Any]], restarted: bool) -> None:
                        # Each page goes on as it comes, not the whole listing at once: the
                        # peak memory of a listing of many objects is then one page of
                        # decoded objects plus what the consumer still holds, and it is the
                        # peak that sizes the heap for the rest of the process's life.
                        # After a restarted listing (``restarted``), the objects of the
                        # expired one were sent already; the new one supersedes them.
                        nonlocal started
                        health.touch()
                        if not started:
                            task_status.started()
                            started = True
                        for obj in items:
                            await send.send({"type": None, "object": obj})
                        items.clear()

                    version = await api.list_pages(
                        resource,
                        namespace=namespace,
                        label_selector=label_selector,
                        field_selector=field_selector,
                        limit=LIST_PAGE_SIZE,
                        logger=logger,
                        on_page=forward,
                    )
                    health.listings += 1
                    health.touch()
                    if not started:
                        task_status.started()
                        started = True
                    await send.send(LISTED)
                version, trouble = await _watch_once(
                    api, resource, namespace, version, settings, send, health, log, what,
                    label_selector, field_selector,
                )  # fmt: skip
            except APIGoneError:
                log.debug(f"Watch-stream for {what} is gone (HTTP 410); listing again.")
                version = None
            except APITooManyRequestsError as exc:
                # The retries are exhausted, but a watcher must not die of throttling.
                trouble = exc
            except (APIRedirectError, APIProtocolError) as exc:
                # Not an answer of an API server (see the module's docstring): the listing or
                # the watch is tried again, and the version stays what it was -- a listing that
                # failed midway lists again from its start.
                trouble = exc
            health.reconnects += 1
            if trouble is None:
                failures = 0
                await trio.sleep(settings.reconnect_backoff)
                continue
            failures += 1
            delay = _failure_backoff(api, settings, failures, trouble)
            step = "listing" if version is None else "watch-stream"
            message = (
                f"The {step} of {what} failed (#{failures} in a row); retrying in"
                f" {delay:.3g} seconds: {trouble}"
            )
            if isinstance(trouble, APITooManyRequestsError):
                log.warning(f"Watch-stream for {what} is throttled. {message}")
            else:
                log.error(message)
            await trio.sleep(delay)
    finally:
        health.alive = False


def _failure_backoff(
    api: APIClient,
    settings: WatchingSettings,
    failures: int,
    trouble: APIError | APIConnectionError,
) -> float:
    """The sleep after the ``failures``-th failure in a row: a step of the client's ramp (its last
    step repeating; ``reconnect_backoff`` if it has none) with jitter, and never shorter than
    the (capped) ``Retry-After`` of a throttled attempt."""
    networking = api.settings
    step = nth_backoff(networking.error_backoffs, failures)
    if step is None:
        step = settings.reconnect_backoff
    delay = jittered(step, networking.backoff_jitter, api.rng)
    if isinstance(trouble, APIError):
        retry_after = capped_retry_after(trouble.retry_after, networking.max_retry_after)
        if retry_after is not None:
            delay = max(delay, retry_after)
    return delay


async def _watch_once(
    api: APIClient,
    resource: Resource,
    namespace: str | None,
    version: str,
    settings: WatchingSettings,
    send: trio.MemorySendChannel[WatchItem],
    health: WatchHealth,
    log: Logger,
    what: str,
    label_selector: str | None = None,
    field_selector: str | None = None,
) -> tuple[str | None, APIProtocolError | None]:
    """Run one watch request from ``version``; return the version to resume from, and why the
    stream broke if it broke on an unusable answer (for the caller to back off).

    ``None`` means the version is too old and the resource must be listed again.
    """
    inactivity = settings.inactivity_timeout
    client_timeout = settings.client_timeout
    recent = api.recent_writes

    # Two deadlines: one fixed for the whole request (client_timeout), one that moves with
    # every line received (inactivity). The inactivity one also covers establishing the
    # request, so a server that accepts the connection but never answers is noticed too.
    with trio.CancelScope() as overall, trio.CancelScope() as silence:
        if client_timeout is not None:
            overall.deadline = trio.current_time() + client_timeout
        if inactivity is not None:
            silence.deadline = trio.current_time() + inactivity
        established = False
        try:
            async with api.stream(
                resource.get_url(namespace=namespace),
                params=_watch_params(version, settings, label_selector, field_selector),
                connect_timeout=_connect_timeout(api, settings),
                logger=log,
            ) as lines:
                established = True
                # The server answered: a sign of life, as a line is. A quiet resource gets
                # nothing else between reconnections; an attempt nobody answers (the API server
                # is down, the connection hangs) is no sign of life, however often repeated.
                health.touch()
                async for line in lines:
                    health.touch()
                    # Moving a cancel scope's deadline costs more than a busy stream's line
                    # should: it is moved a little further than needed (1% of the timeout), so
                    # only now and then. The silence is noticed never early, at most 1% late.
                    if inactivity is not None:
                        now = health.last_activity
                        if now + inactivity > silence.deadline:
                            silence.deadline = now + inactivity * _SILENCE_SLACK
                    # The echo of our own write: its object is the answer, already decoded.
                    echo = recent.take(line)
                    if echo is not None:
                        obj, kind = echo, "MODIFIED"
                    else:
                        try:
                            event = decode_watch_line(line)
                        except WatchLineError as exc:
                            log.warning(
                                f"Skipping an undecodable line in the watch-stream of {what}: {exc}"
                            )
                            continue
                        obj, kind = event.object, event.type
                    if kind in _FORWARDED:
                        item: RawWatchEvent = {"type": cast(EventType, kind), "object": obj}
                        try:
                            # The buffer is rarely full: then the line costs no trip through
                            # the scheduler and no moving of the inactivity deadline.
                            send.send_nowait(item)
                        except trio.WouldBlock:
                            await _send_slowly(send, item, silence, inactivity)
                        version = _version_of(obj) or version
                    else:
                        resumed = _not_an_event(kind, obj, version, log, what)
                        if resumed is None:
                            return None, None
                        version = resumed
        except APIConnectionError as exc:
            # Failing to establish the stream was already retried by the client: escalate.
            # A stream that broke after it was established is simply resumed; at once if the
            # connection broke, after a backoff if the server sent what cannot be read (it
            # would most likely send it again).
            if not established:
                raise
            if isinstance(exc, APIProtocolError):
                return version, exc
            log.debug(f"Watch-stream for {what} was interrupted: {exc}")
            return version, None
    if silence.cancelled_caught:
        # At DEBUG, as Kopf: a quiet resource does this every inactivity timeout, and a watch
        # that stays silent for too long is what the liveness probe reports (as stalled).
        log.debug(
            f"Watch-stream for {what} is inactive for {_seconds(inactivity or 0)} seconds;"
            " reconnecting."
        )
    elif overall.cancelled_caught:
        log.debug(f"Watch-stream for {what} reached the client timeout; reconnecting.")
    return version, None


def _watch_params(
    version: str,
    settings: WatchingSettings,
    label_selector: str | None,
    field_selector: str | None,
) -> dict[str, str]:
    """The query of a watch request from ``version`` (and the server-side selectors, if any)."""
    params = {"watch": "true", "allowWatchBookmarks": "true", "resourceVersion": version}
    if settings.server_timeout is not None:
        params["timeoutSeconds"] = str(max(1, math.ceil(settings.server_timeout)))
    if label_selector:
        params["labelSelector"] = label_selector
    if field_selector:
        params["fieldSelector"] = field_selector
    return params


async def _send_slowly(
    send: trio.MemorySendChannel[WatchItem],
    item: RawWatchEvent,
    silence: trio.CancelScope,
    inactivity: float | None,
) -> None:
    """Send an event into a full buffer: wait for the consumer, with the silence put off.

    A slow consumer is not a silent server: no inactivity while sending. If a timeout cancels
    the send, nothing was sent and the version stays put, so the event comes again after
    reconnecting.
    """
    silence.deadline = math.inf
    await send.send(item)
    if inactivity is not None:
        silence.deadline = trio.current_time() + inactivity


def _not_an_event(
    kind: str, obj: dict[str, Any], version: str, log: Logger, what: str
) -> str | None:
    """A line other than an object's event: the version to resume from, ``None`` if the
    version is too old (the resource must be listed again); a watch error other than that
    raises :class:`WatchingError`."""
    if kind == "BOOKMARK":
        return _version_of(obj) or version
    if kind == "ERROR":
        if obj.get("code") == 410 or obj.get("reason") in _EXPIRED_REASONS:
            log.debug(f"Watch-stream for {what} expired: {obj.get('message')}")
            return None
        raise WatchingError(
            f"Error in the watch-stream of {what}: {obj.get('message') or obj}",
            status=obj,
        )
    log.warning(f"Ignoring an unsupported event type {kind!r} in the watch-stream of {what}.")
    return version


def _version_of(obj: dict[str, Any]) -> str | None:
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        value = meta.get("resourceVersion")
        if isinstance(value, str) and value:
            return value
    return None
