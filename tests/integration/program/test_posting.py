"""Kubernetes Events queued by ``event/info/warn/exception`` and posted by the operator's poster.

What a user observes: the Events in the (fake) API, their JSON, their order, and the log lines
when something goes wrong. The functions are called from async code, from sync handlers in
worker threads, and from per-object loggers.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from functools import partial
from typing import Any

import pytest
import trio
from trioperator._runtime.handling.invocation import invoke, make_limiter
from trioperator._runtime.handling.loggers import LocalObjectLogger, ObjectLogger
from trioperator._runtime.handling.posting import (
    PostingUnavailableError,
    event,
    exception,
    info,
    warn,
)
from trioperator.testing import FakeAPI

BODY: dict[str, Any] = {
    "apiVersion": "kopf.dev/v1",
    "kind": "KopfExample",
    "metadata": {"name": "kopf-example-1", "namespace": "default", "uid": "uid-1"},
    "spec": {"field": "value"},
}
REF = {
    "apiVersion": "kopf.dev/v1",
    "kind": "KopfExample",
    "name": "kopf-example-1",
    "uid": "uid-1",
    "namespace": "default",
}


def posted(api: FakeAPI, namespace: str = "default") -> list[dict[str, Any]]:
    """The Events stored in the fake API, in the order they were created."""
    stored = api.objects("events", namespace)
    return sorted(stored, key=lambda e: int(e["metadata"]["resourceVersion"]))


def reasons(api: FakeAPI) -> list[str]:
    return [e["reason"] for e in posted(api)]


async def test_a_flood_of_events_beyond_the_queue_is_dropped_with_a_warning(
    autojump_clock: Any,
    posting: Any,
    fake_api: FakeAPI,
    helpers: Any,
    caplog_trioperator: pytest.LogCaptureFixture,
) -> None:
    async with posting.running(max_queued=3):
        # No checkpoint: the poster takes the first one (it waits for it), 3 are queued.
        for i in range(10):
            info(BODY, reason=f"Flood{i}")
        await helpers.wait_until(lambda: len(posted(fake_api)) == 4)
        info(BODY, reason="AfterTheFlood")
        await helpers.wait_until(lambda: len(posted(fake_api)) == 5)

    assert reasons(fake_api) == ["Flood0", "Flood1", "Flood2", "Flood3", "AfterTheFlood"]
    warnings = [r.getMessage() for r in caplog_trioperator.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert warnings[0].startswith("Too many events are waiting to be posted: dropping new ones")
    assert "Flood4" in warnings[0]
    assert warnings[1] == "6 event(s) were dropped: the queue was full."


async def test_events_from_async_code_are_posted_in_order_as_kopf_posts_them(
    autojump_clock: Any, posting: Any, fake_api: FakeAPI, helpers: Any
) -> None:
    async with posting.running():
        info(BODY, reason="Info1", message="Some info.")
        warn(BODY, reason="Warn1", message="Some warning.")
        event(BODY, type="SomeType", reason="Custom1", message="Something custom.")
        try:
            raise RuntimeError("Exception text.")
        except RuntimeError:
            exception(BODY, message="Some exception:")
        await helpers.wait_until(lambda: len(posted(fake_api)) == 4)

    events = posted(fake_api)
    assert [(e["type"], e["reason"], e["message"]) for e in events] == [
        ("Normal", "Info1", "Some info."),
        ("Warning", "Warn1", "Some warning."),
        ("SomeType", "Custom1", "Something custom."),
        ("Error", "RuntimeError", "Some exception: Exception text."),
    ]
    first = events[0]
    assert first["involvedObject"] == REF
    assert first["metadata"]["generateName"] == "kopf-event-"
    assert first["metadata"]["name"].startswith("kopf-event-")
    assert first["source"] == {"component": "kopf"}
    assert first["reportingComponent"] == "kopf"
    assert first["reportingInstance"] == "dev"
    assert first["eventTime"] == first["firstTimestamp"] == first["lastTimestamp"]


async def test_several_objects_references_and_explicit_exceptions(
    autojump_clock: Any, posting: Any, fake_api: FakeAPI, helpers: Any
) -> None:
    other = {**BODY, "metadata": {**BODY["metadata"], "name": "other", "uid": "uid-2"}}
    reference = {"apiVersion": "v1", "kind": "Pod", "name": "pod-1", "namespace": "default"}
    async with posting.running():
        info([BODY, other], reason="Many")
        info(reference, reason="ByRef")
        exception(BODY, exc=ValueError("bad value"))
        exception(BODY, reason="Custom", exc=KeyError("k"), message="Missing:")
        await helpers.wait_until(lambda: len(posted(fake_api)) == 5)

    events = posted(fake_api)
    assert [(e["reason"], e["involvedObject"]["name"]) for e in events] == [
        ("Many", "kopf-example-1"),
        ("Many", "other"),
        ("ByRef", "pod-1"),
        ("ValueError", "kopf-example-1"),
        ("Custom", "kopf-example-1"),
    ]
    assert events[2]["involvedObject"] == reference
    assert events[3]["message"] == "bad value"
    assert events[4]["message"] == "Missing: 'k'"


async def test_events_from_sync_handlers_in_worker_threads(
    autojump_clock: Any, posting: Any, fake_api: FakeAPI, helpers: Any
) -> None:
    def sync_handler(n: int) -> None:
        assert threading.current_thread() is not threading.main_thread()
        info(BODY, reason=f"Thread{n}a")
        warn(BODY, reason=f"Thread{n}b")

    async with posting.running():
        info(BODY, reason="Before")
        # As handlers are called: in a worker thread, with the operator's context copied in.
        await invoke(sync_handler, kwargs={"n": 1}, limiter=make_limiter(None))
        info(BODY, reason="Between")
        await trio.to_thread.run_sync(sync_handler, 2)
        info(BODY, reason="After")
        await helpers.wait_until(lambda: len(posted(fake_api)) == 7)

    assert reasons(fake_api) == [
        "Before",
        "Thread1a",
        "Thread1b",
        "Between",
        "Thread2a",
        "Thread2b",
        "After",
    ]


async def test_user_threads_need_the_operators_context(
    autojump_clock: Any, posting: Any, fake_api: FakeAPI, helpers: Any
) -> None:
    errors: list[BaseException] = []

    def post() -> None:
        try:
            info(BODY, reason="FromThread")
        except BaseException as exc:
            errors.append(exc)

    async with posting.running():
        # A thread of the user's own, with the context copied: posted.
        context = contextvars.copy_context()
        with_context = threading.Thread(target=context.run, args=(post,))
        with_context.start()
        await trio.to_thread.run_sync(with_context.join)
        # Without the context, it cannot know which operator to post to.
        without_context = threading.Thread(target=post)
        without_context.start()
        await trio.to_thread.run_sync(without_context.join)
        await helpers.wait_until(lambda: len(posted(fake_api)) == 1)

    assert reasons(fake_api) == ["FromThread"]
    [error] = errors
    assert isinstance(error, PostingUnavailableError)


def test_posting_outside_of_an_operator_is_an_error() -> None:
    with pytest.raises(PostingUnavailableError, match="inside a running operator"):
        info(BODY, reason="Nowhere")
    with pytest.raises(LookupError):  # what Kopf raises in that case
        warn(BODY, reason="Nowhere")


async def test_long_messages_are_cut_in_the_middle(
    autojump_clock: Any, posting: Any, fake_api: FakeAPI, helpers: Any
) -> None:
    async with posting.running():
        info(BODY, reason="Long", message="H" * 600 + "M" * 1000 + "T" * 600)
        await helpers.wait_until(lambda: len(posted(fake_api)) == 1)
    [posted_event] = posted(fake_api)
    assert len(posted_event["message"]) == 1024
    assert posted_event["message"] == "H" * 511 + "..." + "T" * 510  # as Kopf cuts it


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        (logging.DEBUG, ["Normal", "Warning", "Error", "Custom", "Debug", "Marker"]),
        (logging.INFO, ["Normal", "Warning", "Error", "Custom", "Marker"]),
        (logging.WARNING, ["Warning", "Error", "Custom", "Marker"]),
        (logging.ERROR, ["Error", "Custom", "Marker"]),
        (logging.CRITICAL, ["Custom", "Marker"]),
    ],
)
async def test_level_gating(
    autojump_clock: Any,
    posting: Any,
    fake_api: FakeAPI,
    helpers: Any,
    settings: Any,
    level: int,
    expected: list[str],
) -> None:
    settings.posting.level = level
    async with posting.running():
        info(BODY, reason="Normal")
        warn(BODY, reason="Warning")
        exception(BODY, reason="Error", exc=RuntimeError("x"))
        event(BODY, type="SomeType", reason="Custom")  # no level of its own: never gated
        event(BODY, type="Debug", reason="Debug")
        event(BODY, type="SomeType", reason="Marker")
        await helpers.wait_until(lambda: "Marker" in reasons(fake_api))
    assert reasons(fake_api) == expected


async def test_disabled_posting_posts_nothing_not_even_warnings(
    autojump_clock: Any, posting: Any, fake_api: FakeAPI, helpers: Any, settings: Any
) -> None:
    settings.posting.enabled = False
    async with posting.running():
        info(BODY, reason="Info")
        warn(BODY, reason="Warn")  # Kopf's quirk posts this one; the documentation says not
        exception(BODY, reason="Error", exc=RuntimeError("x"))
        event(BODY, type="SomeType", reason="Custom")
        settings.posting.enabled = True  # read on every call: a startup handler may change it
        info(BODY, reason="Marker")
        await helpers.wait_until(lambda: "Marker" in reasons(fake_api))
    assert reasons(fake_api) == ["Marker"]


async def test_no_events_about_events(
    autojump_clock: Any, posting: Any, fake_api: FakeAPI, helpers: Any
) -> None:
    core = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1", "namespace": "default"}}
    newer = {**core, "apiVersion": "events.k8s.io/v1"}
    async with posting.running():
        info(core, reason="AboutCoreEvent")
        warn(newer, reason="AboutNewerEvent")
        info(BODY, reason="Marker")
        await helpers.wait_until(lambda: "Marker" in reasons(fake_api))
    assert reasons(fake_api) == ["Marker"]
    assert len([r for r in fake_api.requests if r.method == "POST"]) == 1


@pytest.mark.parametrize(("status", "times"), [(500, 3), (403, 1), (404, 1)])
async def test_api_errors_are_logged_and_the_poster_keeps_going(
    autojump_clock: Any,
    posting: Any,
    fake_api: FakeAPI,
    helpers: Any,
    caplog_trioperator: pytest.LogCaptureFixture,
    status: int,
    times: int,
) -> None:
    # 500 outlives the client's 3 attempts (error_backoffs=(1, 2)); 4xx are not retried.
    fake_api.inject("POST", "/api/v1/namespaces/*/events", status=status, times=times)
    async with posting.running():
        info(BODY, reason="Lost")
        info(BODY, reason="Posted")
        await helpers.wait_until(lambda: "Posted" in reasons(fake_api))
    assert reasons(fake_api) == ["Posted"]
    warnings = [
        r.getMessage()
        for r in caplog_trioperator.records
        if r.levelno == logging.WARNING and r.name == "kopf._core.engines.posting"
    ]
    assert len(warnings) == 1
    assert warnings[0].startswith("Failed to post an event. Ignoring and continuing.")
    assert "Lost" in warnings[0]


async def test_cluster_scoped_objects_get_events_in_the_default_namespace(
    autojump_clock: Any, posting: Any, fake_api: FakeAPI, helpers: Any
) -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1", "uid": "n1"}}
    async with posting.running():
        info(node, reason="AboutNode")
        await helpers.wait_until(lambda: len(fake_api.objects("events", "default")) == 1)
    [stored] = fake_api.objects("events", "default")
    assert stored["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "node-1",
        "uid": "n1",
    }
    assert "eventTime" not in stored  # the API server would reject it (see _client/events.py)


async def test_reporting_settings_are_used(
    autojump_clock: Any, posting: Any, fake_api: FakeAPI, helpers: Any, settings: Any
) -> None:
    settings.posting.reporting_component = "my-operator"
    settings.posting.reporting_instance = "pod-abc"
    settings.posting.event_name_prefix = "my-event-"
    async with posting.running():
        info(BODY, reason="Custom")
        await helpers.wait_until(lambda: len(posted(fake_api)) == 1)
    [stored] = posted(fake_api)
    assert stored["metadata"]["name"].startswith("my-event-")
    assert stored["source"] == {"component": "my-operator"}
    assert stored["reportingComponent"] == "my-operator"
    assert stored["reportingInstance"] == "pod-abc"


async def test_graceful_stop_posts_what_is_queued(
    autojump_clock: Any, posting: Any, fake_api: FakeAPI
) -> None:
    async with posting.running():
        for n in range(5):
            info(BODY, reason=f"Queued{n}")
    posting.close()
    with trio.fail_after(60):
        await posting.finished.wait()
    assert reasons(fake_api) == [f"Queued{n}" for n in range(5)]


async def test_graceful_stop_drains_within_a_bounded_time(
    autojump_clock: Any,
    posting: Any,
    fake_api: FakeAPI,
    caplog_trioperator: pytest.LogCaptureFixture,
) -> None:
    fake_api.inject("POST", "/api/v1/namespaces/*/events", delay=100, times=None)
    async with posting.running(drain_timeout=5):
        for n in range(3):
            info(BODY, reason=f"Queued{n}")
    posting.close()
    started = trio.current_time()
    with trio.fail_after(60):
        await posting.finished.wait()
    assert 5 <= trio.current_time() - started <= 5.5
    assert "3 event(s) not posted: the operator is stopping." in caplog_trioperator.messages


async def test_events_after_the_poster_has_stopped_are_dropped_with_a_warning(
    autojump_clock: Any,
    posting: Any,
    fake_api: FakeAPI,
    caplog_trioperator: pytest.LogCaptureFixture,
) -> None:
    async with posting.running():
        posting.close()
        with trio.fail_after(60):
            await posting.finished.wait()
        info(BODY, reason="TooLate")  # does not raise
    assert reasons(fake_api) == []
    assert any("An event is dropped" in m for m in caplog_trioperator.messages)


# ------------------------------------------------------------------------ log records -> events


async def test_object_log_records_become_events_when_enabled(
    autojump_clock: Any,
    posting: Any,
    fake_api: FakeAPI,
    helpers: Any,
    settings: Any,
    caplog_trioperator: pytest.LogCaptureFixture,
) -> None:
    settings.posting.loggers = True
    logger = ObjectLogger(BODY)
    async with posting.running():
        logger.debug("Debug line.")  # below settings.posting.level (INFO)
        logger.info("Info line.")
        logger.warning("Warning line.")
        logger.error("Error line.")
        logger.critical("Critical line.")
        logger.info("Skipped line.", extra={"k8s_skip": True})
        LocalObjectLogger(BODY).error("Never posted: a local logger.")
        logging.getLogger("trioperator.other").error("Not about an object.")
        await trio.to_thread.run_sync(logger.info, "Thread line.")
        info(BODY, reason="Marker")
        await helpers.wait_until(lambda: "Marker" in reasons(fake_api))

    assert [(e["type"], e["reason"], e["message"]) for e in posted(fake_api)] == [
        ("Normal", "Logging", "Info line."),
        ("Warning", "Logging", "Warning line."),
        ("Error", "Logging", "Error line."),
        ("Fatal", "Logging", "Critical line."),
        ("Normal", "Logging", "Thread line."),
        ("Normal", "Marker", ""),
    ]
    assert posted(fake_api)[0]["involvedObject"] == REF


async def test_object_log_records_follow_the_level_setting(
    autojump_clock: Any,
    posting: Any,
    fake_api: FakeAPI,
    helpers: Any,
    settings: Any,
    caplog_trioperator: pytest.LogCaptureFixture,
) -> None:
    settings.posting.loggers = True
    settings.posting.level = logging.DEBUG
    logger = ObjectLogger(BODY)
    async with posting.running():
        logger.debug("Debug line.")
        settings.posting.level = logging.ERROR
        logger.warning("Warning line.")
        logger.error("Error line.")
        info(BODY, reason="Marker")  # INFO < ERROR: not posted; so, another marker
        event(BODY, type="Marker", reason="Marker")
        await helpers.wait_until(lambda: "Marker" in reasons(fake_api))
    assert [(e["type"], e["message"]) for e in posted(fake_api)] == [
        ("Debug", "Debug line."),
        ("Error", "Error line."),
        ("Marker", ""),
    ]


async def test_object_log_records_are_not_posted_by_default(
    autojump_clock: Any,
    posting: Any,
    fake_api: FakeAPI,
    helpers: Any,
    caplog_trioperator: pytest.LogCaptureFixture,
) -> None:
    logger = ObjectLogger(BODY)
    async with posting.running():
        logger.error("Error line.")
        info(BODY, reason="Marker")
        await helpers.wait_until(lambda: "Marker" in reasons(fake_api))
    assert reasons(fake_api) == ["Marker"]
    # Outside of an operator, object loggers just log (no error about posting).
    logger.error("Logged outside.")
    assert "Logged outside." in caplog_trioperator.text


async def test_object_logs_from_threads_and_the_trio_thread_at_once(
    autojump_clock: Any,
    posting: Any,
    fake_api: FakeAPI,
    helpers: Any,
    settings: Any,
    caplog_trioperator: pytest.LogCaptureFixture,
) -> None:
    """A thread logging (under the logging handler's lock) must not wait for the trio thread,
    which may be waiting for that very lock to log a line of its own: no deadlock."""
    settings.posting.loggers = True
    logger = ObjectLogger(BODY)

    def log_in_thread() -> None:
        for n in range(300):
            logger.info(f"Thread {n}.")

    async with posting.running():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(trio.to_thread.run_sync, log_in_thread))
            for n in range(300):
                logger.info(f"Trio {n}.")
                await trio.lowlevel.checkpoint()
        await helpers.wait_until(lambda: len(posted(fake_api)) == 600)
    messages = [e["message"] for e in posted(fake_api)]
    assert [m for m in messages if m.startswith("Thread")] == [f"Thread {n}." for n in range(300)]
    assert [m for m in messages if m.startswith("Trio")] == [f"Trio {n}." for n in range(300)]
