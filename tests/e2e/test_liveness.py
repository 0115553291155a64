"""The liveness endpoint of a CLI-run operator (``--liveness``), asked as the kubelet asks it.

Needs the ``-L/--liveness`` option of the CLI (see trioperator/_runtime/program/probing.py).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.e2e.conftest import ROOT

OPERATOR = textwrap.dedent(
    """
    import trioperator as kopf

    @kopf.on.probe(id="answer")
    def answer(**_):
        return 42

    @kopf.on.create("kopfexamples")
    def create_fn(**_):
        pass
    """
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def test_liveness_endpoint_reports_probes(
    example_crd: None, namespace: str, run_operator: Any, tmp_path: Path
) -> None:
    source = tmp_path / "operator.py"
    source.write_text(OPERATOR)
    port = _free_port()
    operator = run_operator(
        "-n", namespace, "--liveness", f"http://127.0.0.1:{port}/healthz", str(source)
    )
    operator.wait_for("The operator is ready")
    operator.wait_for("Serving the liveness endpoint")
    assert _get(f"http://127.0.0.1:{port}/healthz") == (200, {"answer": 42})
    assert _get(f"http://127.0.0.1:{port}/other")[0] == 404
    assert operator.stop() == 0
    assert "Traceback" not in operator.output


def test_liveness_endpoint_must_be_http(tmp_path: Path) -> None:
    source = tmp_path / "operator.py"
    source.write_text(OPERATOR)
    result = subprocess.run(
        [sys.executable, "-m", "trioperator", "run", "-L", "https://0.0.0.0:8080/", str(source)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 2
    assert "Only http:// liveness endpoints are supported" in result.stderr
