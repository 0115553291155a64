"""Kopf's logger names, tuned by the operator, act the same under Kopf 1.45.2 and under trioperator.

Real operators silence the per-event success lines with
``logging.getLogger("kopf.objects").setLevel(logging.WARNING)`` (and the same for the probes).
The same operator source runs under both frameworks (``import kopf`` and ``import trioperator as
kopf``) against the real API server; its log must have none of those lines, under either.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import EXAMPLES, Kubectl, framework_operator_file

OPERATOR_SOURCE = """
import logging

{import_line}

logging.getLogger("kopf.objects").setLevel(logging.WARNING)
logging.getLogger("kopf.activities.probe").setLevel(logging.WARNING)


@kopf.on.probe(id="api")
def api_probe(logger, **kwargs):
    logger.info("PROBED")


@kopf.on.create("kopfexamples")
def create_fn(logger, **kwargs):
    logger.info("INFO-FROM-HANDLER")
    logger.warning("WARNING-FROM-HANDLER")
    return {{"by": "{framework}"}}
"""

SILENCED = [
    r"kopf\.objects\s+\[INFO",
    r"kopf\.activities\.prob\s*\[INFO",
    r"Handler 'create_fn' succeeded",
    r"Creation is processed",
    r"Activity 'api' succeeded",
    r"INFO-FROM-HANDLER",
    r"PROBED",
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str, timeout: float = 30) -> tuple[int, Any]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status, json.loads(response.read())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


@pytest.mark.parametrize("framework", ["kopf", "trioperator"])
def test_kopf_objects_and_probes_at_warning_log_no_per_handler_info_lines(
    framework: str,
    example_crd: None,
    kubectl: Kubectl,
    namespace: str,
    run_operator: Any,
    kopf_bin: str,
    tmp_path: Path,
) -> None:
    port = _free_port()
    file = framework_operator_file(tmp_path, OPERATOR_SOURCE, framework)
    args = ["--standalone", "-n", namespace, "-L", f"http://127.0.0.1:{port}/healthz", file]
    if framework == "kopf":
        operator = run_operator(*args, command=[kopf_bin, "run"])
    else:
        operator = run_operator(*args, command=[sys.executable, "-m", "trioperator", "run"])
    assert _get(f"http://127.0.0.1:{port}/healthz") == (200, {})  # None is left out
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "obj.yaml"))
    operator.wait_for(r"WARNING-FROM-HANDLER", timeout=60)
    deadline = time.monotonic() + 30
    while "create_fn" not in (
        kubectl.get("kopfexample", "kopf-example-1", "-n", namespace).get("status") or {}
    ):
        assert time.monotonic() < deadline, "the result is not stored"
        time.sleep(0.3)
    assert _get(f"http://127.0.0.1:{port}/healthz") == (200, {})
    assert operator.stop() == 0
    output = operator.output
    assert re.search(
        r"kopf\.objects\s+\[WARNING\s*\] \[[\w-]+/kopf-example-1\] WARNING-FROM", output
    )
    found = [pattern for pattern in SILENCED if re.search(pattern, output)]
    assert not found, f"{found} in:\n{output[-4000:]}"
