"""The network between the operator and the API server misbehaves (tests/chaos/proxy.py):
connections reset, responses truncated and delayed, watch streams stalled, 429 and 5xx answers,
and a watch history compacted away so that resuming gets 410 Gone."""

from __future__ import annotations

import signal
import time

from tests.chaos.conftest import Case, ControlPlane
from tests.chaos.proxy import Proxy

OBJECTS = 60
STALL_SECONDS = 25  # longer than the inactivity timeout + the probe's grace: a stall shows


def test_connections_reset_truncated_and_delayed(case: Case, proxy: Proxy) -> None:
    case.start()
    case.wait_liveness(200)
    policy = proxy.policy
    policy.reset, policy.truncate, policy.delay = 0.1, 0.1, 0.2
    case.burst(OBJECTS)
    time.sleep(5)  # the faults go on for a while after the burst
    policy.clear()
    cleared = time.monotonic()
    done = case.wait_handled()
    case.wait_liveness(200)
    assert all(policy.counts[key] for key in ("reset", "truncated", "delayed")), policy.counts
    case.finish(
        f"proxy: {policy.counts['reset']} resets, {policy.counts['truncated']} truncated,"
        f" {policy.counts['delayed']} delayed responses",
        recovered_in=done - cleared,
    )


def test_watch_streams_stalled(case: Case, proxy: Proxy) -> None:
    case.start()
    case.wait_liveness(200)
    proxy.policy.stall_watches = True
    stalled = time.monotonic()
    case.burst(OBJECTS)
    unhealthy = case.wait_liveness(500, timeout=STALL_SECONDS + 30)
    assert unhealthy - stalled < STALL_SECONDS + 30
    proxy.policy.stall_watches = False
    proxy.cut_all()
    released = time.monotonic()
    done = case.wait_handled()
    case.wait_liveness(200)
    case.finish(
        f"proxy: watch streams stalled (no bytes) for {released - stalled:.0f} s mid-burst",
        recovered_in=done - released,
    )


def test_throttled_with_429_then_failing_with_5xx(case: Case, proxy: Proxy) -> None:
    case.start()
    case.wait_liveness(200)
    policy = proxy.policy
    policy.answer, policy.answer_status, policy.retry_after = 0.3, 429, 1

    def switch(step: int) -> None:
        if step == OBJECTS // 2:
            policy.answer_status = 503
        if step == OBJECTS:
            policy.answer_status = 500

    case.burst(OBJECTS, during=switch)
    policy.clear()
    cleared = time.monotonic()
    done = case.wait_handled()
    case.wait_liveness(200)
    answered = {key: count for key, count in policy.counts.items() if key.startswith("answered")}
    assert len(answered) == 3, answered
    case.finish(
        "proxy: 30% of requests answered 429 (Retry-After: 1), then 503, then 500: "
        + ", ".join(f"{count}x {key.split()[1]}" for key, count in sorted(answered.items())),
        recovered_in=done - cleared,
    )


def test_watch_history_compacted_resume_gets_410(
    case: Case, proxy: Proxy, control_plane: ControlPlane
) -> None:
    case.start()
    case.burst(20, prefix="early")
    case.wait_handled()
    # The operator hears nothing while the objects change; then the history it would resume
    # from is compacted, and the API server's watch cache restarts from the compacted state.
    proxy.policy.stall_watches = True
    case.burst(OBJECTS)
    for index in range(0, 20, 5):  # never the deleted ones (index % 5 == 4)
        case.update(f"early-{index:03d}", 1000 + index)
    control_plane.compact()
    control_plane.kill("kube-apiserver", signal.SIGKILL)
    control_plane.up()
    proxy.policy.stall_watches = False
    proxy.cut_all()
    released = time.monotonic()
    done = case.wait_handled()
    case.wait_liveness(200)
    assert proxy.policy.counts["gone (410)"] >= 1, proxy.policy.counts
    case.finish(
        "watch history compacted while the operator heard nothing; resuming got 410 Gone",
        recovered_in=done - released,
    )
