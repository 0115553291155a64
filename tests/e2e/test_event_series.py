"""Repeated Events counted on one Event object, as the real API server keeps and shows them.

A handler posts the same Event three times: the API holds one Event with ``count: 3`` and a
``lastTimestamp`` not before its ``firstTimestamp``, and ``kubectl describe`` shows it as
``(x3 over ...)``. The patch that counts a repeat is accepted by kube-apiserver's validation of
core/v1 Events (the namespaced, ``eventTime``-carrying shape we post).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from tests.e2e.conftest import EXAMPLES, Kubectl, start_trioperator

REPEATING_OPERATOR = """
import time
import trioperator as kopf


@kopf.on.create("kopfexamples")
def create_fn(body, **_):
    for _ in range(3):
        kopf.info(body, reason="Repeated", message="The same thing again.")
        time.sleep(1.1)  # a second apart: the Event's times are whole seconds
    kopf.info(body, reason="Repeated", message="Something else.")
"""


def test_repeated_events_are_one_event_with_a_count(
    tmp_path: Path, example_crd: None, kubectl: Kubectl, namespace: str, run_operator: Any
) -> None:
    script = tmp_path / "operator.py"
    script.write_text(REPEATING_OPERATOR)
    operator = start_trioperator(run_operator, "-n", namespace, str(script))
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "obj.yaml"))
    operator.wait_for(r"Handler 'create_fn' succeeded\.")
    uid = kubectl.get("kopfexample", "kopf-example-1", "-n", namespace)["metadata"]["uid"]

    def ours() -> list[dict[str, Any]]:
        items = kubectl.get("events", "-n", namespace).get("items", [])
        return [e for e in items if e.get("involvedObject", {}).get("uid") == uid]

    deadline = time.monotonic() + 30
    events = ours()
    while len(events) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
        events = ours()
    # The last one is posted after the repeats: once it is there, they are counted already.
    assert sorted((e["message"], e.get("count")) for e in events) == [
        ("Something else.", None),
        ("The same thing again.", 3),
    ]
    [repeated] = [e for e in events if e.get("count")]
    assert repeated["lastTimestamp"] > repeated["firstTimestamp"]
    assert (repeated["type"], repeated["reason"]) == ("Normal", "Repeated")

    described = kubectl("describe", "kopfexample", "kopf-example-1", "-n", namespace)
    assert re.search(r"\(x3 over \S+\)\s+kopf\s+The same thing again\.", described), described

    assert operator.stop() == 0
    assert "Failed to post an event" not in operator.output
    assert "Repeated events cannot be counted" not in operator.output
    assert "Traceback" not in operator.output
