"""Server-side selectors on the real API server: what the watch receives, and objects that
leave the selection while they hold the finalizer (docs/selectors.md)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.e2e.conftest import Kubectl
from tests.e2e.test_metrics import RESOURCE, _free_port, scrape, value

FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"

OPERATOR = """
import trioperator as kopf


@kopf.on.startup()
def configure(settings, **_):
    settings.posting.enabled = False


@kopf.on.create("kopfexamples", labels={"sel-e2e": "in"})
def created(name, logger, **_):
    logger.info(f"CREATED {name}")
    return "created"


@kopf.on.delete("kopfexamples", labels={"sel-e2e": "in"})
def deleted(name, logger, **_):
    logger.info(f"DELETION HANDLER {name}")
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


def _apply(kubectl: Kubectl, namespace: str, name: str, label: str | None) -> None:
    labels = {"sel-e2e": label} if label is not None else {}
    obj = {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfExample",
        "metadata": {"name": name, "labels": labels},
        "spec": {"field": "value"},
    }
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(obj))


def _label(kubectl: Kubectl, namespace: str, name: str, label: str) -> None:
    kubectl("label", "-n", namespace, "kopfexample", name, f"sel-e2e={label}", "--overwrite")


def _events(url: str, kind: str) -> float:
    return value(scrape(url), "trioperator_watch_events_total", resource=RESOURCE, type=kind)


def _get(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any] | None:
    found = kubectl.get("kopfexamples", "-n", namespace)["items"]
    return next((item for item in found if item["metadata"]["name"] == name), None)


def test_the_watch_receives_only_selected_objects_and_departures_release_the_finalizer(
    example_crd: None, namespace: str, run_operator: Any, kubectl: Kubectl, tmp_path: Path
) -> None:
    source = tmp_path / "operator.py"
    source.write_text(OPERATOR)
    url = f"http://127.0.0.1:{_free_port()}/metrics"
    operator = run_operator("-n", namespace, "--standalone", "--metrics", url, str(source))
    operator.wait_for("The operator is ready")
    operator.wait_for("Serving the metrics at")
    assert "with server-side selectors: labels='sel-e2e=in'" in operator.output

    # Unselected objects first, then a selected one: the server sends only the latter.
    _apply(kubectl, namespace, "out-1", None)
    _apply(kubectl, namespace, "out-2", "other")
    _apply(kubectl, namespace, "in-1", "in")
    _apply(kubectl, namespace, "in-2", "in")
    operator.wait_for("CREATED in-1")
    operator.wait_for("CREATED in-2")
    for name in ("out-1", "out-2"):
        kubectl("patch", "kopfexample", name, "-n", namespace, "--type=merge",
                "-p", '{"spec": {"field": "changed"}}')  # fmt: skip
    # Both selected objects (and only they) were ADDED; the unselected ones' creations and
    # changes never came: the handlers' own patches are the only MODIFIED events.
    _eventually(lambda: _events(url, "ADDED") == 2, "two ADDED events")
    in_1 = _get(kubectl, namespace, "in-1")
    assert in_1 is not None
    assert FINALIZER in in_1["metadata"]["finalizers"]
    for name in ("out-1", "out-2"):
        obj = _get(kubectl, namespace, name)
        assert obj is not None
        assert not obj["metadata"].get("finalizers")
        assert "created" not in (obj.get("status") or {})
    assert "out-1" not in operator.output
    assert "out-2" not in operator.output

    # in-1 leaves the selection while it holds the finalizer: the server reports a DELETED,
    # and the operator releases the finalizer (no handler matches it any more, as without
    # the selector). Its later deletion is not stuck; its deletion handler does not run.
    _label(kubectl, namespace, "in-1", "gone")
    operator.wait_for(r"in-1\] Removed the finalizer: the object has left the watched selection")
    _eventually(lambda: _events(url, "DELETED") == 1, "the departure's DELETED event")
    released = _get(kubectl, namespace, "in-1")
    assert released is not None
    assert not released["metadata"].get("finalizers")
    kubectl("delete", "-n", namespace, "kopfexample", "in-1", "--timeout=30s")
    assert _get(kubectl, namespace, "in-1") is None
    assert "DELETION HANDLER in-1" not in operator.output

    # A selected object is deleted as usual: its deletion handler runs, the object goes.
    kubectl("delete", "-n", namespace, "kopfexample", "in-2", "--timeout=30s")
    assert "DELETION HANDLER in-2" in operator.output
    assert _get(kubectl, namespace, "in-2") is None

    # An object that enters the selection is handled from then on.
    _label(kubectl, namespace, "out-1", "in")
    operator.wait_for("CREATED out-1")
    _eventually(
        lambda: (
            FINALIZER in (_get(kubectl, namespace, "out-1") or {})["metadata"].get("finalizers", [])
        ),
        "the entering object's finalizer",
    )
    assert operator.stop() == 0
    assert "Traceback" not in operator.output
