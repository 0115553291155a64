"""Peering without I/O: peer records as Kopf stores them, expiry, and the pause decision.

Operators that share a peering object (``KopfPeering`` in a namespace, or
``ClusterKopfPeering``) write their keep-alive records into its ``status``, keyed by identity::

    status:
      <identity>: {priority: 0, lifetime: 60, lastseen: "2026-03-01T12:00:00.123456+00:00"}

The format is Kopf's exactly, so Kopf operators and trioperator ones see each other: a record
is alive until ``lastseen + lifetime``; a ``null`` removes it. The runtime side (keep-alives,
watching the object) is in ``trioperator._runtime.coordination.peering``.
"""

from __future__ import annotations

import dataclasses
import datetime
import getpass
import os
import random
import socket
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from trioperator._client.resources import Resource
from trioperator._engine.settings import PeeringSettings
from trioperator._util import clock
from trioperator._util.addresses import is_ip_address

__all__ = [
    "CLUSTER_PEERING_PLURAL",
    "DEFAULT_LIFETIME",
    "DEV_PRIORITY",
    "PEERING_GROUPS",
    "NAMESPACED_PEERING_PLURAL",
    "Peer",
    "PeeringDecision",
    "cleanup_patch",
    "decide",
    "descriptive_hostname",
    "detect_own_id",
    "keepalive_interval",
    "keepalive_patch",
    "parse_peers",
    "select_peering_resources",
]

DEFAULT_LIFETIME: Final = 60
"""Seconds a record without a ``lifetime`` is trusted (Kopf's hard-coded value)."""

DEV_PRIORITY: Final = 666
"""The priority of ``--dev``."""

CLUSTER_PEERING_PLURAL: Final = "clusterkopfpeerings"
NAMESPACED_PEERING_PLURAL: Final = "kopfpeerings"
PEERING_GROUPS: Final = ("kopf.dev", "zalando.org")
"""Current group first; the legacy group is served only if its CRDs are what the cluster has."""


def _parse_time(value: str) -> datetime.datetime:
    # Kopf writes isoformat() of an aware UTC datetime; Python parses that (and a trailing Z).
    parsed = datetime.datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.UTC)
    return parsed


@dataclasses.dataclass(frozen=True)
class Peer:
    """One operator's keep-alive record, as found in (or written to) the peering object."""

    identity: str
    priority: int
    lifetime: int
    """Seconds."""
    lastseen: datetime.datetime

    @property
    def deadline(self) -> datetime.datetime:
        return self.lastseen + datetime.timedelta(seconds=self.lifetime)

    def is_dead(self, now: datetime.datetime) -> bool:
        return self.deadline <= now

    def as_dict(self) -> dict[str, Any]:
        """The record's value under its identity, exactly in Kopf's format."""
        return {
            "priority": int(self.priority),
            "lifetime": int(self.lifetime),
            "lastseen": self.lastseen.isoformat(),
        }

    def __repr__(self) -> str:
        # Shaped like Kopf's, since it shows up in the pausing log lines.
        fields = ", ".join(f"{key}={value!r}" for key, value in self.as_dict().items())
        return f"<Peer {self.identity}: {fields}>"

    @classmethod
    def parse(cls, identity: str, record: Any, *, now: datetime.datetime) -> Peer | None:
        """A peer from its record; ``None`` for what is not a record (e.g. a ``null`` left over).

        Missing fields default as in Kopf (priority 0, lifetime 60 s, last seen now); unknown
        keys are ignored for forward compatibility. Unparseable values count as missing: one
        malformed record must not stop the operator from seeing the others.
        """
        if not isinstance(record, Mapping):
            return None
        priority = _int_or(record.get("priority"), 0)
        lifetime = _int_or(record.get("lifetime"), DEFAULT_LIFETIME)
        lastseen = now
        raw = record.get("lastseen")
        if isinstance(raw, str):
            try:
                lastseen = _parse_time(raw)
            except ValueError:
                pass
        return cls(identity=identity, priority=priority, lifetime=lifetime, lastseen=lastseen)


def _int_or(value: Any, default: int) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return default
    return default


def parse_peers(status: Any, *, now: datetime.datetime) -> list[Peer]:
    """All the records of a peering object's ``status`` (anything else there is ignored)."""
    if not isinstance(status, Mapping):
        return []
    peers = []
    for identity, record in status.items():
        peer = Peer.parse(str(identity), record, now=now)
        if peer is not None:
            peers.append(peer)
    return peers


@dataclasses.dataclass(frozen=True)
class PeeringDecision:
    """What one look at the peering object means for this operator."""

    peers: Sequence[Peer]
    """Every record, ours included (for the log line of a same-priority pause)."""
    dead: Sequence[Peer]
    """Expired records: removed from the object by whoever sees them."""
    higher: Sequence[Peer]
    """Live peers with a higher priority than ours: we pause in their favour."""
    same: Sequence[Peer]
    """Live peers (not us) with our priority: a conflict, everyone pauses."""

    @property
    def pause(self) -> bool:
        return bool(self.higher or self.same)

    def wake_up_at(self) -> datetime.datetime | None:
        """When the first blocking peer expires unless it renews its record: look again then."""
        deadlines = [peer.deadline for peer in (*self.higher, *self.same)]
        return min(deadlines) if deadlines else None


def decide(status: Any, *, identity: str, priority: int, now: datetime.datetime) -> PeeringDecision:
    """Judge the records of a peering object's ``status`` for the operator ``identity``."""
    peers = parse_peers(status, now=now)
    dead = [peer for peer in peers if peer.is_dead(now)]
    live = [peer for peer in peers if not peer.is_dead(now) and peer.identity != identity]
    return PeeringDecision(
        peers=peers,
        dead=dead,
        higher=[peer for peer in live if peer.priority > priority],
        same=[peer for peer in live if peer.priority == priority],
    )


def keepalive_patch(
    identity: str, *, priority: int, lifetime: int, now: datetime.datetime
) -> dict[str, Any]:
    """The merge-patch that renews our record; with ``lifetime <= 0``, the one removing it."""
    peer = Peer(identity=identity, priority=priority, lifetime=lifetime, lastseen=now)
    return {"status": {identity: None if peer.is_dead(now) else peer.as_dict()}}


def cleanup_patch(peers: Iterable[Peer]) -> dict[str, Any]:
    """The merge-patch that removes the records of (dead) peers."""
    return {"status": {peer.identity: None for peer in peers}}


def keepalive_interval(lifetime: int, *, rng: random.Random | None = None) -> int:
    """Seconds between keep-alives: 5-10 s before our record expires (jittered, so that many
    operators do not write at once), never more often than once a second."""
    jitter = (rng or random).randint(5, 10)
    return max(1, min(lifetime, max(1, lifetime - jitter)))


def detect_own_id(*, manual: bool = False) -> str:
    """This operator's identity: ``POD_ID`` if set (the pod's name, via the downward API),
    else ``user@host/YYYYmmddHHMMSS/xyz`` (``user@host`` for manual freezes), as Kopf does."""
    pod = os.environ.get("POD_ID")
    if pod is not None:
        return pod
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry for the uid (e.g. in some containers)
        user = str(os.getuid())
    host = descriptive_hostname()
    if manual:
        return f"{user}@{host}"
    now = clock.now().strftime("%Y%m%d%H%M%S")
    suffix = "".join(random.choices("abcdefhijklmnopqrstuvwxyz0123456789", k=3))
    return f"{user}@{host}/{now}/{suffix}"


def descriptive_hostname() -> str:
    """The name that identifies this machine best, chosen as Kopf chooses it.

    The same choice matters: ``freeze``/``resume`` of either framework, run on one machine,
    must write and remove the same ``user@host`` record. Among the names the resolver knows for
    this host, a dotted one (an FQDN) wins, then any plain one; IP addresses, ``*.arpa``
    pseudo-names and ``localhost`` identify nothing and are skipped; failing all, the bare host
    name. Trailing ``.local``/``.localdomain`` say nothing either and are cut off.
    """
    plain = socket.gethostname()
    try:
        primary, aliases, addresses = socket.gethostbyaddr(plain)
    except OSError:
        return _without_useless_suffixes(plain)
    names = [primary, *aliases, *addresses]
    meaningful = [name for name in names if not name.endswith(".arpa") and not is_ip_address(name)]
    dotted = [name for name in meaningful if "." in name]
    undotted = [name for name in meaningful if "." not in name and name != "localhost"]
    return _without_useless_suffixes((dotted or undotted or [plain])[0])


def _without_useless_suffixes(hostname: str) -> str:
    while hostname.endswith((".local", ".localdomain")):
        hostname = hostname.removesuffix(".local").removesuffix(".localdomain")
    return hostname


def select_peering_resources(
    discovered: Iterable[Resource], settings: PeeringSettings
) -> list[Resource]:
    """The peering resources this operator uses among those the cluster serves.

    None when standalone. Cluster-wide operators use ``clusterkopfpeerings``, namespaced ones
    ``kopfpeerings``; of either API group (``kopf.dev``, or the legacy ``zalando.org``).
    """
    if settings.standalone:
        return []
    plural = CLUSTER_PEERING_PLURAL if settings.clusterwide else NAMESPACED_PEERING_PLURAL
    found = [
        resource
        for resource in discovered
        if resource.plural == plural
        and resource.group in PEERING_GROUPS
        and resource.namespaced == (not settings.clusterwide)
    ]
    # One version per group is enough (both would be the same objects); prefer v1.
    chosen: dict[str, Resource] = {}
    for resource in sorted(found, key=lambda r: (r.version != "v1", r.version)):
        chosen.setdefault(resource.group, resource)
    return [chosen[group] for group in PEERING_GROUPS if group in chosen]
