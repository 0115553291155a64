"""The operator-as-a-program examples (12-embedded, 13-hooks) against the real kube-apiserver."""

from __future__ import annotations

import json
import socket
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from tests.e2e.conftest import EXAMPLES, Kubectl


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get_json(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_embedded_example_serves_and_stops_with_the_program(
    example_crd: None, kubectl: Kubectl, namespace: str, run_operator: Any
) -> None:
    program = run_operator(
        namespace, command=[sys.executable, str(EXAMPLES / "12-embedded" / "example.py")]
    )
    program.wait_for("EMBEDDED: the operator is ready; the program goes on.")
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "obj.yaml"))
    program.wait_for(r"Handler 'create_fn' succeeded\.")
    program.wait_for(r"REPORT: 1 object\(s\) handled so far", timeout=15)

    obj = kubectl.get("kopfexample", "kopf-example-1", "-n", namespace)
    assert obj["status"]["create_fn"] == {"message": "hello from an embedded operator"}

    assert program.stop() == 0
    output = program.output
    # The order of a structured stop: the program's own work first, then the operator.
    assert output.index("EMBEDDED: stopping the operator.") < output.index(
        "EMBEDDED: the operator has stopped after 1 object(s)."
    )
    assert "Traceback" not in output


def test_hooks_example_startup_probes_and_cleanup(
    example_crd: None, kubectl: Kubectl, namespace: str, run_operator: Any
) -> None:
    port = _free_port()
    url = f"http://127.0.0.1:{port}/healthz"
    operator = run_operator("-L", url, "-n", namespace, str(EXAMPLES / "13-hooks" / "example.py"))
    operator.wait_for("STARTUP: settings tuned, memo prepared.")
    operator.wait_for("The operator is ready")
    # The startup handler ran before the operator logged in and started watching.
    output = operator.output
    assert output.index("STARTUP: settings tuned") < output.index("The operator is ready")
    assert operator.count(r"Activity 'login_fn' succeeded\.") == 1

    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "obj.yaml"))
    operator.wait_for(r"Handler 'create_fn' succeeded\.")

    # Probe results are cached for a while: the first read may predate the object.
    status, probes = _get_json(url)
    assert status == 200
    assert set(probes) == {"now", "objects_seen"}
    assert probes["objects_seen"] in (0, 1)
    assert probes["now"].startswith("20")

    # The startup handler's settings: the handler's warning is an Event, its info line is not.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        events = [
            (e["type"], e["reason"], e["message"])
            for e in kubectl.get("events", "-n", namespace)["items"]
            if e["involvedObject"].get("name") == "kopf-example-1"
        ]
        if events:
            break
        time.sleep(0.2)
    assert events == [("Warning", "Logging", "In the log and in `kubectl describe`.")]

    assert operator.stop() == 0
    operator.wait_for(r"CLEANUP: 1 object\(s\) seen in this run; goodbye\.")
    assert "Traceback" not in operator.output
