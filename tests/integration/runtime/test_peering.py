"""Peering against the fake API: keep-alives, pausing for higher priorities, resuming."""

from __future__ import annotations

import copy
import datetime
import itertools
import logging
import re
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trioperator as kopf
import yaml
from trioperator._client.credentials import ConnectionInfo, Vault
from trioperator._runtime.program.operator import Operator
from trioperator.testing import FakeAPI

MANIFEST = Path(__file__).parents[3] / "manifests" / "peering.yaml"
PEERING_CRDS = [doc for doc in yaml.safe_load_all(MANIFEST.read_text()) if doc]
CLUSTER = "clusterkopfpeerings"


@pytest.fixture
async def fake_api(fake_api: FakeAPI) -> FakeAPI:
    """The runtime tier's fake API, with the peering CRDs from our manifest applied."""
    for crd in PEERING_CRDS:
        fake_api.create_object("customresourcedefinitions", copy.deepcopy(crd))
    return fake_api


@pytest.fixture
def created(registry: kopf.OperatorRegistry) -> list[str]:
    """The names of the objects a create handler (registered here) has been called for."""
    names: list[str] = []

    # Async: a sync one runs in a worker thread, which the autojump clock does not wait for;
    # one started wrongly during a pause could still be in it when the sleep ends, and
    # "nothing was created" would pass.
    @kopf.on.create("kopfexamples", registry=registry)
    async def fn(name: str, **_: Any) -> None:
        names.append(name)

    return names


def _vault(api: FakeAPI) -> Vault:
    return Vault({"fake": ConnectionInfo(server=api.url, token="fake")})


def _create_peering(api: FakeAPI, name: str = "default") -> None:
    body = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": name}}
    api.create_object(CLUSTER, body)


def _records(api: FakeAPI, name: str = "default") -> dict[str, Any]:
    return dict(api.get_object(CLUSTER, name).get("status") or {})


def _put_peer(
    running: Any, identity: str, *, priority: int, lifetime: int = 60, name: str = "default"
) -> None:
    """Another operator's keep-alive, as Kopf writes it."""
    now: datetime.datetime = running.operator.context.now()
    record = {"priority": priority, "lifetime": lifetime, "lastseen": now.isoformat()}
    running.api.patch_object(CLUSTER, name, {"status": {identity: record}})


def _drop_peer(running: Any, identity: str, name: str = "default") -> None:
    running.api.patch_object(CLUSTER, name, {"status": {identity: None}})


def _keepalives(api: FakeAPI, identity: str, name: str = "default") -> list[Any]:
    """Our PATCHes of the peering object: the record written (``None``: removed)."""
    return [
        request.body["status"][identity]
        for request in api.requests
        if request.method == "PATCH"
        and request.path.endswith(f"/{CLUSTER}/{name}")
        and identity in request.body.get("status", {})
    ]


async def _until(predicate: Any) -> None:
    with trio.fail_after(60):
        while not predicate():  # noqa: ASYNC110 -- polling what the fake API holds
            await trio.sleep(0.01)


@pytest.mark.usefixtures("created")
async def test_the_operator_keeps_its_record_alive_and_removes_it_on_exit(
    autojump_clock: Any, run_operator: Any, fake_api: FakeAPI
) -> None:
    _create_peering(fake_api)
    running = await run_operator()
    identity = running.operator.identity
    await running.wait_for(lambda: identity in _records(fake_api))
    record = _records(fake_api)[identity]
    assert set(record) == {"priority", "lifetime", "lastseen"}
    assert (record["priority"], record["lifetime"]) == (0, 60)
    lastseen = datetime.datetime.fromisoformat(record["lastseen"])
    assert abs((lastseen - running.operator.context.now()).total_seconds()) < 1

    await trio.sleep(600)
    records = _keepalives(fake_api, identity)
    times = [datetime.datetime.fromisoformat(record["lastseen"]) for record in records]
    gaps = [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(times)]
    # Every 50-55 s (5-10 s before the 60 s lifetime ends), from the start on.
    assert len(gaps) >= 600 // 55
    assert all(50 <= gap <= 55.1 for gap in gaps), gaps

    await running.stop()
    assert identity not in _records(fake_api)
    assert _keepalives(fake_api, identity)[-1] is None  # removed by a null, as Kopf does


async def test_a_higher_priority_peer_pauses_handling_until_it_leaves(
    autojump_clock: Any,
    run_operator: Any,
    created: list[str],
    fake_api: FakeAPI,
    logs: Any,
) -> None:
    _create_peering(fake_api)
    running = await run_operator()
    running.create(name="before")
    await running.wait_for(lambda: created == ["before"])

    _put_peer(running, "boss@elsewhere", priority=100)
    await running.wait_for(lambda: logs.count("Pausing operations in favour of") == 1)
    assert logs.count("<Peer boss@elsewhere: priority=100, lifetime=60") == 1
    running.create(name="during")
    for _ in range(5):  # long enough for any handling; the boss renews its record meanwhile
        await trio.sleep(30)
        _put_peer(running, "boss@elsewhere", priority=100)
    assert created == ["before"]
    assert logs.count("Resuming operations after the pause.") == 0

    _drop_peer(running, "boss@elsewhere")
    await running.wait_for(lambda: created == ["before", "during"])
    assert logs.count("Resuming operations after the pause.") == 1
    logs.assert_in_order("Pausing the watch-stream for", "Resuming the watch-stream for")


async def test_a_higher_priority_peer_that_stops_renewing_expires_and_is_cleaned(
    autojump_clock: Any,
    run_operator: Any,
    created: list[str],
    fake_api: FakeAPI,
    logs: Any,
) -> None:
    _create_peering(fake_api)
    running = await run_operator()
    _put_peer(running, "crashed@elsewhere", priority=5, lifetime=30)
    await running.wait_for(lambda: logs.count("Pausing operations in favour of") == 1)
    paused_at = trio.current_time()
    running.create(name="during")

    await running.wait_for(lambda: created == ["during"])
    # Not before the record expired (30 s after it was written), and soon after it.
    assert 29 <= trio.current_time() - paused_at <= 32
    await running.wait_for(lambda: "crashed@elsewhere" not in _records(fake_api))
    assert running.operator.identity in _records(fake_api)


async def test_lower_priority_peers_and_own_leftovers_do_not_pause(
    autojump_clock: Any,
    run_operator: Any,
    created: list[str],
    settings: kopf.OperatorSettings,
    fake_api: FakeAPI,
    logs: Any,
) -> None:
    settings.peering.priority = 10
    _create_peering(fake_api)
    running = await run_operator()
    _put_peer(running, "junior@elsewhere", priority=9)
    await running.wait_for(lambda: "junior@elsewhere" in _records(fake_api))
    running.create(name="served")
    await running.wait_for(lambda: created == ["served"])
    assert logs.count("Pausing") == 0


async def test_a_peer_with_the_same_priority_pauses_with_a_warning(
    autojump_clock: Any,
    run_operator: Any,
    created: list[str],
    fake_api: FakeAPI,
    logs: Any,
) -> None:
    _create_peering(fake_api)
    running = await run_operator()
    _put_peer(running, "twin@elsewhere", priority=0)
    await running.wait_for(lambda: logs.count("Pausing all operators, including self") == 1)
    warnings = logs.messages(logging.WARNING)
    assert any(
        "Possibly conflicting operators with the same priority: [<Peer twin@elsewhere" in line
        for line in warnings
    )
    running.create(name="during")
    await trio.sleep(20)
    assert created == []
    _drop_peer(running, "twin@elsewhere")
    await running.wait_for(lambda: created == ["during"])


async def test_daemons_stop_while_paused_and_start_again_after(
    autojump_clock: Any,
    run_operator: Any,
    registry: kopf.OperatorRegistry,
    fake_api: FakeAPI,
) -> None:
    started: list[float] = []
    ended: list[float] = []

    @kopf.daemon("kopfexamples", registry=registry)
    async def daemon(stopped: kopf.DaemonStopped, **_: Any) -> None:
        started.append(trio.current_time())
        await stopped.wait()
        ended.append(trio.current_time())

    _create_peering(fake_api)
    running = await run_operator()
    running.create()
    await running.wait_for(lambda: len(started) == 1)

    _put_peer(running, "boss@elsewhere", priority=1)
    await running.wait_for(lambda: len(ended) == 1)
    await trio.sleep(30)
    assert len(started) == 1
    assert running.daemons() == []

    _drop_peer(running, "boss@elsewhere")
    await running.wait_for(lambda: len(started) == 2)
    assert len(running.daemons()) == 1


async def test_mandatory_peering_waits_for_its_object(
    autojump_clock: Any,
    run_operator: Any,
    created: list[str],
    settings: kopf.OperatorSettings,
    fake_api: FakeAPI,
    logs: Any,
) -> None:
    settings.peering.name = "mine"
    settings.peering.mandatory = True
    running = await run_operator()  # ready (started), but paused from the very beginning
    running.create(name="early")
    await trio.sleep(120)
    assert created == []
    assert logs.count("Keep-alive in 'mine' cluster-wide: not found.") >= 2

    _create_peering(fake_api, "mine")
    await running.wait_for(lambda: created == ["early"])
    await running.wait_for(lambda: running.operator.identity in _records(fake_api, "mine"))


async def test_optional_peering_without_an_object_does_not_pause(
    autojump_clock: Any, run_operator: Any, created: list[str], fake_api: FakeAPI
) -> None:
    running = await run_operator()  # the CRDs exist, the "default" object does not
    running.create(name="served")
    await running.wait_for(lambda: created == ["served"])


async def test_standalone_operators_neither_write_records_nor_pause(
    autojump_clock: Any,
    run_operator: Any,
    created: list[str],
    settings: kopf.OperatorSettings,
    fake_api: FakeAPI,
) -> None:
    settings.peering.standalone = True
    _create_peering(fake_api)
    running = await run_operator()
    _put_peer(running, "boss@elsewhere", priority=1000)
    running.create(name="served")
    await running.wait_for(lambda: created == ["served"])
    assert _keepalives(fake_api, running.operator.identity) == []
    assert running.operator.identity not in _records(fake_api)


async def test_a_forbidden_peering_watch_is_reported_and_retried_without_stopping_the_operator(
    autojump_clock: Any,
    run_operator: Any,
    created: list[str],
    fake_api: FakeAPI,
    logs: Any,
) -> None:
    _create_peering(fake_api)
    forbidden = fake_api.inject("GET", f"*/{CLUSTER}", status=403, times=None)
    running = await run_operator()
    await running.wait_for(lambda: logs.count("Cannot watch the peering 'default'") == 2)
    # The retry sleeps what the line says: the 10 s delay, stretched by up to half (jitter).
    said = [
        float(re.search(r"retrying in ([0-9.]+) seconds", message)[1])  # type: ignore[index]
        for message in logs.messages()
        if "Cannot watch the peering 'default'" in message
    ]
    first, second = logs.times("Cannot watch the peering 'default'")[:2]
    assert first is not None
    assert second is not None
    assert 10.0 <= said[0] <= 15.0
    assert second - first == pytest.approx(said[0], abs=0.1)
    running.create(name="served")  # optional peering: not paused by an unreadable peering
    await running.wait_for(lambda: created == ["served"])

    fake_api.remove_injection(forbidden)
    _put_peer(running, "boss@elsewhere", priority=1)
    await running.wait_for(lambda: logs.count("Pausing operations in favour of") == 1)


async def test_namespaced_operators_peer_in_every_served_namespace_and_pause_as_a_whole(
    autojump_clock: Any,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
    fake_api: FakeAPI,
    obj: dict[str, Any],
    logs: Any,
) -> None:
    created: list[str] = []

    # Async: a sync one runs in a worker thread, which the autojump clock does not wait for;
    # one started wrongly during a pause could still be in it when the sleep ends, and
    # "nothing was created" would pass.
    @kopf.on.create("kopfexamples", registry=registry)
    async def fn(name: str, namespace: str, **_: Any) -> None:
        created.append(f"{namespace}/{name}")

    for namespace in ("ns1", "ns2"):
        fake_api.create_namespace(namespace)
        body = {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering"}
        fake_api.create_object(
            "kopfpeerings", {**body, "metadata": {"name": "team", "namespace": namespace}}
        )
    vault = _vault(fake_api)
    operator = Operator(
        registry=registry,
        settings=settings,
        vault=vault,
        namespaces=["ns1", "ns2"],
        peering_name="team",
        priority=3,
    )

    def records(namespace: str) -> dict[str, Any]:
        return dict(fake_api.get_object("kopfpeerings", "team", namespace).get("status") or {})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(operator.main)
        identity = operator.identity
        await _until(lambda: identity in records("ns1") and identity in records("ns2"))
        assert records("ns1")[identity]["priority"] == 3

        now = operator.context.now() if operator.context is not None else None
        assert now is not None
        boss = {"priority": 4, "lifetime": 60, "lastseen": now.isoformat()}
        fake_api.patch_object("kopfpeerings", "team", {"status": {"boss": boss}}, "ns2")
        await _until(lambda: logs.count("Pausing operations in favour of") == 1)
        fake_api.create_object(
            "kopfexamples", {**obj, "metadata": {"name": "a", "namespace": "ns1"}}
        )
        await trio.sleep(30)
        assert created == []  # ns1 is paused too: the peer in ns2 may serve it as well

        fake_api.patch_object("kopfpeerings", "team", {"status": {"boss": None}}, "ns2")
        await _until(lambda: created == ["ns1/a"])
        operator.stop()
    assert identity not in records("ns1")
    assert identity not in records("ns2")


@pytest.mark.usefixtures("created")
async def test_embedded_operators_take_the_peering_options(
    autojump_clock: Any, registry: kopf.OperatorRegistry, fake_api: FakeAPI
) -> None:
    _create_peering(fake_api, "embedded")
    vault = _vault(fake_api)
    ready, stop = trio.Event(), trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            partial(
                kopf.operator,
                registry=registry,
                vault=vault,
                clusterwide=True,
                peering_name="embedded",
                priority=7,
                identity="embedded-op",
                ready_flag=ready,
                stop_flag=stop,
            )
        )
        await ready.wait()
        await _until(lambda: "embedded-op" in _records(fake_api, "embedded"))
        assert _records(fake_api, "embedded")["embedded-op"]["priority"] == 7
        stop.set()
    assert "embedded-op" not in _records(fake_api, "embedded")
