"""Daemons, timers and indices (examples 14-16), run by the CLI against the real kube-apiserver."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.e2e.conftest import EXAMPLES, Kubectl

FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"


def _apply_object(kubectl: Kubectl, namespace: str, name: str = "kopf-example-1") -> None:
    manifest = (EXAMPLES / "obj.yaml").read_text().replace("kopf-example-1", name)
    kubectl("apply", "-n", namespace, "-f", "-", input=manifest)


def _eventually(check: Callable[[], Any], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            assert result, "the condition was not met in time"
            return result
        time.sleep(0.2)


def _status(kubectl: Kubectl, namespace: str, name: str = "kopf-example-1") -> dict[str, Any]:
    obj = kubectl.get("kopfexample", name, "-n", namespace)
    status: dict[str, Any] = obj.get("status") or {}
    return status


def test_daemons_example_holds_the_deletion_until_the_daemons_stop(
    example_crd: None, kubectl: Kubectl, namespace: str, run_operator: Any
) -> None:
    operator = run_operator("-n", namespace, str(EXAMPLES / "14-daemons" / "example.py"))
    operator.wait_for("The operator is ready")
    _apply_object(kubectl, namespace)
    operator.wait_for("ASYNC DAEMON: kopf-example-1 is being monitored.")
    operator.wait_for(r"SYNC DAEMON: kopf-example-1 has field='value' \(a live view\)\.")
    _eventually(lambda: _status(kubectl, namespace).get("count_children") == {"finished": True})
    assert _status(kubectl, namespace)["daemonRounds"] == 3
    obj = kubectl.get("kopfexample", "kopf-example-1", "-n", namespace)
    assert FINALIZER in obj["metadata"]["finalizers"]

    kubectl("delete", "-n", namespace, "kopfexample", "kopf-example-1", "--wait=false")
    # (The reason may have more flags by then, e.g. DAEMON_SIGNALLED: its backoff has begun.)
    operator.wait_for(r"SYNC DAEMON: stopping \(DaemonStoppingReason\.RESOURCE_DELETED")
    # The sync daemon takes a second to clean up: the object waits for it, marked for deletion.
    obj = kubectl.get("kopfexample", "kopf-example-1", "-n", namespace)
    assert obj["metadata"].get("deletionTimestamp")
    assert FINALIZER in obj["metadata"]["finalizers"]
    operator.wait_for("SYNC DAEMON: done.")
    operator.wait_for(r"Removing the finalizer, thus allowing the actual deletion\.")
    _eventually(lambda: not kubectl.get("kopfexamples", "-n", namespace)["items"])
    output = operator.output
    assert output.index("ASYNC DAEMON: cancelled, as asked.") < output.index(
        "Removing the finalizer, thus allowing the actual deletion."
    )
    assert output.index("SYNC DAEMON: done.") < output.index(
        "Removing the finalizer, thus allowing the actual deletion."
    )

    # Another object, and the operator exits while its daemons run: they are stopped too.
    _apply_object(kubectl, namespace, "kopf-example-2")
    operator.wait_for("ASYNC DAEMON: kopf-example-2 is being monitored.")
    operator.wait_for("SYNC DAEMON: kopf-example-2 has field")
    assert operator.stop() == 0
    assert "SYNC DAEMON: stopping (DaemonStoppingReason.OPERATOR_EXITING" in operator.output
    assert operator.count("ASYNC DAEMON: cancelled, as asked.") == 2
    assert operator.count("SYNC DAEMON: done.") == 2
    assert "Traceback" not in operator.output
    # The operator is gone, not the object: it keeps the finalizer for the next run.
    obj = kubectl.get("kopfexample", "kopf-example-2", "-n", namespace)
    assert FINALIZER in obj["metadata"]["finalizers"]


def test_timers_example_ticks_and_patches(
    example_crd: None, kubectl: Kubectl, namespace: str, run_operator: Any
) -> None:
    operator = run_operator("-n", namespace, str(EXAMPLES / "15-timers" / "example.py"))
    operator.wait_for("The operator is ready")
    _apply_object(kubectl, namespace)
    operator.wait_for("TIMER: ping of kopf-example-1", count=2)
    operator.wait_for("TIMER: the object has been calm for a while: field='value'")
    status = _eventually(lambda: (s := _status(kubectl, namespace)).get("ticks", 0) >= 2 and s)
    assert isinstance(status["ping"], int)
    assert status["calm"] == {"calm": True}

    kubectl("delete", "-n", namespace, "kopfexample", "kopf-example-1", "--wait=false")
    # The timers hold the object (a finalizer) until they have stopped: once it is gone, its
    # timers' tasks are, so the pings counted now are all there will ever be.
    _eventually(lambda: not kubectl.get("kopfexamples", "-n", namespace)["items"])
    pings = operator.count("TIMER: ping of kopf-example-1")
    # Shown by a later object, not by waiting: its pings, 2 s apart on the operator's own
    # clock as the deleted object's were, span two intervals in which a timer of the deleted
    # object, had it survived, would have pinged.
    _apply_object(kubectl, namespace, "kopf-example-2")
    operator.wait_for("TIMER: ping of kopf-example-2", count=3)
    assert operator.count("TIMER: ping of kopf-example-1") == pings  # stopped with the object
    assert operator.stop() == 0
    assert "Traceback" not in operator.output


def test_indexing_example_shows_configmaps_to_a_timer(
    example_crd: None, kubectl: Kubectl, namespace: str, run_operator: Any
) -> None:
    kubectl("create", "configmap", "-n", namespace, "cm-a", "--from-literal=x=1")
    kubectl("create", "configmap", "-n", namespace, "cm-b", "--from-literal=x=1")
    kubectl("label", "configmap", "-n", namespace, "cm-b", "kopf-example=yes")
    existing = len(kubectl.get("configmaps", "-n", namespace)["items"])  # + kube-root-ca.crt?

    operator = run_operator("-n", namespace, str(EXAMPLES / "16-indexing" / "example.py"))
    operator.wait_for("The operator is ready")
    _apply_object(kubectl, namespace)
    # Even the first call sees the complete index: the object is handled only after that.
    labelled = r"labelled: \[\('cm-b', 'yes'\)\]"
    operator.wait_for(rf"INDEX: {existing} configmaps in {namespace}; {labelled}")
    assert f"INDEX: {existing - 1} configmaps" not in operator.output
    _eventually(
        lambda: (
            _status(kubectl, namespace).get("count_configmaps")
            == {"configmaps": existing, "labelled": ["cm-b"]}
        )
    )

    kubectl("create", "configmap", "-n", namespace, "cm-c", "--from-literal=x=1")
    kubectl("label", "configmap", "-n", namespace, "cm-c", "kopf-example=too")
    _eventually(
        lambda: (
            _status(kubectl, namespace).get("count_configmaps")
            == {"configmaps": existing + 1, "labelled": ["cm-b", "cm-c"]}
        )
    )
    kubectl("delete", "configmap", "-n", namespace, "cm-a", "cm-b")
    _eventually(
        lambda: (
            _status(kubectl, namespace).get("count_configmaps")
            == {"configmaps": existing - 1, "labelled": ["cm-c"]}
        )
    )
    assert operator.stop() == 0
    assert "Traceback" not in operator.output
