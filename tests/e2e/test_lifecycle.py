"""The CLI operator's stop by signals, and events about cluster-scoped objects, on a real API.

A graceful stop (one SIGTERM) lets a running handler finish and store its outcome before the
process exits with 0; a second SIGINT ends the process at once. An event about a namespace (a
cluster-scoped object) is accepted by kube-apiserver and attached to that namespace.
"""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path
from typing import Any

from tests.e2e.conftest import EXAMPLES, Kubectl, OperatorProcess, start_trioperator

SLOW_OPERATOR = """
import trio
import trioperator as kopf


@kopf.on.startup()
def configure(settings, **_):
    # Long enough for the slow handler to finish after the stop request.
    settings.queueing.exit_timeout = EXIT_TIMEOUT


@kopf.on.create("kopfexamples", id="slow_fn")
async def slow_fn(patch, logger, **_):
    logger.info("Slow handler started.")
    # A line now and then: the test sees that the handler (and the process) still runs.
    deadline = trio.current_time() + HANDLER_SECONDS
    while trio.current_time() < deadline:
        print("SLOW-HANDLER-RUNS", flush=True)
        await trio.sleep(min(0.2, deadline - trio.current_time()))
    patch.metadata.annotations["e2e.trioperator.dev/slow"] = "finished"
    logger.info("Slow handler finished.")
    return "done"
"""

EVENTS_OPERATOR = """
import trioperator as kopf


@kopf.on.event("namespaces", labels={"e2e.trioperator.dev/events": TOKEN})
def namespace_seen(body, name, type, **_):
    if type in (None, "ADDED"):
        kopf.info(body, reason="NamespaceSeen", message=f"Seen the namespace {name}.")
"""


def write(tmp_path: Path, source: str, **values: Any) -> Path:
    for key, value in values.items():
        source = source.replace(key, repr(value))
    script = tmp_path / "operator.py"
    script.write_text(source)
    return script


def wait_for_exit(operator: Any, timeout: float) -> float:
    """Wait for the process to exit; return how long it took."""
    started = time.monotonic()
    operator.process.wait(timeout)
    return time.monotonic() - started


def start_slow(
    tmp_path: Path,
    kubectl: Kubectl,
    namespace: str,
    run_operator: Any,
    *,
    exit_timeout: float,
    handler_seconds: float,
) -> OperatorProcess:
    """The slow operator, ready, with the example object created and its handler started."""
    script = write(
        tmp_path, SLOW_OPERATOR, EXIT_TIMEOUT=exit_timeout, HANDLER_SECONDS=handler_seconds
    )
    operator = start_trioperator(run_operator, "-n", namespace, str(script))
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "obj.yaml"))
    operator.wait_for("Slow handler started")
    return operator


def test_one_sigterm_lets_the_running_handler_finish_then_exits_0(
    tmp_path: Path, example_crd: None, kubectl: Kubectl, namespace: str, run_operator: Any
) -> None:
    operator = start_slow(
        tmp_path, kubectl, namespace, run_operator, exit_timeout=60, handler_seconds=4
    )

    operator.process.send_signal(signal.SIGTERM)
    wait_for_exit(operator, timeout=60)

    assert operator.process.returncode == 0, operator.output
    output = operator.output
    # It waited for the handler, not just exited: the handler finished after the signal.
    assert output.index("Signal SIGTERM is received") < output.index("Slow handler finished.")
    assert "Handler 'slow_fn' succeeded." in output
    assert "cancelling" not in output
    assert "Traceback" not in output
    obj = kubectl.get("kopfexample", "kopf-example-1", "-n", namespace)
    assert obj["metadata"]["annotations"]["e2e.trioperator.dev/slow"] == "finished"
    assert obj["status"]["slow_fn"] == "done"


def test_a_second_sigint_ends_the_process_promptly(
    tmp_path: Path, example_crd: None, kubectl: Kubectl, namespace: str, run_operator: Any
) -> None:
    operator = start_slow(
        tmp_path, kubectl, namespace, run_operator, exit_timeout=300, handler_seconds=600
    )

    operator.process.send_signal(signal.SIGINT)
    operator.wait_for("Operator is stopping")
    # The graceful stop waits for the handler: it goes on running (two more of its lines after
    # the stop began), and the process with it.
    operator.wait_for("SLOW-HANDLER-RUNS", count=operator.count("SLOW-HANDLER-RUNS") + 2)
    assert operator.process.poll() is None
    operator.process.send_signal(signal.SIGINT)
    took = wait_for_exit(operator, timeout=20)

    assert took < 10
    assert "Signal SIGINT again: cancelling now." in operator.output
    assert "Slow handler finished." not in operator.output
    assert "Traceback" not in operator.output
    obj = kubectl.get("kopfexample", "kopf-example-1", "-n", namespace)
    assert "slow_fn" not in obj.get("status", {})


def test_events_about_a_cluster_scoped_object_are_accepted_by_the_api(
    tmp_path: Path, kubectl: Kubectl, namespace: str, run_operator: Any
) -> None:
    token = uuid.uuid4().hex[:12]
    kubectl("label", "namespace", namespace, f"e2e.trioperator.dev/events={token}")
    ns_uid = kubectl.get("namespace", namespace)["metadata"]["uid"]
    operator = start_trioperator(run_operator, str(write(tmp_path, EVENTS_OPERATOR, TOKEN=token)))

    def about_the_namespace() -> list[dict[str, Any]]:
        items = kubectl.get("events", "--all-namespaces").get("items", [])
        return [e for e in items if e.get("involvedObject", {}).get("uid") == ns_uid]

    deadline = time.monotonic() + 30
    events = about_the_namespace()
    while not events and time.monotonic() < deadline:
        time.sleep(0.2)
        events = about_the_namespace()

    assert "Failed to post an event" not in operator.output
    [posted] = events
    assert posted["metadata"]["namespace"] == "default"
    assert posted["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "name": namespace,
        "uid": ns_uid,
    }
    assert (posted["type"], posted["reason"], posted["message"]) == (
        "Normal",
        "NamespaceSeen",
        f"Seen the namespace {namespace}.",
    )
    assert posted["source"] == {"component": "kopf"}
    kubectl("delete", "event", posted["metadata"]["name"], "-n", "default")
    assert operator.stop() == 0
