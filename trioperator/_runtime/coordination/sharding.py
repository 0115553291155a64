"""Sharding at runtime: this replica's Lease, the ring's members, and the hand-over of objects.

Task tree (in ``Operator._serve``, next to peering, around the serving nursery: our Lease is
released only once every watcher has ended)::

    run_sharding
    ├── renewer        our Lease renewed every ``renew_interval``; re-created if it vanished
    ├── fence          ``renew_deadline`` after the last successful renewal (as sent): fenced
    ├── observer       list + watch the Leases of the namespace; the ring's ones are the members
    └── controller     membership -> target view -> drain -> publish -> barrier -> serve

Every replica computes the ring itself from the live Leases and filters the watch events by
ownership (client-side); nothing is written on the objects. See docs/sharding.md for the
trade-off against a coordinator labelling objects for server-side label selectors.

The hand-over protocol. Each member publishes in its Lease the view it has *drained for* (D):
it works on no object that D assigns to someone else. A member works on an object ``k`` only
if ``k`` is its own under three views: the one it serves (S: entered through the barrier), the
one it published (D), and the one it observes now (T: the members with live Leases). So:

1. The observed membership changes (T != D): the filter narrows at once (no new events for
   the objects that T gives away), and those objects are drained: their workers finish the
   cycle in progress and take nothing more, their daemons and timers are stopped.
2. Once drained, publish D = T (with a fresh token).
3. Barrier: once our own Lease with that token is back on our watch (so our view of the others
   is at least as new as our publication), and every Lease that may still be working (live, or
   silent for less than its duration plus ``takeover_margin``) has published D = T too, serve
   S = T: the watchers list again and pick up the objects that T gives us.

Two members that serve at the same time have either entered the same view (whose shares are
disjoint), or one of them entered later and saw the other's publication; a member publishes
only what it has already drained for. A member that cannot renew fences itself (filter closed,
everything drained) before its Lease runs out at the others, and the others take its objects
over only after its Lease has been silent for its duration plus the margin (measured on their
own clocks: only clock rates matter, not their offsets).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import math
import os
import secrets
from collections.abc import Callable, Mapping
from typing import Any, Final

import trio

from trioperator._client.api import APIClient
from trioperator._client.errors import (
    APIConflictError,
    APIConnectionError,
    APIError,
    APINotFoundError,
)
from trioperator._client.resources import Resource
from trioperator._client.watching import RawWatchEvent, WatchingError
from trioperator._engine.bodies import RawEvent
from trioperator._engine.indexing import Indexers
from trioperator._engine.settings import OperatorSettings, ShardingSettings
from trioperator._engine.sharding import (
    DRAINED_ANNOTATION,
    LABELLER_KEY,
    RING_LABEL,
    SHARD_LABEL,
    Member,
    Ring,
    View,
    bucket_key,
    bucket_of,
    buckets_selector,
    encode_drained,
    format_micro_time,
    lease_body,
    lease_name,
    parse_member,
    ring_key,
)
from trioperator._engine.stoppers import DaemonStoppingReason
from trioperator._runtime.objects.daemon_keeper import DaemonsKeeper
from trioperator._runtime.objects.mailboxes import Mailbox
from trioperator._runtime.objects.memories import Memories, ObjectMemory
from trioperator._runtime.support.gates import OperatorPause
from trioperator._runtime.support.observing import observe_resource
from trioperator._runtime.support.waiting import first_of

__all__ = ["LEASES", "Shard", "ShardShare", "run_sharding", "shard_namespace"]

logger = logging.getLogger("trioperator.sharding")

LEASES: Final = Resource(
    group="coordination.k8s.io",
    version="v1",
    plural="leases",
    kind="Lease",
    singular="lease",
    namespaced=True,
    verbs=frozenset({"create", "delete", "get", "list", "patch", "update", "watch"}),
)

DRAIN_POLL: Final = 0.1
"""Seconds between looks at the objects being drained (their workers and daemons ending)."""

OBSERVER_RETRY_DELAY: Final = 5.0
"""Seconds before watching the Leases again after an error the stream gave up on."""

RELEASE_TIMEOUT: Final = 10.0
"""Seconds to delete our Lease on exit; after that, it expires on its own."""

STALE_FACTOR: Final = 4
"""A Lease silent for this many durations (plus the margin) is deleted by a live member."""


def shard_namespace(settings: ShardingSettings) -> str:
    """Where the ring's Leases live: as set, else the pod's namespace, else ``default``."""
    return settings.namespace or os.environ.get("POD_NAMESPACE") or "default"


@dataclasses.dataclass
class _Seen:
    member: Member
    observed_at: float
    """trio time when its renewal (or holder) was last seen to change."""


@dataclasses.dataclass(eq=False)
class ShardShare:
    """What one watcher serves of the ring: its admitted objects' keys -> their ring keys, and
    the watcher's parts that a drain stops (given explicitly: the contexts hold the shard)."""

    shard: Shard
    streams: dict[str, Mailbox]
    memories: Memories
    indexers: Indexers
    daemons: Callable[[], DaemonsKeeper | None]
    keys: dict[str, str] = dataclasses.field(default_factory=dict)
    draining: dict[str, ObjectMemory | None] = dataclasses.field(default_factory=dict)
    """Objects being drained, with their memory as it was when the drain began: a relisting
    may forget the memory meanwhile, but its daemons are still ending."""

    def admit(self, key: str, event: RawEvent) -> bool:
        """Whether the watcher routes this event to a worker (see :meth:`Shard.admit`)."""
        return self.shard.admit(self, key, event)


class Shard:
    """This replica's place in its ring: membership, the filter of objects, the hand-over."""

    def __init__(
        self,
        *,
        api: APIClient,
        settings: OperatorSettings,
        identity: str,
        now: Callable[[], datetime.datetime],
    ) -> None:
        self._api = api
        self._settings = settings
        self.identity = identity
        self.ring = settings.sharding.ring
        self.namespace = shard_namespace(settings.sharding)
        self.name = lease_name(self.ring, identity)
        """Our member name: the name of our Lease."""
        self._now = now
        self.fenced = True
        """Not holding our Lease (not yet, or not renewed in time): working on nothing."""
        self.valid_until = -math.inf
        self.serving: View | None = None
        self.published: View | None = None
        self.token: str | None = None
        self.target: View = frozenset()
        self.generation = 0
        """Bumped whenever the set of our objects may have grown (the watchers list again)."""
        self._seen: dict[str, _Seen] = {}
        self._listed = False
        self._rings: dict[View, Ring] = {}
        self._shares: list[ShardShare] = []
        self._drained_for: tuple[object, ...] | None = None
        self._regrown = False
        """The membership flapped back to the view we serve: objects drained meanwhile are
        ours again without a barrier, and were skipped: the watchers must list again."""
        self.held = False
        """Whether we have held our Lease at all (else there is nothing to release)."""
        self._changed = trio.Event()
        self._reassigned = trio.Event()
        self.divides_traffic = settings.sharding.mode == "labels"
        """Labels mode: objects are placed by their bucket label, and the watchers select
        only our buckets server-side (see :meth:`selector`)."""
        self.buckets = settings.sharding.buckets
        self._bucket_names = frozenset(str(bucket) for bucket in range(self.buckets))

    # ------------------------------------------------------------------ the filter

    def _ring(self, view: View) -> Ring:
        ring = self._rings.get(view)
        if ring is None:
            if len(self._rings) > 8:
                self._rings.clear()  # views come and go; a few are enough
            ring = self._rings[view] = Ring(view, vnodes=self._settings.sharding.vnodes)
        return ring

    def owns(self, key: str) -> bool:
        """Whether we may work on the object with this ring key now."""
        if self.fenced or self.serving is None or self.published is None:
            return False
        return all(
            self._ring(view).owner(key) == self.name
            for view in {self.serving, self.published, self.target}
        )

    def placement(self, body: Mapping[str, Any]) -> str:
        """The ring key an object is placed by: its own (filter mode), or its bucket's."""
        if not self.divides_traffic:
            return ring_key(body)
        labels = (body.get("metadata") or {}).get("labels") or {}
        bucket = labels.get(SHARD_LABEL)
        if bucket not in self._bucket_names:
            # Not labelled yet, or by hand with something else: where its label will go.
            bucket = bucket_of(body, self.buckets)
        return bucket_key(bucket)

    def selector(self) -> str:
        """Labels mode: the label selector of the objects we may serve until the next
        reassignment (our buckets in the view we serve; nothing while we serve none).

        Always a superset of what :meth:`owns` admits: that needs ownership in the served view
        too, and the watchers list again (with a new selector) whenever it changes to a view
        that gives us more (``generation``).
        """
        view = None if self.fenced else self.serving
        if view is None:
            return buckets_selector((), self.buckets)
        ring = self._ring(view)
        mine = [
            bucket for bucket in self._bucket_names if ring.owner(bucket_key(bucket)) == self.name
        ]
        return buckets_selector(mine, self.buckets)

    def labels_new_objects(self) -> bool:
        """Labels mode: whether we label the ring's unlabelled objects (one member does, as
        the members it sees now place a fixed key; two at once during a change do no harm:
        the label's value is a function of the object)."""
        if self.fenced or not self.divides_traffic:
            return False
        return self._ring(self.target).owner(LABELLER_KEY) == self.name

    async def wait_changed(self) -> None:
        """Return at the next change of what we know of the ring (Leases seen, fencing)."""
        await self._changed.wait()

    def admit(self, share: ShardShare, key: str, event: RawEvent) -> bool:
        """Whether the watcher routes this event to a worker; remembers what it admits."""
        rkey = self.placement(event["object"])
        if key in share.draining or not self.owns(rkey):
            # Still draining (ours again already, after a flap): the relisting that follows
            # the drain brings it back, to a new worker.
            return False
        if event["type"] == "DELETED":
            share.keys.pop(key, None)  # nothing more will come for it
        else:
            share.keys[key] = rkey
        return True

    def _reassign(self) -> None:
        self._regrown = False
        self.generation += 1
        self._reassigned.set()
        self._reassigned = trio.Event()

    def join(
        self,
        *,
        streams: dict[str, Mailbox],
        memories: Memories,
        indexers: Indexers,
        daemons: Callable[[], DaemonsKeeper | None],
    ) -> ShardShare:
        """A watcher's share: its parts, for the drains."""
        share = ShardShare(self, streams, memories, indexers, daemons)
        self._shares.append(share)
        return share

    def leave(self, share: ShardShare) -> None:
        if share in self._shares:
            self._shares.remove(share)

    async def wait_reassigned(self, generation: int) -> None:
        """Return when our share may have grown since ``generation`` (list again then)."""
        while self.generation == generation:
            await self._reassigned.wait()

    def _touch(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    # ------------------------------------------------------------------ draining

    def _drain(self) -> bool:
        """Stop the work on every object we may not work on; whether all of it has ended."""
        signature = (self.fenced, self.serving, self.published, self.target)
        if signature == self._drained_for:
            return True  # nothing admitted since can be unowned: the filter is the same
        drained = True
        for share in list(self._shares):
            for key, rkey in list(share.keys.items()):
                if key not in share.draining and self.owns(rkey):
                    continue
                if key not in share.draining:
                    share.draining[key] = share.memories.get(key)
                busy = False
                mailbox = share.streams.get(key)
                if mailbox is not None and mailbox.parked:
                    mailbox.discard()  # a parked worker has no task to end: it is gone now
                    del share.streams[key]
                elif mailbox is not None:
                    mailbox.discard()  # its worker ends after the cycle in progress
                    busy = True
                memory = share.draining[key]
                keeper = share.daemons()
                if memory is not None and memory.daemons.running:
                    if keeper is not None:
                        keeper.stop_all(
                            memory.daemons.running.values(),
                            DaemonStoppingReason.OPERATOR_PAUSING,
                        )
                    busy = True
                if busy:
                    drained = False
                    continue
                del share.keys[key]
                del share.draining[key]
                if share.memories.get(key) is memory:
                    share.memories.forget(key)
                share.indexers.discard_all(key)
        if drained:
            self._drained_for = signature
        return drained

    # ------------------------------------------------------------------ the members

    def _expiry(self, seen: _Seen) -> float:
        return seen.observed_at + seen.member.duration

    def _live(self, now: float) -> View:
        members = {
            name
            for name, seen in self._seen.items()
            if name != self.name and self._expiry(seen) > now
        }
        if not self.fenced:
            members.add(self.name)
        return frozenset(members)

    def _claimers(self, now: float) -> list[Member]:
        margin = self._settings.sharding.takeover_margin
        return [
            seen.member
            for name, seen in self._seen.items()
            if name != self.name and self._expiry(seen) + margin > now
        ]

    def _next_deadline(self, now: float) -> float:
        margin = self._settings.sharding.takeover_margin
        deadlines = [
            moment
            for name, seen in self._seen.items()
            if name != self.name
            for moment in (self._expiry(seen), self._expiry(seen) + margin)
            if moment > now
        ]
        return min(deadlines, default=math.inf)

    def _fresh(self) -> bool:
        own = self._seen.get(self.name)
        return own is not None and self.token is not None and own.member.token == self.token

    def _barrier(self, now: float, target: View) -> bool:
        return self._fresh() and all(m.drained == target for m in self._claimers(now))

    def observe(self, lease: Mapping[str, Any], *, deleted: bool = False) -> None:
        """A Lease of the namespace as the watch shows it (the ring's ones are kept)."""
        labels = (lease.get("metadata") or {}).get("labels") or {}
        member = parse_member(lease, default_duration=self._settings.sharding.lease_duration)
        if member is None:
            return
        if deleted or labels.get(RING_LABEL) != self.ring:
            if self._seen.pop(member.name, None) is not None:
                self._touch()
            return
        old = self._seen.get(member.name)
        if old is None or (old.member.renewed, old.member.holder) != (
            member.renewed,
            member.holder,
        ):
            observed_at = trio.current_time()
        else:
            observed_at = old.observed_at
        self._seen[member.name] = _Seen(member, observed_at)
        self._touch()

    def relisted(self, leases: list[Mapping[str, Any]]) -> None:
        """A complete listing: Leases not in it are gone (released)."""
        names = set()
        for lease in leases:
            self.observe(lease)
            names.add((lease.get("metadata") or {}).get("name"))
        for name in set(self._seen) - names:
            del self._seen[name]
        self._listed = True
        self._touch()

    @property
    def settled(self) -> bool:
        """Serving our share of the membership we see (no hand-over in progress)."""
        return not self.fenced and self.serving is not None and self.serving == self.target

    @property
    def members(self) -> View:
        """The members with live Leases, as we see them now (ourselves unless fenced)."""
        return self._live(trio.current_time())

    # ------------------------------------------------------------------ our Lease

    async def _write(self, patch: dict[str, Any]) -> dict[str, Any]:
        return await self._api.patch(
            LEASES, namespace=self.namespace, name=self.name, payload=patch, logger=logger
        )

    async def acquire(self) -> None:
        """Hold our Lease: create it, or take it over once nobody else renews it."""
        settings = self._settings.sharding
        waited_for: tuple[str | None, str | None] | None = None
        quiet_since = trio.current_time()
        while True:
            body = lease_body(
                name=self.name,
                namespace=self.namespace,
                ring=self.ring,
                holder=self.identity,
                duration=settings.lease_duration,
                now=self._now(),
            )
            sent = trio.current_time()
            try:
                try:
                    existing = await self._api.get(
                        LEASES, namespace=self.namespace, name=self.name, logger=logger
                    )
                except APINotFoundError:
                    await self._api.create(LEASES, namespace=self.namespace, body=body)
                    break
                holder = (existing.get("spec") or {}).get("holderIdentity")
                renewed = (existing.get("spec") or {}).get("renewTime")
                if holder not in (None, self.identity):
                    # Someone else holds it (a duplicate identity?): wait until it is silent.
                    if waited_for != (holder, renewed):
                        if waited_for is None:
                            logger.warning(
                                f"The Lease {self.name!r} is held by {holder!r}: waiting "
                                "until it is not renewed any more."
                            )
                        waited_for, quiet_since = (holder, renewed), trio.current_time()
                    silent = trio.current_time() - quiet_since
                    if silent < settings.lease_duration + settings.takeover_margin:
                        await trio.sleep(settings.renew_interval)
                        continue
                # Ours from a previous run (it is not running: we are), or abandoned. Whatever
                # it had drained for is void: we work on nothing yet.
                body["metadata"]["annotations"] = {DRAINED_ANNOTATION: None}
                await self._write({"metadata": body["metadata"], "spec": body["spec"]})
                break
            except APIConflictError:
                continue  # created meanwhile: look again
            except (APIError, APIConnectionError) as exc:
                logger.error(f"Cannot hold the Lease {self.name!r}; retrying: {exc}")
                await trio.sleep(settings.renew_interval)
        self._held(sent)
        self.published = self.token = None
        logger.info(f"Holding the Lease {self.namespace}/{self.name} of the ring {self.ring!r}.")

    def _held(self, sent: float) -> None:
        self.held = True
        self.valid_until = sent + self._settings.sharding.renew_deadline
        if self.fenced:
            self.fenced = False
            self._touch()

    def fence(self, why: str) -> None:
        if not self.fenced:
            logger.warning(f"Fenced ({why}): working on no object until the Lease is renewed.")
            self.fenced = True
            self.serving = None
            self._drain()  # begins now: nothing of ours may start from here on
            self._touch()

    async def renew_forever(self) -> None:
        settings = self._settings.sharding
        while True:
            await trio.sleep(settings.renew_interval)
            sent = trio.current_time()
            patch = {
                "spec": {
                    "renewTime": format_micro_time(self._now()),
                    "holderIdentity": self.identity,
                    "leaseDurationSeconds": max(1, round(settings.lease_duration)),
                }
            }
            try:
                await self._write(patch)
            except APINotFoundError:
                # Deleted under us: whoever deleted it released our objects. Stop at once.
                self.fence("our Lease was deleted")
                await self.acquire()
                continue
            except (APIError, APIConnectionError) as exc:
                logger.warning(f"Cannot renew the Lease {self.name!r}: {exc}")
                continue
            if trio.current_time() < sent + settings.renew_deadline:
                if self.fenced:
                    logger.info(f"The Lease {self.name!r} is renewed: no longer fenced.")
                self._held(sent)

    async def fence_when_late(self) -> None:
        while True:
            if self.fenced:
                await self._wait_change(math.inf)
                continue
            await trio.sleep_until(self.valid_until)
            if trio.current_time() >= self.valid_until and not self.fenced:
                self.fence(f"not renewed within {self._settings.sharding.renew_deadline} s")

    async def _publish(self, view: View) -> None:
        token = secrets.token_hex(8)
        await self._write(
            {"metadata": {"annotations": {DRAINED_ANNOTATION: encode_drained(view, token)}}}
        )
        self.published, self.token = view, token
        logger.debug(f"Drained for the members {sorted(view)}.")

    async def release(self) -> None:
        """Delete our Lease (all our work has ended): the others take over without waiting."""
        with trio.move_on_after(RELEASE_TIMEOUT, shield=True):
            try:
                await self._api.delete(LEASES, namespace=self.namespace, name=self.name)
                logger.info(f"Released the Lease {self.name!r}.")
            except APINotFoundError:
                pass
            except (APIError, APIConnectionError) as exc:
                logger.warning(f"Cannot release the Lease {self.name!r}; it expires: {exc}")

    # ------------------------------------------------------------------ observing

    async def observe_forever(self) -> None:
        while True:
            # Jittered: the replicas that lost their streams together do not retry together.
            delay = self._api.retry_delay(OBSERVER_RETRY_DELAY)
            try:
                await self._observe()
            except* (APIError, APIConnectionError, WatchingError) as group:
                logger.error(
                    f"Cannot watch the Leases in {self.namespace!r}; retrying in "
                    f"{delay:.1f} seconds: {group.exceptions[0]}"
                )
            await trio.sleep(delay)

    async def _observe(self) -> None:
        async def on_listing(leases: list[Mapping[str, Any]]) -> None:
            self.relisted(leases)

        async def on_event(event: RawWatchEvent) -> None:
            self.observe(event["object"], deleted=event["type"] == "DELETED")

        await observe_resource(
            self._api,
            LEASES,
            self.namespace,
            settings=self._settings.watching,
            keep=lambda event: event["object"],
            on_listing=on_listing,
            on_event=on_event,
            logger=logger,
        )

    # ------------------------------------------------------------------ the controller

    async def _wait_change(self, deadline: float) -> None:
        changed = self._changed
        with trio.move_on_at(deadline):
            await changed.wait()

    async def control_forever(self) -> None:
        settings = self._settings.sharding
        while True:
            now = trio.current_time()
            target = self._live(now)
            if target != self.target:
                if self._listed:
                    logger.info(f"Ring {self.ring!r}: members {sorted(target)}.")
                self.target = target
                self._regrown = self._regrown or target == self.serving
            drained = self._drain()
            wake = self._next_deadline(now)
            if not drained:
                wake = min(wake, now + DRAIN_POLL)
            elif self._regrown and self.serving == target and not self.fenced:
                self._reassign()
                continue
            elif not self.fenced and self._listed and self.published != target:
                try:
                    await self._publish(target)
                except (APIError, APIConnectionError) as exc:
                    logger.warning(f"Cannot publish the drained view: {exc}")
                    await trio.sleep(settings.renew_interval)
                continue
            elif (
                not self.fenced
                and self.published == target
                and self.serving != target
                and self._barrier(now, target)
            ):
                self.serving = target
                self._reassign()
                logger.info(f"Serving the share of {self.name!r} among {len(target)} member(s).")
                continue
            await self._wait_change(wake)

    async def clean_forever(self) -> None:
        """Delete the Leases of members silent for long (crashed, never to return)."""
        settings = self._settings.sharding
        while True:
            await trio.sleep(settings.lease_duration)
            if self.fenced:
                continue
            now = trio.current_time()
            limit = STALE_FACTOR * settings.lease_duration + settings.takeover_margin
            for name, seen in list(self._seen.items()):
                if name == self.name or now - seen.observed_at < limit:
                    continue
                # Only the version we saw silent: a member that renewed meanwhile stays.
                options = {"preconditions": {"resourceVersion": seen.member.version}}
                try:
                    await self._api.request(
                        "DELETE",
                        LEASES.get_url(namespace=self.namespace, name=name),
                        payload={"apiVersion": "v1", "kind": "DeleteOptions", **options},
                        logger=logger,
                    )
                    logger.info(f"Deleted the Lease {name!r} of a member silent for long.")
                except (APIError, APIConnectionError) as exc:
                    logger.debug(f"Cannot delete the stale Lease {name!r}: {exc}")


async def run_sharding(
    *,
    api: APIClient,
    settings: OperatorSettings,
    identity: str,
    now: Callable[[], datetime.datetime],
    task_status: trio.TaskStatus[Shard] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Hold our Lease and follow the ring until cancelled; then release the Lease.

    Cancel it only after the serving has ended: the release tells the other members that
    our objects may be taken over at once.
    """
    shard = Shard(api=api, settings=settings, identity=identity, now=now)
    try:
        await shard.acquire()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(shard.renew_forever, name="shard renewer")
            nursery.start_soon(shard.fence_when_late, name="shard fence")
            nursery.start_soon(shard.observe_forever, name="shard observer")
            nursery.start_soon(shard.control_forever, name="shard controller")
            nursery.start_soon(shard.clean_forever, name="shard cleaner")
            task_status.started(shard)
            await trio.sleep_forever()
    finally:
        shard.fenced = True
        shard.serving = None
        if shard.held:
            await shard.release()


async def wait_paused_or_reassigned(
    pause: OperatorPause, shard: Shard | None, generation: int
) -> None:
    """Return when the operator pauses (peering), or when the watcher must list again because
    its shard's share may have grown since ``generation`` (``Shard.generation`` read before
    the listing began)."""
    if shard is None:
        await pause.wait_for(True)
        return
    await first_of(
        lambda: pause.wait_for(True),
        lambda: shard.wait_reassigned(generation),
    )
