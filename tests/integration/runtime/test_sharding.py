"""Several replicas sharing the objects through Leases, against one fake API, on a mock clock."""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import trio
import trioperator as kopf
from trioperator._client.credentials import ConnectionInfo, Vault
from trioperator._engine.settings import OperatorSettings
from trioperator._engine.sharding import (
    RING_LABEL,
    SHARD_LABEL,
    Ring,
    bucket_key,
    bucket_of,
    lease_name,
)
from trioperator._runtime.program.operator import Operator
from trioperator.testing import FakeAPI

from .conftest import OBJ


@dataclasses.dataclass
class Run:
    replica: str
    name: str
    uid: str
    started: float
    ended: float | None = None


@dataclasses.dataclass
class Replica:
    name: str
    operator: Operator
    finished: trio.Event

    @property
    def lease(self) -> str:
        return lease_name("default", self.name)

    async def stop(self) -> None:
        self.operator.stop()
        with trio.fail_after(600):
            await self.finished.wait()


def _settings() -> OperatorSettings:
    settings = OperatorSettings()
    settings.sharding.enabled = True
    settings.sharding.namespace = "default"
    settings.peering.standalone = True
    return settings


@pytest.fixture
async def start(
    fake_api: FakeAPI, registry: kopf.OperatorRegistry
) -> AsyncIterator[Callable[[str], Awaitable[Replica]]]:
    async with trio.open_nursery() as nursery:
        replicas: list[Replica] = []

        async def start_replica(name: str, settings: OperatorSettings | None = None) -> Replica:
            vault = Vault({"fake": ConnectionInfo(server=fake_api.url, token="fake")})
            operator = Operator(
                registry=registry,
                settings=settings or _settings(),
                vault=vault,
                identity=name,
                memo=kopf.Memo(replica=name),
            )
            replica = Replica(name, operator, trio.Event())

            async def main() -> None:
                try:
                    await operator.main()
                finally:
                    replica.finished.set()

            nursery.start_soon(main, name=f"replica {name}")
            with trio.fail_after(120):
                await operator.ready_flag.wait()
            replicas.append(replica)
            return replica

        yield start_replica
        for replica in replicas:
            replica.operator.stop()


@pytest.fixture
def runs(registry: kopf.OperatorRegistry) -> list[Run]:
    """Every run of the create handler (it takes 2 s), by replica."""
    result: list[Run] = []

    @kopf.on.create("kopfexamples", registry=registry)
    async def create(name: str, uid: str, memo: kopf.Memo, **_: Any) -> None:
        run = Run(memo.get("replica", "solo"), name, uid, trio.current_time())
        result.append(run)
        await trio.sleep(2)
        run.ended = trio.current_time()

    return result


def _create(api: FakeAPI, count: int, prefix: str = "obj") -> list[str]:
    names = []
    for index in range(count):
        body = copy.deepcopy(OBJ)
        body["metadata"]["name"] = f"{prefix}-{index}"
        api.create_object("kopfexamples", body)
        names.append(body["metadata"]["name"])
    return names


async def _until(predicate: Callable[[], bool], limit: float = 600) -> None:
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110 -- polling what the replicas did
            await trio.sleep(0.1)


def _handled(runs: list[Run]) -> Counter[str]:
    return Counter(run.name for run in runs if run.ended is not None)


def _assert_no_overlap(runs: list[Run]) -> None:
    """No two runs of one object were in flight at the same time."""
    by_name: dict[str, list[Run]] = {}
    for run in runs:
        by_name.setdefault(run.name, []).append(run)
    for name, items in by_name.items():
        items.sort(key=lambda run: run.started)
        for earlier, later in itertools.pairwise(items):
            assert earlier.ended is not None, name
            assert later.started >= earlier.ended, (name, earlier, later)


async def test_sharding_is_off_by_default(
    autojump_clock: Any, run_operator: Any, runs: list[Run], fake_api: FakeAPI
) -> None:
    running = await run_operator()
    running.create()
    await _until(lambda: len(_handled(runs)) == 1)
    assert fake_api.objects("leases", "default") == []
    assert running.operator.context.shard is None


async def test_three_replicas_handle_every_object_exactly_once_by_the_ring(
    autojump_clock: Any, start: Any, runs: list[Run], fake_api: FakeAPI
) -> None:
    replicas = [await start(name) for name in ("alpha", "beta", "gamma")]
    names = _create(fake_api, 60)
    await _until(lambda: set(_handled(runs)) == set(names))
    await trio.sleep(30)  # nothing more comes
    assert _handled(runs) == Counter({name: 1 for name in names})

    leases = fake_api.objects("leases", "default")
    assert sorted(lease["metadata"]["name"] for lease in leases) == sorted(
        replica.lease for replica in replicas
    )
    assert all(lease["metadata"]["labels"][RING_LABEL] == "default" for lease in leases)
    ring = Ring(replica.lease for replica in replicas)
    for run in runs:
        assert lease_name("default", run.replica) == ring.owner(run.uid)
    assert {run.replica for run in runs} == {"alpha", "beta", "gamma"}


async def test_objects_created_while_members_join_are_handled_once(
    autojump_clock: Any, start: Any, runs: list[Run], fake_api: FakeAPI
) -> None:
    await start("alpha")
    names = _create(fake_api, 20, "early")
    await start("beta")
    names += _create(fake_api, 20, "middle")
    await trio.sleep(1)
    await start("gamma")
    names += _create(fake_api, 20, "late")
    await _until(lambda: set(_handled(runs)) == set(names))
    await trio.sleep(60)
    assert _handled(runs) == Counter({name: 1 for name in names})
    _assert_no_overlap(runs)


async def test_a_joining_member_takes_only_its_share_after_the_old_owners_drained(
    autojump_clock: Any, start: Any, registry: kopf.OperatorRegistry, fake_api: FakeAPI
) -> None:
    """Slow handlers are in flight when a member joins: the objects it takes over are not
    handled there before their old owner's handler has finished (and none twice)."""
    updates: list[Run] = []
    daemons: list[Run] = []

    @kopf.on.update("kopfexamples", registry=registry)
    async def update(name: str, uid: str, memo: kopf.Memo, **_: Any) -> None:
        run = Run(memo.get("replica", "solo"), name, uid, trio.current_time())
        updates.append(run)
        await trio.sleep(20)
        run.ended = trio.current_time()

    @kopf.daemon("kopfexamples", registry=registry)
    async def daemon(name: str, uid: str, memo: kopf.Memo, stopped: Any, **_: Any) -> None:
        run = Run(memo.get("replica", "solo"), name, uid, trio.current_time())
        daemons.append(run)
        try:
            while not stopped:
                await stopped.wait(10)
        finally:
            run.ended = trio.current_time()

    alpha, beta = await start("alpha"), await start("beta")
    names = _create(fake_api, 40)
    await _until(lambda: {run.name for run in daemons} == set(names))
    for name in names:
        fake_api.patch_object("kopfexamples", name, {"spec": {"field": "changed"}}, "default")
    await _until(lambda: len(updates) == len(names))
    joined_at = trio.current_time()
    gamma = await start("gamma")

    def settled() -> bool:
        running = {run.name for run in daemons if run.ended is None}
        return running == set(names) and all(run.ended is not None for run in updates)

    await _until(settled)
    await trio.sleep(30)

    before = Ring([alpha.lease, beta.lease])
    after = Ring([alpha.lease, beta.lease, gamma.lease])
    uids = {run.name: run.uid for run in daemons}
    moved = {name for name in names if before.owner(uids[name]) != after.owner(uids[name])}
    assert moved, "the ring gives the third member some objects"
    assert all(after.owner(uids[name]) == gamma.lease for name in moved)
    # Each update ran once, on its owner then, to its end: none was started again by gamma.
    assert Counter(run.name for run in updates) == Counter({name: 1 for name in names})
    assert all(run.replica != "gamma" for run in updates)
    assert all(run.started < joined_at for run in updates)
    # The daemons of moved objects: stopped on the old owner before they started on gamma.
    _assert_no_overlap(daemons)
    for name in moved:
        (old, new) = sorted((r for r in daemons if r.name == name), key=lambda r: r.started)
        assert (old.replica, new.replica) == (
            "alpha" if before.owner(uids[name]) == alpha.lease else "beta",
            "gamma",
        )
    # The others kept theirs: never stopped, never restarted.
    for name in set(names) - moved:
        assert [run.ended for run in daemons if run.name == name] == [None]


async def test_a_member_that_cannot_renew_fences_itself_and_its_objects_are_taken_over(
    autojump_clock: Any, start: Any, runs: list[Run], fake_api: FakeAPI, logs: Any
) -> None:
    alpha, beta = await start("alpha"), await start("beta")
    names = _create(fake_api, 20, "first")
    await _until(lambda: set(_handled(runs)) == set(names))

    failing = fake_api.inject("PATCH", f"*/leases/{beta.lease}", status=500, times=None)
    broken_at = trio.current_time()
    await _until(lambda: logs.count("Fenced (not renewed within 10.0 s)") == 1)
    fenced_at = logs.times("Fenced (not renewed")[0]
    assert fenced_at is not None
    assert fenced_at - broken_at <= 10 + 3  # the deadline after the last renewal sent

    later = _create(fake_api, 20, "second")
    await _until(lambda: set(_handled(runs)) >= set(later))
    assert all(run.replica == "alpha" for run in runs if run.name in later)
    first_taken = min(run.started for run in runs if run.name in later)
    # Beta's Lease (15 s) + the margin (5 s), counted from its last renewal at the latest.
    assert first_taken - broken_at <= 15 + 5 + 3 + 1

    fake_api.remove_injection(failing)
    await _until(lambda: logs.count("no longer fenced") == 1)
    third = _create(fake_api, 30, "third")
    await _until(lambda: set(_handled(runs)) >= set(third))
    assert {run.replica for run in runs if run.name in third} == {"alpha", "beta"}
    await trio.sleep(30)
    assert _handled(runs) == Counter({name: 1 for name in names + later + third})
    _assert_no_overlap(runs)
    assert not alpha.operator.context.shard.fenced  # type: ignore[union-attr]


async def test_a_leaving_member_releases_its_lease_and_its_objects_move_at_once(
    autojump_clock: Any, start: Any, runs: list[Run], fake_api: FakeAPI
) -> None:
    alpha, beta = await start("alpha"), await start("beta")
    await beta.stop()
    assert [lease["metadata"]["name"] for lease in fake_api.objects("leases", "default")] == [
        alpha.lease
    ]
    stopped_at = trio.current_time()
    names = _create(fake_api, 20)
    await _until(lambda: set(_handled(runs)) == set(names))
    assert max(run.started for run in runs) - stopped_at < 5  # no waiting for an expiry
    assert {run.replica for run in runs} == {"alpha"}


async def test_a_dead_members_lease_is_waited_out_then_deleted(
    autojump_clock: Any, start: Any, runs: list[Run], fake_api: FakeAPI
) -> None:
    """A crashed member left its Lease claiming a view: nothing is served before it has
    been silent for its duration plus the margin; later, it is cleaned away."""
    ghost = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": "ghost",
            "namespace": "default",
            "labels": {RING_LABEL: "default"},
            "annotations": {"trioperator.dev/shard-drained": '{"members":["ghost"],"token":"t"}'},
        },
        "spec": {"holderIdentity": "ghost", "leaseDurationSeconds": 15},
    }
    fake_api.create_object("leases", ghost)
    started_at = trio.current_time()
    await start("alpha")
    names = _create(fake_api, 5)
    await _until(lambda: set(_handled(runs)) == set(names))
    assert min(run.started for run in runs) - started_at >= 15 + 5
    await _until(
        lambda: (
            [lease["metadata"]["name"] for lease in fake_api.objects("leases", "default")]
            == [lease_name("default", "alpha")]
        )
    )


async def test_a_member_that_leaves_before_the_ring_settled_loses_no_object(
    autojump_clock: Any, start: Any, runs: list[Run], fake_api: FakeAPI
) -> None:
    """The membership flaps back to what the others serve: the objects created meanwhile
    (skipped as the newcomer's) are picked up without a new event."""
    await start("alpha")
    await start("beta")
    early = _create(fake_api, 20, "early")
    await trio.sleep(0.5)  # their handlers are in flight: the old owners drain slowly
    gamma = await start("gamma")
    names = _create(fake_api, 40, "flap")
    await gamma.stop()
    await _until(lambda: set(_handled(runs)) == set(early + names))
    await trio.sleep(60)
    assert _handled(runs) == Counter({name: 1 for name in early + names})
    _assert_no_overlap(runs)


async def test_a_lease_held_by_another_holder_is_taken_over_only_once_it_is_silent(
    autojump_clock: Any, start: Any, runs: list[Run], fake_api: FakeAPI, logs: Any
) -> None:
    """Two processes with one identity (a misconfiguration, or a pod's previous container
    whose holder differs): the newcomer waits until the other stops renewing."""
    name = lease_name("default", "alpha")
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "default", "labels": {RING_LABEL: "default"}},
        "spec": {"holderIdentity": "alpha-elsewhere", "leaseDurationSeconds": 15},
    }
    fake_api.create_object("leases", lease)
    async with trio.open_nursery() as nursery:
        started = trio.Event()

        async def starting() -> None:
            await start("alpha")
            started.set()

        nursery.start_soon(starting)
        for tick in range(10):  # the other holder renews for 30 s
            fake_api.patch_object(
                "leases",
                name,
                {"spec": {"renewTime": f"2024-01-01T00:00:{tick:02d}.000000Z"}},
                "default",
            )
            silent_at = trio.current_time()
            await trio.sleep(3)
        assert not started.is_set()
        assert logs.count("is held by 'alpha-elsewhere': waiting") == 1
        await started.wait()
        assert 15 + 5 <= trio.current_time() - silent_at <= 15 + 5 + 3 + 1
    assert fake_api.get_object("leases", name, "default")["spec"]["holderIdentity"] == "alpha"
    names = _create(fake_api, 3)
    await _until(lambda: set(_handled(runs)) == set(names))


async def test_a_member_whose_lease_is_deleted_fences_itself_and_rejoins(
    autojump_clock: Any, start: Any, runs: list[Run], fake_api: FakeAPI, logs: Any
) -> None:
    alpha, beta = await start("alpha"), await start("beta")
    fake_api.delete_object("leases", beta.lease, "default")
    await _until(lambda: logs.count("Fenced (our Lease was deleted)") == 1)
    await _until(lambda: fake_api.has_object("leases", beta.lease, "default"))
    await _until(lambda: logs.count("among 2 member(s)") >= 4)  # both, before and after
    names = _create(fake_api, 30)
    await _until(lambda: set(_handled(runs)) == set(names))
    await trio.sleep(30)
    assert _handled(runs) == Counter({name: 1 for name in names})
    assert {run.replica for run in runs} == {"alpha", "beta"}
    assert not alpha.operator.context.shard.fenced  # type: ignore[union-attr]


async def test_owned_objects_go_with_their_owner_and_cluster_scoped_ones_are_shared(
    autojump_clock: Any, start: Any, registry: kopf.OperatorRegistry, fake_api: FakeAPI
) -> None:
    handled: dict[tuple[str, str], list[str]] = {}

    # Async, for the last sleep to show that no object is handled twice (a second run in a sync
    # handler's worker thread could still be under way: the autojump clock does not wait for it).
    @kopf.on.create("kopfexamples", registry=registry)
    async def parent(name: str, memo: kopf.Memo, **_: Any) -> None:
        handled.setdefault(("parent", name), []).append(memo["replica"])

    @kopf.on.create("configmaps", registry=registry)
    async def child(name: str, memo: kopf.Memo, **_: Any) -> None:
        handled.setdefault(("child", name), []).append(memo["replica"])

    @kopf.on.create("namespaces", registry=registry)
    async def namespace(name: str, memo: kopf.Memo, **_: Any) -> None:
        handled.setdefault(("namespace", name), []).append(memo["replica"])

    for name in ("alpha", "beta", "gamma"):
        await start(name)
    parents = _create(fake_api, 30, "parent")
    for name in parents:
        uid = fake_api.get_object("kopfexamples", name, "default")["metadata"]["uid"]
        owner = {"apiVersion": "kopf.dev/v1", "kind": "KopfExample", "name": name, "uid": uid}
        fake_api.create_object(
            "configmaps",
            {
                "metadata": {
                    "name": f"{name}-child",
                    "namespace": "default",
                    "ownerReferences": [{**owner, "controller": True}],
                }
            },
        )
    spaces = [f"space-{index}" for index in range(30)]
    for name in spaces:
        fake_api.create_namespace(name)

    wanted = {("parent", n) for n in parents} | {("child", f"{n}-child") for n in parents}
    wanted |= {("namespace", n) for n in spaces}
    await _until(lambda: wanted <= set(handled))
    await trio.sleep(30)
    assert all(len(handled[key]) == 1 for key in wanted)
    for name in parents:
        assert handled["child", f"{name}-child"] == handled["parent", name]
    assert len({handled["parent", name][0] for name in parents}) == 3
    assert len({handled["namespace", name][0] for name in spaces}) == 3


# ------------------------------------------------------------------ labels mode


def _labels_settings() -> OperatorSettings:
    settings = _settings()
    settings.sharding.mode = "labels"
    settings.sharding.buckets = 32
    return settings


def _bucket_owner(ring: Ring, body: dict[str, Any]) -> str | None:
    return ring.owner(bucket_key(body["metadata"]["labels"][SHARD_LABEL]))


async def test_labels_mode_labels_each_object_once_and_each_replica_watches_its_buckets(
    autojump_clock: Any, start: Any, runs: list[Run], fake_api: FakeAPI
) -> None:
    replicas = [await start(name, _labels_settings()) for name in ("alpha", "beta", "gamma")]
    names = _create(fake_api, 60)
    await _until(lambda: set(_handled(runs)) == set(names))
    await trio.sleep(30)  # nothing more comes
    assert _handled(runs) == Counter({name: 1 for name in names})

    ring = Ring(replica.lease for replica in replicas)
    bodies = {obj["metadata"]["name"]: obj for obj in fake_api.objects("kopfexamples", "default")}
    for run in runs:
        body = bodies[run.name]
        # The bucket is a function of the object, and its owner on the ring handled it.
        assert body["metadata"]["labels"][SHARD_LABEL] == bucket_of(body, 32)
        assert lease_name("default", run.replica) == _bucket_owner(ring, body)
    assert {run.replica for run in runs} == {"alpha", "beta", "gamma"}

    # Each replica's watches of the objects select its buckets (the last ones, once settled),
    # and together they cover every bucket exactly once.
    watches = [
        request.query["labelSelector"]
        for request in fake_api.requests
        if request.path.endswith("/kopfexamples") and request.query.get("watch") == "true"
    ]
    selected = [selector for selector in watches if selector.startswith(f"{SHARD_LABEL} in (")]
    assert selected, watches
    assert all(
        # Unlabelled ones (the labeller), none (not serving yet), all (alone), or some.
        selector in (f"!{SHARD_LABEL}", f"{SHARD_LABEL}=none", SHARD_LABEL) or selector in selected
        for selector in watches
    )
    last: dict[str, set[str]] = {}
    for replica in replicas:
        mine = {
            str(bucket)
            for bucket in range(32)
            if ring.owner(bucket_key(str(bucket))) == replica.lease
        }
        assert f"{SHARD_LABEL} in ({','.join(sorted(mine, key=int))})" in selected
        last[replica.name] = mine
    assert sorted(b for mine in last.values() for b in mine) == sorted(map(str, range(32)))


async def test_labels_mode_objects_created_while_members_join_and_leave_are_handled_once(
    autojump_clock: Any, start: Any, runs: list[Run], fake_api: FakeAPI
) -> None:
    alpha = await start("alpha", _labels_settings())
    names = _create(fake_api, 20, "early")
    await start("beta", _labels_settings())
    names += _create(fake_api, 20, "middle")
    await trio.sleep(1)
    await start("gamma", _labels_settings())
    names += _create(fake_api, 20, "late")
    await _until(lambda: set(_handled(runs)) == set(names))
    await alpha.stop()  # a graceful leave: its buckets move to the others
    names += _create(fake_api, 20, "after")
    await _until(lambda: set(_handled(runs)) == set(names))
    await trio.sleep(60)
    assert _handled(runs) == Counter({name: 1 for name in names})
    _assert_no_overlap(runs)
    assert {run.replica for run in runs if run.name.startswith("after")} <= {"beta", "gamma"}
    # Labels are written once and never moved: the same bucket as when first labelled.
    for body in fake_api.objects("kopfexamples", "default"):
        assert body["metadata"]["labels"][SHARD_LABEL] == bucket_of(body, 32)
