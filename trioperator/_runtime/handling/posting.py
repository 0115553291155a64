"""Kubernetes Events from handlers: ``trioperator.event/info/warn/exception``, and their poster.

The user-facing functions are plain sync functions. They never wait for the API and never
raise because of it: they only put a small record into a memory channel, and one background
task of the running operator (:func:`run_poster`) posts the records in order. The channel holds
at most :data:`MAX_QUEUED_EVENTS` records: beyond that (an API too slow for a flood of events),
new records are dropped, with one warning when the dropping starts and one when it ends, rather
than letting the operator's memory grow without bound.

Which channel? The operator installs its poster into a context variable
(:func:`install_poster`) before it starts its tasks, so every task it spawns -- and every worker
thread of a sync handler, since trio copies the context into threads -- finds its own
operator's poster, also when several operators share one trio run. In a worker thread, the
record is handed over to the trio thread through the run's ``TrioToken.run_sync_soon`` (the
primitive under ``trio.from_thread``; channels are not thread-safe), without waiting at all:
``trio.from_thread.run_sync`` would make the thread wait for the trio thread, and deadlock when
the trio thread waits for a lock the thread holds (the logging handler's, for one).

Gating follows Kopf's documentation: ``settings.posting.enabled`` switches all of these off,
and ``settings.posting.level`` drops what is below it. Kopf's code lets ``warn()`` ignore
``enabled`` (a quirk contradicting its documentation); here ``enabled`` applies to all of them.
``event()`` with an arbitrary type is gated by ``enabled`` only; the well-known types are also
gated by the level they stand for (``Normal`` = INFO, ``Warning`` = WARNING, ``Error`` = ERROR).

With ``settings.posting.loggers = True``, records of the per-object loggers (logger
``kopf.objects``, carrying ``k8s_ref``) at or above ``settings.posting.level`` are posted
too, with the reason ``Logging`` and a type by level (see :class:`ObjectEventsHandler`).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import math
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final

import trio

from trioperator._client.api import APIClient
from trioperator._client.event_series import RecentEvents
from trioperator._client.events import post_event
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.handling.loggers import OBJECTS_LOGGER_NAME, level_word
from trioperator._util import clock
from trioperator._util.lognames import framework_logger

__all__ = [
    "DRAIN_TIMEOUT",
    "MAX_QUEUED_EVENTS",
    "K8sEvent",
    "ObjectEventsHandler",
    "PostingUnavailableError",
    "Poster",
    "event",
    "exception",
    "info",
    "install_poster",
    "open_poster_channel",
    "run_poster",
    "warn",
]

logger = framework_logger("kopf._core.engines.posting", "trioperator.posting")

DRAIN_TIMEOUT: Final = 5.0
"""After a graceful stop, how long the poster may take to post what is still queued."""

CLOSING_POLL_INTERVAL: Final = 0.5
"""While a request is in flight, how often the poster looks whether its queue was closed."""

LOGGING_REASON: Final = "Logging"

# Event types and the log levels they stand for (for gating, and for log-to-event posting).
_TYPE_LEVELS: Final[Mapping[str, int]] = {
    "Debug": logging.DEBUG,
    "Normal": logging.INFO,
    "Warning": logging.WARNING,
    "Error": logging.ERROR,
    "Fatal": logging.CRITICAL,
}

# Both the core Events and their newer API group: an event about an event could feed on itself.
_EVENT_API_VERSIONS: Final = frozenset({"v1", "events.k8s.io/v1", "events.k8s.io/v1beta1"})


@dataclasses.dataclass(frozen=True)
class K8sEvent:
    """One queued event: about whom (an object reference), and what."""

    ref: Mapping[str, Any]
    type: str
    reason: str
    message: str


class PostingUnavailableError(RuntimeError, LookupError):
    """Events were requested outside of a running operator (no poster in this context).

    It is also a ``LookupError``, which is what Kopf raises in that case.
    """


@dataclasses.dataclass(eq=False)
class Poster:
    """The running operator's end of the queue of events, found through a context variable."""

    send: trio.MemorySendChannel[K8sEvent]
    settings: OperatorSettings
    token: trio.lowlevel.TrioToken
    dropped: int = 0
    """Events dropped because the queue was full, since the last one that fit."""

    def enqueue(self, event: K8sEvent) -> None:
        """Queue an event from any thread; never blocks on the API, never raises."""
        try:
            in_trio = trio.lowlevel.current_trio_token() is self.token
        except RuntimeError:
            in_trio = False
        if in_trio:
            self._put(event)
            return
        try:
            # Fire and forget: the thread must not wait for the trio thread, which may itself
            # be waiting for a lock this thread holds (e.g. the logging handler's own lock when
            # both log at once). The run's queue of such calls is strictly FIFO, and a worker
            # thread's return to its task goes through the same queue, so order is kept.
            self.token.run_sync_soon(self._put, event)
        except trio.RunFinishedError:
            logger.warning(f"An event is dropped: the operator has finished. Event: {event}")

    def _put(self, event: K8sEvent) -> None:
        # Also called by trio's run loop (from threads): it must never raise.
        try:
            self.send.send_nowait(event)
        except trio.WouldBlock:
            if not self.dropped:
                logger.warning(
                    "Too many events are waiting to be posted: dropping new ones until there"
                    f" is room. First dropped: {event}"
                )
            self.dropped += 1
            return
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            logger.warning(f"An event is dropped: the poster has stopped. Event: {event}")
        except Exception:
            logger.exception(f"An event is dropped. Event: {event}")
        else:
            if self.dropped:
                logger.warning(f"{self.dropped} event(s) were dropped: the queue was full.")
                self.dropped = 0


_poster_var: contextvars.ContextVar[Poster] = contextvars.ContextVar("trioperator.poster")


MAX_QUEUED_EVENTS: Final = 10_000
"""The most events waiting to be posted; more are dropped (with a warning)."""


def open_poster_channel(
    max_queued: int = MAX_QUEUED_EVENTS,
) -> tuple[trio.MemorySendChannel[K8sEvent], trio.MemoryReceiveChannel[K8sEvent]]:
    """The queue between the posting functions and :func:`run_poster`: bounded, in order."""
    return trio.open_memory_channel[K8sEvent](max_queued)


@contextlib.contextmanager
def install_poster(
    send: trio.MemorySendChannel[K8sEvent], *, settings: OperatorSettings
) -> Iterator[Poster]:
    """Make ``event()`` & co. of this context (and of tasks spawned from it) queue to ``send``.

    Use it in the operator's main task before it spawns anything; it also makes sure that the
    log records of per-object loggers can become events (see :class:`ObjectEventsHandler`).
    Must be entered inside the trio run (the hand-over from threads needs the run's token).
    """
    poster = Poster(send=send, settings=settings, token=trio.lowlevel.current_trio_token())
    ObjectEventsHandler.install()
    token = _poster_var.set(poster)
    try:
        yield poster
    finally:
        _poster_var.reset(token)


def current_poster() -> Poster:
    try:
        return _poster_var.get()
    except LookupError:
        raise PostingUnavailableError(
            "Kubernetes events can be posted only from inside a running operator"
            " (its handlers, or tasks and threads started from them)."
        ) from None


# ------------------------------------------------------------------------ public functions


def event(
    objs: Any,
    *,
    type: str,
    reason: str,
    message: str = "",
) -> None:
    """Post an event of any ``type`` about one object, or about each of several objects.

    ``objs`` is an object's body (a dict or :class:`~trioperator.Body`), an object reference
    (``apiVersion``, ``kind``, ``name``, ``uid``, ``namespace`` at the top level), or a list or
    other iterable of them. The event is queued: it is posted soon, in order, by the operator.
    """
    poster = current_poster()
    if not _allowed(poster.settings, _TYPE_LEVELS.get(type)):
        return
    for ref in _refs(objs):
        poster.enqueue(K8sEvent(ref=ref, type=type, reason=reason, message=message))


def info(objs: Any, *, reason: str, message: str = "") -> None:
    """Post a ``Normal`` event (if ``settings.posting.level`` allows INFO)."""
    event(objs, type="Normal", reason=reason, message=message)


def warn(objs: Any, *, reason: str, message: str = "") -> None:
    """Post a ``Warning`` event (if ``settings.posting.level`` allows WARNING)."""
    event(objs, type="Warning", reason=reason, message=message)


def exception(
    objs: Any,
    *,
    reason: str = "",
    message: str = "",
    exc: BaseException | None = None,
) -> None:
    """Post an ``Error`` event about an exception: by default, the one being handled now.

    The reason defaults to the exception's class name; the message is ``"<message> <exc>"``.
    """
    if exc is None:
        exc = sys.exc_info()[1]
    if not reason:
        reason = type(exc).__name__ if exc is not None else "Exception"
    if message and exc is not None:
        message = f"{message} {exc}"
    elif exc is not None:
        message = str(exc)
    event(objs, type="Error", reason=reason, message=message)


def _allowed(settings: OperatorSettings, level: int | None) -> bool:
    posting = settings.posting
    if not posting.enabled:
        return False
    return level is None or level >= posting.level


def _refs(objs: Any) -> Iterator[dict[str, Any]]:
    """References to the objects in ``objs`` (one object, or any nesting of iterables)."""
    if isinstance(objs, Mapping):
        yield _ref_of(objs)
    elif hasattr(objs, "to_dict") and callable(objs.to_dict):
        # Models of the official kubernetes client (``V1Pod`` etc.).
        yield _ref_of(objs.to_dict())
    elif isinstance(objs, Iterable) and not isinstance(objs, str | bytes):
        for obj in objs:
            yield from _refs(obj)
    else:
        raise TypeError(f"Events can be posted about objects (dicts, bodies), not {objs!r}.")


def _ref_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    # The official client's models give snake_case keys; the API's JSON gives camelCase ones.
    api_version = obj.get("apiVersion", obj.get("api_version"))
    metadata = obj.get("metadata")
    # A body has metadata; a reference has the identifying fields at the top level.
    source: Mapping[str, Any] = metadata if isinstance(metadata, Mapping) else obj
    ref = {
        "apiVersion": api_version,
        "kind": obj.get("kind"),
        "name": source.get("name"),
        "uid": source.get("uid"),
        "namespace": source.get("namespace"),
    }
    return {key: value for key, value in ref.items() if value}


def _is_about_events(ref: Mapping[str, Any]) -> bool:
    return ref.get("kind") == "Event" and ref.get("apiVersion") in _EVENT_API_VERSIONS


# ------------------------------------------------------------------------------ the poster


async def run_poster(
    api: APIClient,
    *,
    settings: OperatorSettings,
    receive: trio.MemoryReceiveChannel[K8sEvent],
    drain_timeout: float = DRAIN_TIMEOUT,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Post the queued events one by one, in order, until the queue is closed (or cancelled).

    Failures to post are logged as warnings and forgotten: an event is a courtesy, and the
    poster keeps going. Once every send side of the queue is closed (a graceful stop), what is
    still queued (or in flight) is posted within ``drain_timeout`` seconds (+ up to
    :data:`CLOSING_POLL_INTERVAL` to notice it), and the rest is dropped with a warning.
    Cluster-scoped objects get their events in the ``default`` namespace (the only one the API
    accepts for them; see :mod:`trioperator._client.events`). Repeats of an Event within
    ``settings.posting.aggregation_window`` are counted on it (``count``, ``lastTimestamp``)
    instead of posted anew (see :mod:`trioperator._client.event_series`).
    """
    task_status.started()
    draining = trio.CancelScope()
    in_flight = 0
    recent = RecentEvents()  # only this task posts: no locking

    def notice_closing() -> bool:
        if draining.deadline == math.inf and not _has_senders(receive):
            draining.deadline = trio.current_time() + drain_timeout
        return draining.deadline != math.inf

    try:
        with draining:
            while True:
                # The queue is closed when no send side is left open; what is buffered still
                # comes out of it, but from now on only for a bounded time.
                notice_closing()
                try:
                    queued = await receive.receive()
                except trio.EndOfChannel:
                    return
                in_flight = 1
                async with trio.open_nursery() as nursery:
                    # Nothing wakes us when the queue closes during a slow request: look.
                    nursery.start_soon(_poll_closing, notice_closing)
                    await _post_one(api, queued, settings, recent)
                    nursery.cancel_scope.cancel()
                in_flight = 0
    finally:
        left = receive.statistics().current_buffer_used + in_flight
        receive.close()
        if left:
            logger.warning(f"{left} event(s) not posted: the operator is stopping.")


async def _poll_closing(notice: Callable[[], bool]) -> None:
    # Polling, not an Event: closing a memory channel notifies only a blocked receiver.
    while True:
        if notice():
            return
        await trio.sleep(CLOSING_POLL_INTERVAL)


def _has_senders(receive: trio.MemoryReceiveChannel[K8sEvent]) -> bool:
    return receive.statistics().open_send_channels > 0


async def _post_one(
    api: APIClient,
    queued: K8sEvent,
    settings: OperatorSettings,
    recent: RecentEvents,
) -> None:
    if _is_about_events(queued.ref):
        return
    posting = settings.posting
    try:
        await post_event(
            api,
            ref=queued.ref,
            type=queued.type,
            reason=queued.reason,
            message=queued.message,
            reporting_component=posting.reporting_component,
            reporting_instance=posting.reporting_instance,
            name_prefix=posting.event_name_prefix,
            now=clock.now(),
            logger=logger,
            recent=recent,
            window=posting.aggregation_window,
            max_size=posting.aggregation_size,
        )
    except Exception as exc:
        # Client errors (4xx) are already logged and ignored by post_event; these are the
        # server and connection errors that outlived the retries, or anything unforeseen.
        logger.warning(
            f"Failed to post an event. Ignoring and continuing. Error: {exc!r}. Event: {queued}"
        )


# ------------------------------------------------------------------ log records -> events


class ObjectEventsHandler(logging.Handler):
    """Posts the records of per-object loggers as events, if ``settings.posting.loggers``.

    One instance serves every operator of the process: for each record, it finds the poster
    of the context that logs it (the record is emitted synchronously in that context), so the
    settings and the queue are those of the operator the record belongs to. Records logged
    where there is no poster, or without ``k8s_ref``, or with ``k8s_skip=True``, are skipped.
    """

    _installed: ObjectEventsHandler | None = None

    @classmethod
    def install(cls) -> None:
        """Attach one instance to the per-object logger (once per process)."""
        if cls._installed is None:
            cls._installed = cls()
            logging.getLogger(OBJECTS_LOGGER_NAME).addHandler(cls._installed)

    @classmethod
    def uninstall(cls) -> None:
        if cls._installed is not None:
            logging.getLogger(OBJECTS_LOGGER_NAME).removeHandler(cls._installed)
            cls._installed = None

    def handle(self, record: logging.LogRecord) -> bool:
        # Most records are not for posting (every timer run logs one; and by default, as in
        # Kopf, no log line is posted at all): skip them before the handler's filters and lock.
        if not getattr(record, "k8s_ref", None) or getattr(record, "k8s_skip", False):
            return False
        poster = _poster_var.get(None)
        if poster is None:
            return False
        posting = poster.settings.posting
        if not (posting.enabled and posting.loggers and record.levelno >= posting.level):
            return False
        return bool(super().handle(record))

    def emit(self, record: logging.LogRecord) -> None:
        ref = getattr(record, "k8s_ref", None)
        if not ref or getattr(record, "k8s_skip", False):
            return
        try:
            poster = _poster_var.get()
        except LookupError:
            return
        posting = poster.settings.posting
        if not (posting.enabled and posting.loggers and record.levelno >= posting.level):
            return
        try:
            message = _plain_message(record)
        except Exception:
            self.handleError(record)
            return
        poster.enqueue(
            K8sEvent(ref=ref, type=_type_of(record.levelno), reason=LOGGING_REASON, message=message)
        )


def _type_of(levelno: int) -> str:
    return level_word(levelno, ("Debug", "Normal", "Warning", "Error", "Fatal"))


def _plain_message(record: logging.LogRecord) -> str:
    # The message alone: the event is attached to the object, no prefix is needed (and the
    # records have none: the formatters add it to the log lines).
    return record.getMessage()
