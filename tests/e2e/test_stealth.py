"""Kopf's "stealth mode" on the real API server: an object that none of the filtered change
handlers takes in is not written to; when it starts to match, it is handled as a creation
(docs/guide/filters.md)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.e2e.conftest import Kubectl

DIFFBASE = "kopf.zalando.org/last-handled-configuration"
FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"

# Annotation filters are never pushed down to the watch: the operator sees the object from
# the start and has to leave it alone by itself.
OPERATOR = """
import trioperator as kopf


@kopf.on.startup()
def configure(settings, **_):
    settings.posting.enabled = False


# Unfiltered: it logs every event of every object with the object's resourceVersion, so that
# the test sees when an object's events up to a given one have been processed.
@kopf.on.event("kopfexamples")
def seen(name, body, logger, **_):
    logger.info(f"EVENT OF {name} AT {body['metadata']['resourceVersion']}")


@kopf.on.create("kopfexamples", annotations={"stealth-e2e": "in"})
def created(name, logger, **_):
    logger.info(f"CREATE HANDLER {name}")


@kopf.on.update("kopfexamples", annotations={"stealth-e2e": "in"})
def updated(name, logger, **_):
    logger.info(f"UPDATE HANDLER {name}")


@kopf.on.delete("kopfexamples", annotations={"stealth-e2e": "in"})
def deleted(name, logger, **_):
    logger.info(f"DELETE HANDLER {name}")
"""


def _eventually(check: Callable[[], Any], what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not in {timeout} s: {what}")
        time.sleep(0.2)


def _get(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    found = kubectl.get("kopfexamples", "-n", namespace)["items"]
    obj = next((item for item in found if item["metadata"]["name"] == name), None)
    assert obj is not None
    return obj


def _wait_seen(operator: Any, kubectl: Kubectl, namespace: str, name: str) -> None:
    """Wait until the operator has seen the object's latest event: one object's events are
    processed one after another, so the earlier ones have been processed in full by then."""
    version = _get(kubectl, namespace, name)["metadata"]["resourceVersion"]
    operator.wait_for(rf"EVENT OF {name} AT {version}\b")


def test_unmatched_object_is_untouched_until_it_matches_then_created(
    example_crd: None, namespace: str, run_operator: Any, kubectl: Kubectl, tmp_path: Path
) -> None:
    source = tmp_path / "operator.py"
    source.write_text(OPERATOR)
    operator = run_operator("-n", namespace, "--standalone", str(source))
    operator.wait_for("The operator is ready")

    obj = {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfExample",
        "metadata": {"name": "stealthy"},
        "spec": {"field": "value"},
    }
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(obj))
    # A change the operator would store a diff-base for, were it handling the object.
    kubectl("patch", "kopfexample", "stealthy", "-n", namespace, "--type=merge",
            "-p", '{"spec": {"field": "changed"}}')  # fmt: skip
    # One more change, which matches no handler either: an object's events are processed one
    # after another, so once this one is seen, the earlier ones have been processed in full
    # (shown by the operator itself, not by a wait of a few seconds).
    kubectl("annotate", "kopfexample", "stealthy", "-n", namespace, "stealth-e2e-step=last")
    _wait_seen(operator, kubectl, namespace, "stealthy")
    untouched = _get(kubectl, namespace, "stealthy")
    assert DIFFBASE not in (untouched["metadata"].get("annotations") or {})
    assert not untouched["metadata"].get("finalizers")
    assert "HANDLER stealthy" not in operator.output

    kubectl("annotate", "kopfexample", "stealthy", "-n", namespace, "stealth-e2e=in")
    operator.wait_for("CREATE HANDLER stealthy")
    handled = _eventually(
        lambda: (o := _get(kubectl, namespace, "stealthy"))
        and DIFFBASE in (o["metadata"].get("annotations") or {})
        and o,
        "the diff-base stored",
    )
    assert handled["metadata"]["finalizers"] == [FINALIZER]
    # The events of the operator's own writes are processed too (they are no update).
    _wait_seen(operator, kubectl, namespace, "stealthy")
    assert "UPDATE HANDLER stealthy" not in operator.output
