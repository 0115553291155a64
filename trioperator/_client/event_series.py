"""The Events posted lately, remembered by what they say, so that repeats are counted.

An operator that posts the same Event again and again (a handler retrying every minute and
reporting the same error, a timer's warning) would otherwise create a new Event object each
time: one more object in etcd per repeat and one more for every watcher of events. Kubernetes'
own components count repeats on one object instead (client-go's ``EventCorrelator``): the Event
is patched with ``count`` and ``lastTimestamp``, which ``kubectl describe`` shows as
``(x5 over 10m)``. We post ``core/v1`` Events (as Kopf does), so this is the same
aggregation, in the same fields; ``series`` belongs to ``events.k8s.io/v1``, which we do not
post.

Two Events are repeats when everything they say is the same: the namespace, the involved
object (its uid included: a re-created object starts anew), type, reason, message, and the
reporting component and instance. Only the time differs.

The memory is bounded both ways: at most ``max_size`` entries (the least recently repeated
one is forgotten first) and each for ``window`` seconds after its last repeat (a later repeat
starts a new Event: by then the API server may have deleted the old one, after its
``--event-ttl``, one hour by default; if it did so earlier, the patch gets a 404 and the Event
is posted anew). No I/O here: the posting is in ``events.py``.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping
from typing import Any, TypeAlias

__all__ = ["EventKey", "PostedEvent", "RecentEvents", "event_key"]

EventKey: TypeAlias = tuple[str, ...]


def event_key(body: Mapping[str, Any]) -> EventKey:
    """What makes two Events repeats of each other: everything but their times."""
    involved = body.get("involvedObject") or {}
    return (
        body["metadata"]["namespace"],
        involved.get("apiVersion") or "",
        involved.get("kind") or "",
        involved.get("namespace") or "",
        involved.get("name") or "",
        involved.get("uid") or "",
        body.get("type") or "",
        body.get("reason") or "",
        body.get("message") or "",
        body.get("reportingComponent") or "",
        body.get("reportingInstance") or "",
    )


@dataclasses.dataclass(slots=True)
class PostedEvent:
    """An Event in the API, as we last wrote it."""

    namespace: str
    name: str
    count: int
    seen: float
    """When it last happened (trio's time)."""


class RecentEvents:
    """The lately posted Events by their :func:`event_key`, bounded in size and age."""

    __slots__ = ("_entries", "patch_denied")

    def __init__(self) -> None:
        # Ordered by the time of the last repeat: the oldest first, so pruning stops early.
        self._entries: collections.OrderedDict[EventKey, PostedEvent] = collections.OrderedDict()
        self.patch_denied = False
        """Set when the API refused to patch an Event (RBAC): repeats are posted anew."""

    def __len__(self) -> int:
        return len(self._entries)

    def find(self, key: EventKey, *, now: float, window: float) -> PostedEvent | None:
        """The Event that an Event with ``key`` repeats, if it was posted within ``window``."""
        self._prune(now=now, window=window)
        return self._entries.get(key)

    def remember(
        self,
        key: EventKey,
        posted: PostedEvent,
        *,
        now: float,
        window: float,
        max_size: int,
    ) -> None:
        """Note that ``posted`` is the API's Event for ``key`` (as created or repeated now)."""
        posted.seen = now
        self._entries[key] = posted
        self._entries.move_to_end(key)
        self._prune(now=now, window=window)
        while len(self._entries) > max_size:
            self._entries.popitem(last=False)

    def forget(self, key: EventKey) -> None:
        self._entries.pop(key, None)

    def _prune(self, *, now: float, window: float) -> None:
        entries = self._entries
        while entries:
            oldest = next(iter(entries.values()))
            if now - oldest.seen < window:
                break
            entries.popitem(last=False)
