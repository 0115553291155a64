"""Kubernetes Events posted by handlers (examples/04-events), as the real API server keeps them.

Needs the poster wired into the operator and ``trioperator.event/info/warn/exception``
exported from the package (see trioperator/_runtime/handling/posting.py).
"""

from __future__ import annotations

import time
from typing import Any

from tests.e2e.conftest import EXAMPLES, Kubectl

EXPECTED = {
    ("SomeType", "SomeReason", "Some message"),
    ("Normal", "SomeReason", "Some message"),
    ("Warning", "SomeReason", "Some message"),
    ("Error", "RuntimeError", "Some exception: Exception text."),
    ("Normal", "AsyncReason", "Posted from an async handler"),
}


def _events_about(kubectl: Kubectl, namespace: str, uid: str) -> list[dict[str, Any]]:
    items = kubectl.get("events", "-n", namespace).get("items", [])
    return [e for e in items if e.get("involvedObject", {}).get("uid") == uid]


def test_events_posted_by_handlers_are_in_the_api(
    example_crd: None, kubectl: Kubectl, namespace: str, run_operator: Any
) -> None:
    operator = run_operator("-n", namespace, str(EXAMPLES / "04-events" / "example.py"))
    operator.wait_for("The operator is ready")
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "obj.yaml"))
    operator.wait_for(r"Handler 'create_fn' succeeded\.")
    operator.wait_for(r"Handler 'create_async_fn' succeeded\.")
    obj = kubectl.get("kopfexample", "kopf-example-1", "-n", namespace)
    uid = obj["metadata"]["uid"]

    deadline = time.monotonic() + 30
    events = _events_about(kubectl, namespace, uid)
    while len(events) < len(EXPECTED) and time.monotonic() < deadline:
        time.sleep(0.2)
        events = _events_about(kubectl, namespace, uid)

    assert {(e["type"], e["reason"], e["message"]) for e in events} == EXPECTED
    assert len(events) == len(EXPECTED)
    for posted in events:
        assert posted["involvedObject"] == {
            "apiVersion": "kopf.dev/v1",
            "kind": "KopfExample",
            "name": "kopf-example-1",
            "uid": uid,
            "namespace": namespace,
        }
        assert posted["metadata"]["name"].startswith("kopf-event-")
        assert posted["source"] == {"component": "kopf"}
        assert posted["reportingComponent"] == "kopf"
        assert posted["reportingInstance"] == "dev"

    # As `kubectl describe` shows them, too.
    described = kubectl("describe", "kopfexample", "kopf-example-1", "-n", namespace)
    assert "Some exception: Exception text." in described

    assert operator.stop() == 0
    assert "Failed to post an event" not in operator.output
    assert "Traceback" not in operator.output
