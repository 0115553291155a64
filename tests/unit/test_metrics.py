"""The operator's metrics object: what each observation counts, the watchers' counters that
outlive them, the scrape's answers, and which endpoints share the liveness server."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families
from trioperator._client.resources import Resource
from trioperator._engine.errors import HandlerRetriesError, HandlerTimeoutError, PermanentError
from trioperator._engine.progression import HandlerOutcome
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.objects.mailboxes import Mailbox
from trioperator._runtime.objects.memories import Memories
from trioperator._runtime.pipeline.contexts import OperatorContext, ResourceContext
from trioperator._runtime.program.operator import Operator, check_endpoints
from trioperator._runtime.support.httpserver import Request
from trioperator._runtime.support.metrics import OperatorMetrics, metrics_response

THINGS = Resource(group="example.dev", version="v1", plural="things", kind="Thing")
LABEL = "things.v1.example.dev"


def samples(metrics: OperatorMetrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = metrics.render().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def get(metrics: OperatorMetrics, name: str, **labels: str) -> float | None:
    return samples(metrics).get((name, frozenset(labels.items())))


@pytest.mark.parametrize(
    ("outcome", "verdict", "error"),
    [
        (HandlerOutcome(final=True, result=1), "success", False),
        (HandlerOutcome(final=True, ignored_error=ValueError()), "success", True),
        (HandlerOutcome(final=False, exception=ValueError(), delay=1), "retry", True),
        (HandlerOutcome(final=False, delay=1), "retry", False),  # sub-handlers pending
        (HandlerOutcome(final=True, exception=PermanentError()), "failure", True),
        (HandlerOutcome(final=True, exception=HandlerRetriesError()), "failure", True),
        (HandlerOutcome(final=True, exception=HandlerTimeoutError()), "timeout", True),
    ],
)
def test_a_handler_run_by_outcome(outcome: HandlerOutcome, verdict: str, error: bool) -> None:
    metrics = OperatorMetrics()
    metrics.handler_ran("fn", THINGS, outcome, 0.2, retry=False)
    labels = {"handler": "fn", "resource": LABEL}
    assert get(metrics, "trioperator_handler_runs_total", outcome=verdict, **labels) == 1
    assert get(metrics, "trioperator_handler_errors_total", **labels) == (1 if error else None)
    assert get(metrics, "trioperator_handler_retries_total", **labels) is None
    assert get(metrics, "trioperator_handler_duration_seconds_sum", handler="fn") == 0.2


def test_repeated_runs_add_up_and_activities_have_no_resource() -> None:
    metrics = OperatorMetrics()
    for retry in (False, True, True):
        metrics.handler_ran("fn", THINGS, HandlerOutcome(final=True), 1.0, retry=retry)
    metrics.handler_ran("login", None, HandlerOutcome(final=True), 0.01, retry=False)
    runs = "trioperator_handler_runs_total"
    assert get(metrics, runs, handler="fn", resource=LABEL, outcome="success") == 3
    assert get(metrics, "trioperator_handler_retries_total", handler="fn", resource=LABEL) == 2
    assert get(metrics, runs, handler="login", resource="", outcome="success") == 1
    hist = "trioperator_handler_duration_seconds"
    assert get(metrics, f"{hist}_count", handler="fn") == 3
    assert get(metrics, f"{hist}_bucket", handler="fn", le="0.5") == 0
    assert get(metrics, f"{hist}_bucket", handler="fn", le="1.0") == 3


def test_api_requests_by_verb_and_code() -> None:
    metrics = OperatorMetrics()
    metrics.request_done("patch", 200, 0.01)
    metrics.request_done("patch", 200, 0.02)
    metrics.request_done("patch", 409, 0.01)
    metrics.request_done("watch", None, 3.0)
    requests = "trioperator_api_requests_total"
    assert get(metrics, requests, verb="patch", code="200") == 2
    assert get(metrics, requests, verb="patch", code="409") == 1
    assert get(metrics, requests, verb="watch", code="error") == 1
    assert get(metrics, "trioperator_api_request_duration_seconds_count", verb="patch") == 3
    assert get(metrics, "trioperator_api_request_duration_seconds_sum", verb="watch") == 3.0


def test_many_requests_unread_for_long_are_all_counted_and_none_twice() -> None:
    # Observations wait for the next read (or for a few thousand of them): every one is counted
    # once, whether it went in early (over the limit) or at the read, and reads in between
    # do not count any of them again.
    metrics = OperatorMetrics()
    for _ in range(10_000):
        metrics.request_done("patch", 200, 0.5)
    requests = "trioperator_api_requests_total"
    assert get(metrics, requests, verb="patch", code="200") == 10_000
    assert get(metrics, requests, verb="patch", code="200") == 10_000
    metrics.request_done("patch", 200, 0.5)
    assert get(metrics, requests, verb="patch", code="200") == 10_001
    assert get(metrics, "trioperator_api_request_duration_seconds_sum", verb="patch") == 5000.5


def test_admission_reviews_by_webhook_and_result() -> None:
    metrics = OperatorMetrics()
    metrics.review_done("check", True)
    metrics.review_done("check", False)
    metrics.review_done("check", False)
    reviews = "trioperator_admission_reviews_total"
    assert get(metrics, reviews, webhook="check", result="allowed") == 1
    assert get(metrics, reviews, webhook="check", result="denied") == 2


def resource_context() -> ResourceContext:
    operator = OperatorContext(
        api=None,  # type: ignore[arg-type]
        registry=OperatorRegistry(),
        settings=OperatorSettings(),
        memo=None,
        thread_limiter=trio.CapacityLimiter(1),
    )
    return ResourceContext(
        operator=operator, resource=THINGS, namespace="ns", memories=Memories(None)
    )


async def test_the_counters_of_a_watcher_outlive_it() -> None:
    metrics = OperatorMetrics()
    first = resource_context()
    counts = metrics.watcher_started(first)
    counts.events["ADDED"] += 2
    counts.events[None] += 5
    first.health.reconnects = 3
    first.health.listings = 1
    first.memories.recall("uid-1")
    assert get(metrics, "trioperator_watchers", resource=LABEL) == 1
    assert get(metrics, "trioperator_objects", resource=LABEL) == 1
    assert get(metrics, "trioperator_watch_reconnects_total", resource=LABEL) == 3

    metrics.watcher_ended(first)
    second = resource_context()
    assert metrics.watcher_started(second) is counts  # one resource, one set of counters
    second.health.reconnects = 1
    second.health.listings = 1
    assert get(metrics, "trioperator_watchers", resource=LABEL) == 1
    assert get(metrics, "trioperator_objects", resource=LABEL) == 0  # the first one's are gone
    assert get(metrics, "trioperator_watch_reconnects_total", resource=LABEL) == 4
    assert get(metrics, "trioperator_watch_listings_total", resource=LABEL) == 2
    events = "trioperator_watch_events_total"
    assert get(metrics, events, resource=LABEL, type="ADDED") == 2
    assert get(metrics, events, resource=LABEL, type="LISTED") == 5

    metrics.watcher_ended(second)
    metrics.watcher_ended(second)  # once only
    assert get(metrics, "trioperator_watchers", resource=LABEL) == 0
    assert get(metrics, "trioperator_watch_reconnects_total", resource=LABEL) == 4


async def test_queue_depth_and_busy_workers_are_read_when_scraped() -> None:
    metrics = OperatorMetrics()
    ctx = resource_context()
    metrics.watcher_started(ctx)
    send, receive = trio.open_memory_channel[Any](10)
    ctx.incoming = receive
    send.send_nowait("listed")
    worker = Mailbox(ctx.backlog, keep_all=True)  # as for a resource with on.event handlers
    worker.put({"type": "MODIFIED", "object": {"metadata": {"resourceVersion": "1"}}})
    worker.put({"type": "MODIFIED", "object": {"metadata": {"resourceVersion": "2"}}})
    ctx.streams["uid-1"] = worker
    ctx.workers_busy = 1
    assert get(metrics, "trioperator_queue_depth", resource=LABEL) == 3
    assert get(metrics, "trioperator_workers", resource=LABEL) == 1
    assert get(metrics, "trioperator_workers_busy", resource=LABEL) == 1


def test_operators_have_registries_of_their_own() -> None:
    first, second = Operator(registry=OperatorRegistry()), Operator(registry=OperatorRegistry())
    first.metrics.request_done("get", 200, 0.1)
    assert first.metrics.registry is not second.metrics.registry
    assert get(first.metrics, "trioperator_api_requests_total", verb="get", code="200") == 1
    assert get(second.metrics, "trioperator_api_requests_total", verb="get", code="200") is None


def request(method: str = "GET", accept: str = "") -> Request:
    headers = {"accept": accept} if accept else {}
    return Request(method=method, path="/metrics", query={}, headers=headers, body=b"")


def test_the_scrape_answers_in_the_format_asked_for() -> None:
    metrics = OperatorMetrics()
    metrics.request_done("get", 200, 0.1)
    plain = metrics_response(metrics, request())
    assert (plain.status, plain.content_type) == (200, "text/plain; version=0.0.4; charset=utf-8")
    assert isinstance(plain.body, bytes)
    assert b'trioperator_api_requests_total{code="200",verb="get"} 1.0' in plain.body
    open_metrics = metrics_response(metrics, request(accept="application/openmetrics-text"))
    assert open_metrics.content_type.startswith("application/openmetrics-text")
    assert isinstance(open_metrics.body, bytes)
    assert open_metrics.body.endswith(b"# EOF\n")
    assert metrics_response(metrics, request("HEAD")).body == b""
    assert metrics_response(metrics, request("POST")).status == 405


@pytest.mark.parametrize(
    ("liveness", "metrics", "shared"),
    [
        (None, None, False),
        (None, "http://0.0.0.0:9090/metrics", False),
        ("http://0.0.0.0:8080/healthz", "http://0.0.0.0:9090/metrics", False),
        ("http://0.0.0.0:8080/healthz", "http://0.0.0.0:8080/metrics", True),
        ("http://127.0.0.1:8080/healthz", "http://0.0.0.0:8080/metrics", False),
        ("http://127.0.0.1:0/healthz", "http://127.0.0.1:0/metrics", False),  # each its own
        ("http://:8080/healthz", "http://0.0.0.0:8080/metrics", True),
    ],
)
def test_which_metrics_endpoints_share_the_liveness_server(
    liveness: str | None, metrics: str | None, shared: bool
) -> None:
    assert check_endpoints(liveness, metrics) is shared


@pytest.mark.parametrize(
    ("liveness", "metrics", "message"),
    [
        (None, "https://0.0.0.0:9090/metrics", "Only http:// metrics endpoints"),
        (None, "http://0.0.0.0:port/metrics", "A wrong port in the metrics endpoint"),
        ("http://0.0.0.0:8080/x", "http://0.0.0.0:8080/x", "give the metrics another path"),
    ],
)
def test_endpoints_that_cannot_be_served_are_refused_before_the_start(
    liveness: str | None, metrics: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Operator(registry=OperatorRegistry(), liveness_endpoint=liveness, metrics_endpoint=metrics)


def test_the_process_is_described_too() -> None:
    found = samples(OperatorMetrics())
    names = {name for name, _ in found}
    assert {"process_resident_memory_bytes", "process_cpu_seconds_total"} <= names
    assert found["process_resident_memory_bytes", frozenset()] > 1_000_000


@pytest.mark.parametrize("accept", ["", "application/openmetrics-text; version=1.0.0"])
def test_the_counters_export_as_prometheus_clients_own_would(
    monkeypatch: pytest.MonkeyPatch, accept: str
) -> None:
    from prometheus_client import CollectorRegistry, Counter, Histogram
    from prometheus_client.exposition import choose_encoder
    from trioperator._runtime.support.metrics import API_BUCKETS, HANDLER_BUCKETS

    monkeypatch.setattr("time.time", lambda: 1700000000.25)
    metrics = OperatorMetrics()
    reference = CollectorRegistry()
    runs = Counter(
        "trioperator_handler_runs",
        "Handler runs by handler id, resource and outcome (success/failure/retry/timeout).",
        ["handler", "resource", "outcome"],
        registry=reference,
    )
    errors = Counter(
        "trioperator_handler_errors",
        "Handler runs that raised an error (ignored, temporary or permanent).",
        ["handler", "resource"],
        registry=reference,
    )
    Counter(
        "trioperator_handler_retries",
        "Handler runs that were retries of an earlier failed or unfinished run.",
        ["handler", "resource"],
        registry=reference,
    )
    durations = Histogram(
        "trioperator_handler_duration_seconds",
        "How long handler runs took (daemons: their whole run).",
        ["handler"],
        buckets=HANDLER_BUCKETS,
        registry=reference,
    )
    requests = Counter(
        "trioperator_api_requests",
        "Requests to the Kubernetes API by verb and HTTP status code (error: no response).",
        ["verb", "code"],
        registry=reference,
    )
    latencies = Histogram(
        "trioperator_api_request_duration_seconds",
        "Latency of requests to the Kubernetes API (watches: until the stream is open).",
        ["verb"],
        buckets=API_BUCKETS,
        registry=reference,
    )
    reviews = Counter(
        "trioperator_admission_reviews",
        "Admission reviews answered, by webhook (handler id) and result (allowed/denied).",
        ["webhook", "result"],
        registry=reference,
    )
    for seconds in (0.001, 0.2, 3.0, 400.0):
        metrics.handler_ran("h1", THINGS, HandlerOutcome(final=True), seconds, retry=False)
        runs.labels("h1", LABEL, "success").inc()
        durations.labels("h1").observe(seconds)
    failure = HandlerOutcome(final=True, exception=PermanentError("no"))
    metrics.handler_ran("h2", None, failure, 0.05, retry=False)
    runs.labels("h2", "", "failure").inc()
    durations.labels("h2").observe(0.05)
    errors.labels("h2", "").inc()
    for code, seconds in ((200, 0.002), (None, 11.0), (200, 0.03), (404, 0.0005)):
        metrics.request_done("GET", code, seconds)
        requests.labels("GET", "error" if code is None else str(code)).inc()
        latencies.labels("GET").observe(seconds)
    metrics.review_done("w1", True)
    metrics.review_done("w1", False)
    reviews.labels("w1", "allowed").inc()
    reviews.labels("w1", "denied").inc()

    encode, _ = choose_encoder(accept)
    ours = encode(metrics.registry).decode().splitlines()
    theirs = encode(reference).decode().splitlines()
    assert [line for line in ours if line.split(" ")[-1] != "EOF" and line in theirs] == [
        line for line in theirs if line.split(" ")[-1] != "EOF"
    ]


@pytest.mark.parametrize("exported", [False, True])
def test_the_created_series_follow_prometheus_clients_own_switch(exported: bool) -> None:
    import prometheus_client

    metrics = OperatorMetrics()
    metrics.handler_ran("h1", THINGS, HandlerOutcome(final=True), 0.1, retry=False)
    metrics.request_done("get", 200, 0.1)
    was = "trioperator_api_requests_created" in {name for name, _ in samples(metrics)}
    switch = {
        True: prometheus_client.enable_created_metrics,
        False: prometheus_client.disable_created_metrics,
    }
    switch[exported]()
    try:
        names = {name for name, _ in samples(metrics)}
    finally:
        switch[was]()
    created = {
        "trioperator_handler_runs_created",
        "trioperator_handler_duration_seconds_created",
        "trioperator_api_requests_created",
    }
    assert (created <= names) is exported
    assert bool(created & names) is exported
    assert "trioperator_handler_runs_total" in names
