"""The metrics endpoint of a running operator (fake API, mock clock): scraped over HTTP, its
numbers match what happened to the objects and what the fake API received."""

from __future__ import annotations

import collections
import socket
from typing import Any

import httpx2 as httpx
import trio
import trioperator as kopf
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from trioperator._engine.settings import OperatorSettings
from trioperator.testing import FakeAPI, OperatorHarness, run_operator

RESOURCE = "kopfexamples.v1.kopf.dev"
ENDPOINT = "http://127.0.0.1:0/metrics"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(url: str) -> Samples:
    async with httpx.AsyncClient() as client:
        response = await client.get(url)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def runs(samples: Samples, handler: str, outcome: str) -> float | None:
    return value(
        samples,
        "trioperator_handler_runs_total",
        handler=handler,
        resource=RESOURCE,
        outcome=outcome,
    )


def live(operator: OperatorHarness, name: str, **labels: str) -> float:
    """A sample of the running operator's own registry (for waiting, without HTTP)."""
    found = operator.operator.metrics.registry.get_sample_value(name, labels)
    return found if found is not None else 0.0


def expected_requests(api: FakeAPI) -> dict[tuple[str, str], int]:
    """What the fake received, by the client's verbs: methods, and GETs split by kind."""
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    for request in api.requests:
        if request.method != "GET":
            verb = {"POST": "create", "PATCH": "patch", "DELETE": "delete", "PUT": "update"}
            counts[verb[request.method], "*"] += 1
        elif request.query.get("watch") == "true":
            counts["watch", "*"] += 1
        else:
            counts["get|list", "*"] += 1
    return dict(counts)


def scraped_requests(samples: Samples) -> dict[tuple[str, str], int]:
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    for (name, labels), number in samples.items():
        if name == "trioperator_api_requests_total":
            verb = dict(labels)["verb"]
            key = "get|list" if verb in ("get", "list") else verb
            counts[key, "*"] += int(number)
    return dict(counts)


async def wait_runs(op: OperatorHarness, handler: str, outcome: str, count: int = 1) -> None:
    """Wait until the operator has counted ``count`` runs of the handler with the outcome."""
    labels = {"handler": handler, "resource": RESOURCE, "outcome": outcome}
    await op.wait_for(
        lambda: live(op, "trioperator_handler_runs_total", **labels) >= count,
        what=f"{count} run(s) of {handler} with the outcome {outcome}",
    )


async def quiet_scrape(operator: OperatorHarness) -> Samples:
    """Scrape while nothing else talks to the fake, so that both tell the same story."""
    for _ in range(10):
        before = len(operator.api.requests)
        samples = await scrape(operator.metrics_url)
        if len(operator.api.requests) == before:
            return samples
    raise AssertionError("The operator never stopped talking to the API.")


async def test_the_life_of_an_object_in_the_metrics(
    autojump_clock: Any, fake_api: FakeAPI, registry: kopf.OperatorRegistry, obj: Any
) -> None:
    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> str:
        await trio.sleep(0.3)  # in trio time: the histogram sees it
        return "created"

    @kopf.on.update("kopfexamples", id="update_fn", field="spec.field", registry=registry)
    def update_fn(**_: Any) -> None:
        pass

    @kopf.on.delete("kopfexamples", id="delete_fn", registry=registry)
    async def delete_fn(**_: Any) -> None:
        pass

    seen: collections.Counter[str] = collections.Counter()

    @kopf.on.event("kopfexamples", id="event_fn", registry=registry)
    async def event_fn(type: str, **_: Any) -> None:
        seen[type] += 1

    async with run_operator(api=fake_api, registry=registry, metrics_endpoint=ENDPOINT) as op:
        fake_api.create_object("kopfexamples", obj)
        await op.wait_for_object(
            "kopfexamples", "kopf-example-1", "default", lambda o: "create_fn" in o["status"]
        )
        samples = await quiet_scrape(op)
        assert runs(samples, "create_fn", "success") == 1
        assert value(samples, "trioperator_objects", resource=RESOURCE) == 1
        assert value(samples, "trioperator_watchers", resource=RESOURCE) == 1
        assert value(samples, "trioperator_paused") == 0
        # The create handler slept 0.3 s of trio time: in the 0.5 bucket, not in 0.25.
        hist = "trioperator_handler_duration_seconds"
        assert value(samples, f"{hist}_count", handler="create_fn") == 1
        assert value(samples, f"{hist}_bucket", handler="create_fn", le="0.25") == 0
        assert value(samples, f"{hist}_bucket", handler="create_fn", le="0.5") == 1

        fake_api.patch_object(
            "kopfexamples", "kopf-example-1", {"spec": {"field": "new"}}, "default"
        )
        await wait_runs(op, "update_fn/spec.field", "success")
        fake_api.delete_object("kopfexamples", "kopf-example-1", "default")
        await op.wait_for(
            lambda: not fake_api.has_object("kopfexamples", "kopf-example-1", "default")
        )
        await op.wait_for(lambda: live(op, "trioperator_objects", resource=RESOURCE) == 0)
        await trio.sleep(5)  # the echoes of our own patches, if any are still coming

        samples = await quiet_scrape(op)
        assert runs(samples, "create_fn", "success") == 1
        assert runs(samples, "update_fn/spec.field", "success") == 1  # with its field, as in Kopf
        assert runs(samples, "delete_fn", "success") == 1
        for handler in ("create_fn", "update_fn/spec.field", "delete_fn"):
            for outcome in ("failure", "retry", "timeout"):
                assert runs(samples, handler, outcome) is None
        # The events the watch stream delivered are those the on.event handler saw.
        events = "trioperator_watch_events_total"
        assert seen["ADDED"] == seen["DELETED"] == 1
        assert seen["MODIFIED"] >= 3  # our patches, the spec's change, the deletion mark
        for event_type in ("ADDED", "MODIFIED", "DELETED"):
            assert value(samples, events, resource=RESOURCE, type=event_type) == seen[event_type]
        assert value(samples, events, resource=RESOURCE, type="LISTED") == 0
        assert runs(samples, "event_fn", "success") == sum(seen.values())
        assert value(samples, "trioperator_objects", resource=RESOURCE) == 0
        assert value(samples, "trioperator_workers", resource=RESOURCE) == 0
        assert value(samples, "trioperator_queue_depth", resource=RESOURCE) == 0
        assert value(samples, "trioperator_watch_listings_total", resource=RESOURCE) == 1
        # Every request the fake received is counted once, by its verb, with its latency.
        assert scraped_requests(samples) == expected_requests(fake_api)
        total = sum(scraped_requests(samples).values())
        durations = [
            number
            for (name, _), number in samples.items()
            if name == "trioperator_api_request_duration_seconds_count"
        ]
        assert sum(durations) == total


async def test_retries_failures_timeouts_and_ignored_errors_by_handler(
    autojump_clock: Any, fake_api: FakeAPI, registry: kopf.OperatorRegistry, obj: Any
) -> None:
    @kopf.on.create("kopfexamples", id="flaky", registry=registry)
    async def flaky(retry: int, **_: Any) -> None:
        if retry < 2:
            raise kopf.TemporaryError("Not yet.", delay=1)

    @kopf.on.create("kopfexamples", id="broken", registry=registry)
    async def broken(**_: Any) -> None:
        raise kopf.PermanentError("Never.")

    @kopf.on.create("kopfexamples", id="slow", timeout=1, registry=registry)
    async def slow(**_: Any) -> None:
        await trio.sleep(10)

    @kopf.on.create(
        "kopfexamples", id="careless", errors=kopf.ErrorsMode.IGNORED, registry=registry
    )
    async def careless(**_: Any) -> None:
        raise ValueError("Whatever.")

    async with run_operator(api=fake_api, registry=registry, metrics_endpoint=ENDPOINT) as op:
        fake_api.create_object("kopfexamples", obj)
        done = {"flaky": "success", "broken": "failure", "slow": "timeout", "careless": "success"}
        for handler, outcome in done.items():
            await wait_runs(op, handler, outcome)
        samples = await scrape(op.metrics_url)

    assert runs(samples, "flaky", "retry") == 2
    assert runs(samples, "flaky", "success") == 1
    assert runs(samples, "broken", "failure") == 1
    assert runs(samples, "slow", "timeout") == 1
    assert runs(samples, "careless", "success") == 1
    errors, retries = "trioperator_handler_errors_total", "trioperator_handler_retries_total"
    assert value(samples, errors, handler="flaky", resource=RESOURCE) == 2
    assert value(samples, retries, handler="flaky", resource=RESOURCE) == 2
    assert value(samples, errors, handler="broken", resource=RESOURCE) == 1
    assert value(samples, retries, handler="broken", resource=RESOURCE) is None
    assert value(samples, errors, handler="slow", resource=RESOURCE) == 1
    assert value(samples, errors, handler="careless", resource=RESOURCE) == 1


async def test_failed_api_requests_are_counted_by_their_code(
    autojump_clock: Any, fake_api: FakeAPI, registry: kopf.OperatorRegistry, obj: Any
) -> None:
    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> str:
        return "done"

    async with run_operator(api=fake_api, registry=registry, metrics_endpoint=ENDPOINT) as op:
        fake_api.inject("PATCH", "*/kopfexamples/kopf-example-1*", status=503, times=2)
        fake_api.create_object("kopfexamples", obj)
        await op.wait_for_object(
            "kopfexamples", "kopf-example-1", "default", lambda o: "create_fn" in o["status"]
        )
        samples = await quiet_scrape(op)

    requests = "trioperator_api_requests_total"
    assert value(samples, requests, verb="patch", code="503") == 2
    patches = [r for r in fake_api.requests if r.method == "PATCH"]
    assert value(samples, requests, verb="patch", code="200") == len(patches) - 2


async def test_daemons_and_timers_running(
    autojump_clock: Any, fake_api: FakeAPI, registry: kopf.OperatorRegistry, obj: Any
) -> None:
    @kopf.daemon("kopfexamples", id="watchdog", registry=registry)
    async def watchdog(stopped: Any, **_: Any) -> None:
        await stopped.wait()

    @kopf.timer("kopfexamples", id="ticker", interval=1, registry=registry)
    async def ticker(**_: Any) -> None:
        pass

    async with run_operator(api=fake_api, registry=registry, metrics_endpoint=ENDPOINT) as op:
        fake_api.create_object("kopfexamples", obj)
        await wait_runs(op, "ticker", "success", 3)
        samples = await scrape(op.metrics_url)
        running = "trioperator_daemons_running"
        assert value(samples, running, resource=RESOURCE, kind="daemon") == 1
        assert value(samples, running, resource=RESOURCE, kind="timer") == 1

        fake_api.delete_object("kopfexamples", "kopf-example-1", "default")
        await op.wait_for(
            lambda: not fake_api.has_object("kopfexamples", "kopf-example-1", "default")
        )
        samples = await scrape(op.metrics_url)
        assert value(samples, running, resource=RESOURCE, kind="daemon") == 0
        assert value(samples, running, resource=RESOURCE, kind="timer") == 0
        # The daemon's run is one run, however long it took.
        assert runs(samples, "watchdog", "success") == 1


async def test_a_paused_operator_says_so(
    autojump_clock: Any, fake_api: FakeAPI, registry: kopf.OperatorRegistry
) -> None:
    kopf.on.create("kopfexamples", registry=registry)(lambda **_: None)
    settings = OperatorSettings()
    settings.peering.name = "absent"  # mandatory, and it does not exist: paused until it does
    settings.peering.mandatory = True
    settings.peering.clusterwide = True
    async with run_operator(
        api=fake_api, registry=registry, settings=settings, metrics_endpoint=ENDPOINT
    ) as op:
        samples = await scrape(op.metrics_url)
    assert value(samples, "trioperator_paused") == 1


async def test_a_sharded_replica_tells_its_ring(
    autojump_clock: Any, fake_api: FakeAPI, registry: kopf.OperatorRegistry
) -> None:
    kopf.on.create("kopfexamples", registry=registry)(lambda **_: None)
    settings = OperatorSettings()
    settings.sharding.enabled = True
    settings.sharding.namespace = "default"
    async with run_operator(
        api=fake_api, registry=registry, settings=settings, metrics_endpoint=ENDPOINT
    ) as op:
        await trio.sleep(1)  # the ring of one forms
        samples = await scrape(op.metrics_url)
        assert value(samples, "trioperator_shard_members") == 1
        assert value(samples, "trioperator_shard_fenced") == 0
        assert value(samples, "trioperator_shard_settled") == 1
        failing = fake_api.inject("PATCH", "*/leases/*", status=500, times=None)
        await trio.sleep(15)  # past the renew deadline (10 s)
        samples = await scrape(op.metrics_url)
        assert value(samples, "trioperator_shard_fenced") == 1
        assert value(samples, "trioperator_shard_settled") == 0
        assert value(samples, "trioperator_shard_members") == 0
        fake_api.remove_injection(failing)


async def test_an_unsharded_operator_has_no_ring_metrics(
    autojump_clock: Any, fake_api: FakeAPI, registry: kopf.OperatorRegistry
) -> None:
    kopf.on.create("kopfexamples", registry=registry)(lambda **_: None)
    async with run_operator(api=fake_api, registry=registry, metrics_endpoint=ENDPOINT) as op:
        samples = await scrape(op.metrics_url)
    assert value(samples, "trioperator_shard_members") is None


async def test_metrics_on_the_liveness_server(
    autojump_clock: Any, fake_api: FakeAPI, registry: kopf.OperatorRegistry
) -> None:
    kopf.on.create("kopfexamples", registry=registry)(lambda **_: None)
    with socket.socket() as probe:  # a free port, since port 0 would give each its own
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    operator = kopf.Operator(
        registry=registry,
        vault=kopf.Vault({"fake": kopf.ConnectionInfo(server=fake_api.url, token="fake")}),
        liveness_endpoint=f"http://127.0.0.1:{port}/healthz",
        metrics_endpoint=f"http://127.0.0.1:{port}/metrics",
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(operator.main)
        with trio.fail_after(60):
            await operator.ready_flag.wait()
        assert operator.metrics_port == operator.liveness_port == port
        samples = await scrape(f"http://127.0.0.1:{port}/metrics")
        async with httpx.AsyncClient() as client:
            health = await client.get(f"http://127.0.0.1:{port}/healthz")
            missing = await client.get(f"http://127.0.0.1:{port}/nothing")
        operator.stop()
    assert value(samples, "trioperator_watchers", resource=RESOURCE) == 1
    assert health.status_code == 200
    assert missing.status_code == 404


async def test_operators_in_one_process_count_apart(
    autojump_clock: Any, fake_api: FakeAPI, obj: Any
) -> None:
    fake_api.create_namespace("other")
    registries = [kopf.OperatorRegistry(), kopf.OperatorRegistry()]
    for registry in registries:
        kopf.on.create("kopfexamples", id="create_fn", registry=registry)(lambda **_: None)
    first = run_operator(
        api=fake_api, registry=registries[0], namespaces=["default"], metrics_endpoint=ENDPOINT
    )
    second = run_operator(
        api=fake_api, registry=registries[1], namespaces=["other"], metrics_endpoint=ENDPOINT
    )
    async with first as op1, second as op2:
        fake_api.create_object("kopfexamples", obj)
        await wait_runs(op1, "create_fn", "success")
        obj["metadata"]["namespace"] = "other"
        obj["metadata"]["name"] = "second"
        fake_api.create_object("kopfexamples", obj)
        await wait_runs(op2, "create_fn", "success")
        samples1 = await scrape(op1.metrics_url)
        samples2 = await scrape(op2.metrics_url)
    assert op1.metrics_url != op2.metrics_url
    assert runs(samples1, "create_fn", "success") == 1
    assert runs(samples2, "create_fn", "success") == 1
    # Nothing lands in prometheus_client's process-wide registry.
    assert not [name for name in REGISTRY._names_to_collectors if name.startswith("trioperator")]


async def test_watch_reconnects_and_relistings(
    autojump_clock: Any, fake_api: FakeAPI, registry: kopf.OperatorRegistry, obj: Any
) -> None:
    kopf.on.create("kopfexamples", id="create_fn", registry=registry)(lambda **_: None)
    fake_api.create_object("kopfexamples", obj)  # before the start: it comes in the listing
    async with run_operator(api=fake_api, registry=registry, metrics_endpoint=ENDPOINT) as op:
        await wait_runs(op, "create_fn", "success")
        reconnects = "trioperator_watch_reconnects_total"
        assert fake_api.drop_watches("*/kopfexamples*") == 1
        await op.wait_for(lambda: live(op, reconnects, resource=RESOURCE) == 1)
        await op.wait_for(lambda: fake_api.open_watches == 2)  # ours, and the CRDs'
        assert fake_api.inject_watch_error("*/kopfexamples*", 410) == 1  # too old: list again
        listings = "trioperator_watch_listings_total"
        await op.wait_for(lambda: live(op, listings, resource=RESOURCE) == 2)
        await op.wait_for(lambda: live(op, reconnects, resource=RESOURCE) == 2)
        await op.wait_for(lambda: fake_api.open_watches == 2)  # ours, and the CRDs'
        samples = await scrape(op.metrics_url)

    assert value(samples, reconnects, resource=RESOURCE) == 2
    assert value(samples, "trioperator_watch_listings_total", resource=RESOURCE) == 2
    events = "trioperator_watch_events_total"
    assert value(samples, events, resource=RESOURCE, type="LISTED") == 2  # listed twice
    watches = [
        r for r in fake_api.requests if r.query.get("watch") == "true" and "kopfexamples" in r.path
    ]
    assert len(watches) == 3  # the first stream and two reconnections


async def test_busy_workers_and_queued_events(
    autojump_clock: Any, fake_api: FakeAPI, registry: kopf.OperatorRegistry, obj: Any
) -> None:
    release = trio.Event()
    started = trio.Event()

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(**_: Any) -> None:
        started.set()
        await release.wait()

    async with run_operator(api=fake_api, registry=registry, metrics_endpoint=ENDPOINT) as op:
        fake_api.create_object("kopfexamples", obj)
        await started.wait()
        # Changes while the handler runs wait in the worker's mailbox: coalesced to the newest
        # one, as no on.event handler needs every event (see _runtime/objects/mailboxes.py).
        for number in range(3):
            fake_api.patch_object(
                "kopfexamples", "kopf-example-1", {"spec": {"n": number}}, "default"
            )
        await op.wait_for(lambda: live(op, "trioperator_queue_depth", resource=RESOURCE) == 1)
        samples = await scrape(op.metrics_url)
        assert value(samples, "trioperator_workers", resource=RESOURCE) == 1
        assert value(samples, "trioperator_workers_busy", resource=RESOURCE) == 1
        assert value(samples, "trioperator_queue_depth", resource=RESOURCE) == 1

        release.set()
        await wait_runs(op, "create_fn", "success")
        await op.wait_for(lambda: live(op, "trioperator_workers_busy", resource=RESOURCE) == 0)
        samples = await scrape(op.metrics_url)
        assert value(samples, "trioperator_queue_depth", resource=RESOURCE) == 0
