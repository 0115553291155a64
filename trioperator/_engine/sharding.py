"""Sharding decisions without I/O: the hash ring, object keys, views, and the Lease records.

Several replicas of one operator share its objects: each object belongs to exactly one live
replica, chosen by consistent hashing over a ring of virtual nodes (``Ring``). The runtime side
(``_runtime/coordination/sharding.py``) keeps the membership in ``coordination.k8s.io/v1``
Leases and runs the hand-over protocol; this module holds what it decides with.

The key of an object (``ring_key``) is the ``uid`` of its controller owner (the
``ownerReferences`` entry with ``controller: true``) if it has one, else its own ``uid``:

- A uid never changes during an object's life (a name does not either, but a uid is unique
  across deletions and re-creations, and it is in every event the watch sends).
- Owned objects go where their owner goes, for free: their owner's uid is on them. A handler of
  a child then runs on the replica that handles the parent (its in-memory state, its indices).
- Objects without a uid (only in tests and odd fixtures) fall back to ``namespace/name``.

The hash is blake2b (8 bytes): the same in every process and every Python version, unlike
``hash()``, which is salted per process.

A *view* is the set of member names a replica computed a ring from. Each replica publishes in
its Lease the view it has *drained for* (``DRAINED_ANNOTATION``): "I work on no object that
this view assigns to another member". The hand-over rule built on it is in
``_runtime/coordination/sharding.py`` and docs/sharding.md.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = [
    "DEFAULT_VNODES",
    "DRAINED_ANNOTATION",
    "LABELLER_KEY",
    "RING_LABEL",
    "SHARD_LABEL",
    "Member",
    "Ring",
    "View",
    "bucket_key",
    "bucket_of",
    "buckets_selector",
    "decode_drained",
    "encode_drained",
    "format_micro_time",
    "lease_body",
    "lease_name",
    "parse_member",
    "ring_key",
]

DEFAULT_VNODES: Final = 64
"""Virtual nodes per member: enough for an even spread (about ±15% with 3 members)."""

RING_LABEL: Final = "trioperator.dev/shard-ring"
"""The label on every Lease of a ring: its value is the ring's name."""

DRAINED_ANNOTATION: Final = "trioperator.dev/shard-drained"
"""The view a member has drained for, with a token unique to each publication (JSON)."""

SHARD_LABEL: Final = "trioperator.dev/shard"
"""With ``settings.sharding.mode = "labels"``: the object's bucket, set once by a replica and
never changed by the framework (it is a function of the object's ring key)."""

LABELLER_KEY: Final = "trioperator.dev/labeller"
"""The ring key whose owner labels the ring's unlabelled objects (labels mode)."""

_NAME_INVALID = re.compile(r"[^a-z0-9-]+")


def _hash(value: str) -> int:
    return int.from_bytes(hashlib.blake2b(value.encode(), digest_size=8).digest(), "big")


def ring_key(body: Mapping[str, Any]) -> str:
    """The stable key an object is placed on the ring by (see the module's docstring)."""
    metadata = body.get("metadata")
    meta: Mapping[str, Any] = metadata if isinstance(metadata, Mapping) else {}
    for ref in meta.get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller") and ref.get("uid"):
            return str(ref["uid"])
    uid = meta.get("uid")
    if isinstance(uid, str) and uid:
        return uid
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def bucket_of(body: Mapping[str, Any], buckets: int) -> str:
    """The bucket of an object (labels mode): its ring key hashed into ``buckets`` buckets.

    Owned objects share their owner's bucket, as they share its ring key. The value is what the
    shard label holds: a decimal number, a valid label value.
    """
    return str(_hash(ring_key(body)) % buckets)


def bucket_key(bucket: str) -> str:
    """The ring key of a bucket: the buckets, not the objects, are placed on the ring."""
    return f"bucket/{bucket}"


def buckets_selector(buckets: Iterable[str], total: int) -> str:
    """A label selector of the objects in ``buckets`` (out of ``total``).

    All of them: any labelled object (shorter than naming every bucket). None: a value no
    bucket has, so that the server sends nothing (an empty ``in ()`` is not valid syntax).
    """
    wanted = sorted(set(buckets), key=int)
    if len(wanted) >= total:
        return SHARD_LABEL
    if not wanted:
        return f"{SHARD_LABEL}=none"
    return f"{SHARD_LABEL} in ({','.join(wanted)})"


View = frozenset[str]
"""The member names a ring is made of."""


class Ring:
    """A consistent-hash ring: each member owns the arcs ending at its virtual nodes.

    Adding or removing one member of N moves only the keys of the arcs it gains or loses,
    about 1/N of them; every other key keeps its owner.
    """

    __slots__ = ("_owners", "_points", "members")

    def __init__(self, members: Iterable[str], *, vnodes: int = DEFAULT_VNODES) -> None:
        if vnodes < 1:
            raise ValueError(f"A ring needs at least 1 virtual node per member, not {vnodes}.")
        self.members: View = frozenset(members)
        points = sorted(
            (_hash(f"{member}#{index}"), member)
            for member in self.members
            for index in range(vnodes)
        )
        self._points = [point for point, _ in points]
        self._owners = [member for _, member in points]

    def owner(self, key: str) -> str | None:
        """The member that owns ``key`` (``None`` for an empty ring)."""
        if not self._points:
            return None
        index = bisect.bisect_left(self._points, _hash(key))
        return self._owners[index % len(self._owners)]


def encode_drained(view: View, token: str) -> str:
    return json.dumps({"members": sorted(view), "token": token}, separators=(",", ":"))


def decode_drained(value: object) -> tuple[View | None, str | None]:
    """The view and token of a drained annotation; ``(None, None)`` if absent or malformed
    (a member whose view cannot be read is never taken as drained for anything)."""
    if not isinstance(value, str):
        return None, None
    try:
        data = json.loads(value)
    except ValueError:
        return None, None
    if not isinstance(data, dict):
        return None, None
    members, token = data.get("members"), data.get("token")
    if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
        return None, None
    return frozenset(members), token if isinstance(token, str) else None


@dataclasses.dataclass(frozen=True)
class Member:
    """What one ring member's Lease says."""

    name: str
    """The Lease's name: the member's name on the ring."""
    holder: str | None
    duration: float
    """``spec.leaseDurationSeconds``: how long the Lease holds after each renewal."""
    renewed: str | None
    """``spec.renewTime`` as written (compared for change only: never against our clock)."""
    drained: View | None
    token: str | None
    version: str | None
    """``metadata.resourceVersion``."""


def parse_member(lease: Mapping[str, Any], *, default_duration: float) -> Member | None:
    """A member from its Lease; ``None`` if it has no name."""
    metadata = lease.get("metadata") or {}
    spec = lease.get("spec") or {}
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        return None
    duration = spec.get("leaseDurationSeconds")
    if isinstance(duration, bool) or not isinstance(duration, int | float) or duration <= 0:
        duration = default_duration
    drained, token = decode_drained((metadata.get("annotations") or {}).get(DRAINED_ANNOTATION))
    renewed = spec.get("renewTime")
    holder = spec.get("holderIdentity")
    version = metadata.get("resourceVersion")
    return Member(
        name=name,
        holder=holder if isinstance(holder, str) else None,
        duration=float(duration),
        renewed=renewed if isinstance(renewed, str) else None,
        drained=drained,
        token=token,
        version=version if isinstance(version, str) else None,
    )


def lease_name(ring: str, identity: str) -> str:
    """A valid Lease name for a member: readable, and unique per (ring, identity).

    Identities may hold characters a name cannot (``user@host/20240101/abc``); a short hash of
    the original keeps two identities that read the same apart.
    """
    readable = _NAME_INVALID.sub("-", f"{ring}-{identity}".lower()).strip("-")[:200]
    digest = hashlib.blake2b(f"{ring}\0{identity}".encode(), digest_size=4).hexdigest()
    return f"{readable}-{digest}"


def format_micro_time(moment: datetime.datetime) -> str:
    """Kubernetes' MicroTime: RFC 3339 with microseconds, in UTC."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_body(
    *,
    name: str,
    namespace: str,
    ring: str,
    holder: str,
    duration: float,
    now: datetime.datetime,
) -> dict[str, Any]:
    """A member's Lease as created (or taken over): held by us, claiming nothing yet."""
    stamp = format_micro_time(now)
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {RING_LABEL: ring},
        },
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": max(1, round(duration)),
            "acquireTime": stamp,
            "renewTime": stamp,
        },
    }
