"""Posting ``core/v1`` Events about objects, in the same JSON shape as Kopf posts them.

Events about cluster-scoped objects differ from Kopf's in two ways, because the API server
rejects Kopf's (HTTP 422, "involvedObject.namespace: Invalid value: "": does not match
event.namespace"). An Event must live in a namespace, and one about an object without a
namespace is accepted only in ``default`` when it has no ``eventTime`` (the validation of
"old-style" events), or, with ``eventTime``, only in ``kube-system`` (in 1.20; later releases
also accept ``default``). So these events go to ``default`` without ``eventTime`` -- valid on
every version -- while ``firstTimestamp``/``lastTimestamp`` still say when. Kopf's namespace of
the credentials' context is not used for them: no version accepts any other namespace.

Errors of the client's making (4xx, e.g. no RBAC permission for events) are logged and
ignored: an event is a courtesy, never a reason to fail the handling of an object. Server and
connection errors that outlive the retries escalate to the caller (the runtime's poster task).

Repeats are counted (given a :class:`RecentEvents` and a window, as the poster does): an Event
that says exactly what one posted within the window said is not posted anew, the existing
Event is patched with ``count`` and ``lastTimestamp`` (see ``event_series.py``). If that
Event is gone (404), or the patch is refused for another reason of the client's making, the
Event is posted anew; without the RBAC permission to patch events (403), once warned, repeats
are posted anew from then on, as before.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping
from typing import Any, TypedDict, Unpack

import trio

from trioperator._client.api import APIClient, Logger
from trioperator._client.errors import APIClientError, APIForbiddenError, APINotFoundError
from trioperator._client.event_series import EventKey, PostedEvent, RecentEvents, event_key
from trioperator._util import clock

__all__ = [
    "CLUSTER_EVENTS_NAMESPACE",
    "MAX_MESSAGE_LENGTH",
    "EventFields",
    "cut_message",
    "event_body",
    "post_event",
]

_LOGGER = logging.getLogger(__name__)

MAX_MESSAGE_LENGTH = 1024
CLUSTER_EVENTS_NAMESPACE = "default"
"""Where events about cluster-scoped objects go (the only namespace every version accepts)."""
_CUT_INFIX = "..."
_REF_KEYS = ("apiVersion", "kind", "name", "uid", "namespace")


def cut_message(message: str, limit: int = MAX_MESSAGE_LENGTH) -> str:
    """Shorten a message to ``limit`` characters, keeping its head and tail around ``...``."""
    if len(message) <= limit:
        return message
    # Split as Kopf splits it (the head one character longer), so the texts are the same.
    head = limit // 2 - len(_CUT_INFIX) // 2
    tail = limit - head - len(_CUT_INFIX)
    return message[:head] + _CUT_INFIX + message[-tail:]


class EventFields(TypedDict):
    """What an Event says, about which object (``ref``: ``apiVersion``, ``kind``, ``name``,
    ``uid``, …), and who reports it."""

    ref: Mapping[str, Any]
    type: str
    reason: str
    message: str
    reporting_component: str
    reporting_instance: str
    name_prefix: str


def event_body(
    *, namespace: str, now: datetime.datetime, **fields: Unpack[EventFields]
) -> dict[str, Any]:
    """The JSON of an Event (pure: the caller provides the namespace and the time).

    Without ``eventTime`` if the object has no namespace (see the module's docstring).
    """
    # Always with microseconds: ``eventTime`` is a MicroTime, which requires them.
    timestamp = now.isoformat(timespec="microseconds")
    ref = fields["ref"]
    involved = {key: ref[key] for key in _REF_KEYS if ref.get(key) is not None}
    body: dict[str, Any] = {
        "metadata": {"namespace": namespace, "generateName": fields["name_prefix"]},
        "action": "Action?",
        "type": fields["type"],
        "reason": fields["reason"],
        "message": cut_message(fields["message"]),
        "reportingComponent": fields["reporting_component"],
        "reportingInstance": fields["reporting_instance"],
        "source": {"component": fields["reporting_component"]},
        "involvedObject": involved,
        "firstTimestamp": timestamp,
        "lastTimestamp": timestamp,
    }
    if involved.get("namespace"):
        body["eventTime"] = timestamp
    return body


async def post_event(
    api: APIClient,
    *,
    now: datetime.datetime | None = None,
    logger: Logger | None = None,
    recent: RecentEvents | None = None,
    window: float = 0.0,
    max_size: int = 0,
    **fields: Unpack[EventFields],
) -> None:
    """Post an Event about the object ``fields["ref"]`` (see :class:`EventFields`).

    Cluster-scoped objects get their events in :data:`CLUSTER_EVENTS_NAMESPACE`. Events about
    Events are never posted (that could feed on itself). ``now`` defaults to the current UTC
    time. With ``recent``, a positive ``window`` (seconds) and ``max_size``, a repeat of an
    Event posted within the window is counted on it instead (see the module's docstring).
    """
    log: Logger = logger if logger is not None else _LOGGER
    ref = fields["ref"]
    if ref.get("apiVersion") == "v1" and ref.get("kind") == "Event":
        return
    namespace = ref.get("namespace") or CLUSTER_EVENTS_NAMESPACE
    body = event_body(namespace=namespace, now=now if now is not None else clock.now(), **fields)
    series = recent if window > 0 and max_size > 0 else None
    key: EventKey = ()
    tick = 0.0
    if series is not None:
        key = event_key(body)
        tick = trio.current_time()
        previous = None if series.patch_denied else series.find(key, now=tick, window=window)
        if previous is not None:
            if await _count_repeat(api, previous, body["lastTimestamp"], series, log):
                series.remember(key, previous, now=tick, window=window, max_size=max_size)
                return
            series.forget(key)
    try:
        # Retries are logged where the poster logs (as Kopf's posting), not as the client's.
        created = await api.request(
            "POST", f"/api/v1/namespaces/{namespace}/events", payload=body, logger=log
        )
    except APIClientError as exc:
        log.warning(
            f"Failed to post an event. Ignoring and continuing. Code: {exc.code}."
            f" Message: {exc.message}. Details: {exc.details}. Event: {body}"
        )
        return
    if series is not None and isinstance(created, dict):
        name = (created.get("metadata") or {}).get("name")
        if isinstance(name, str) and name:
            posted = PostedEvent(namespace=namespace, name=name, count=1, seen=tick)
            series.remember(key, posted, now=tick, window=window, max_size=max_size)


async def _count_repeat(
    api: APIClient,
    posted: PostedEvent,
    timestamp: str,
    recent: RecentEvents,
    log: Logger,
) -> bool:
    """Count one more occurrence on the Event ``posted``; ``False`` if it cannot be."""
    path = f"/api/v1/namespaces/{posted.namespace}/events/{posted.name}"
    count = posted.count + 1
    patch = {"count": count, "lastTimestamp": timestamp}
    try:
        await api.request(
            "PATCH", path, payload=patch, content_type="application/merge-patch+json", logger=log
        )
    except APINotFoundError:
        return False  # deleted already (its TTL, or by someone): posted anew
    except APIForbiddenError as exc:
        recent.patch_denied = True
        log.warning(
            "Repeated events cannot be counted on the existing ones: patching events is not"
            f" permitted ({exc.message}). They are posted as new events instead; grant the"
            " 'patch' verb on events to the operator to have them counted."
        )
        return False
    except APIClientError as exc:
        log.debug(f"Could not count a repeated event on {path} ({exc!r}); posting it anew.")
        return False
    posted.count = count
    return True
