"""``trioperator freeze``/``resume`` on a real cluster: our operators and Kopf's obey them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.e2e.conftest import (
    ROOT,
    Kubectl,
    OperatorProcess,
    start_kopf,
    start_trioperator,
)
from tests.e2e.test_peering import (
    PEERING,
    STREAM_RESUMED,
    _create,
    _operator_file,
    _records,
    _wait,
    _wait_stream_closed,
    peering,
    peering_crds,
)

__all__ = ["peering", "peering_crds"]  # fixtures, used by name

ADMIN = "e2e-admin@freezer"


def _command(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    return subprocess.run(
        [sys.executable, "-m", "trioperator", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _freeze_and_resume(
    kubeconfig: Path, kubectl: Kubectl, namespace: str, operator: OperatorProcess
) -> None:
    frozen = _command(
        kubeconfig, "freeze", "-P", PEERING, "-n", namespace, "-t", "600", "-i", ADMIN,
        "-m", "e2e: a freeze",
    )  # fmt: skip
    assert frozen.returncode == 0, frozen.stderr
    assert f"Frozen '{PEERING}' in '{namespace}' for 600s with priority 100" in frozen.stderr
    record = _records(kubectl, namespace)[ADMIN]
    assert (record["priority"], record["lifetime"]) == (100, 600)
    operator.wait_for(rf"Pausing operations in favour of \[<Peer {ADMIN}: priority=100", timeout=60)

    since = _wait_stream_closed(operator, timeout=60)
    _create(kubectl, namespace, "while-frozen")

    resumed = _command(kubeconfig, "resume", "-P", PEERING, "-n", namespace, "-i", ADMIN)
    assert resumed.returncode == 0, resumed.stderr
    assert ADMIN not in _records(kubectl, namespace)
    operator.wait_for("Resuming operations after the pause", timeout=60)
    operator.wait_for("CREATE-CALLED while-frozen", timeout=60)
    _handled_only_after_resuming(operator, "while-frozen", since)


def _handled_only_after_resuming(process: OperatorProcess, name: str, since: int) -> None:
    """Of the lines ``process`` wrote after line ``since`` (when its watch-stream was closed
    for the pause), the one saying that ``name`` was handled comes after one saying that the
    stream is open again: the object was not handled while the operator was frozen.

    Both frameworks log a stream's resumption before they read it again, so the order of the
    lines shows this, and no wait of a few seconds is needed (or would show it on a slow
    machine)."""
    lines = process.output.splitlines()[since:]
    handled = [i for i, line in enumerate(lines) if f"CREATE-CALLED {name}" in line]
    resumed = [i for i, line in enumerate(lines) if re.search(STREAM_RESUMED, line)]
    assert len(handled) == 1, "\n".join(lines)
    assert resumed, "\n".join(lines)
    assert resumed[0] < handled[0], "\n".join(lines)


def test_freeze_pauses_a_trioperator_operator_and_resume_lets_it_continue(
    example_crd: None,
    peering: str,
    kubeconfig: Path,
    kubectl: Kubectl,
    namespace: str,
    run_operator: Any,
    tmp_path: Path,
) -> None:
    file = _operator_file(tmp_path, "trioperator")
    operator = start_trioperator(run_operator, "-n", namespace, "-P", peering, file)
    _wait(lambda: len(_records(kubectl, namespace)) == 1, "the operator's record")
    _freeze_and_resume(kubeconfig, kubectl, namespace, operator)
    assert operator.stop() == 0


def test_freeze_pauses_a_kopf_operator_and_resume_lets_it_continue(
    example_crd: None,
    peering: str,
    kubeconfig: Path,
    kubectl: Kubectl,
    namespace: str,
    run_operator: Any,
    kopf_bin: str,
    tmp_path: Path,
) -> None:
    file = _operator_file(tmp_path, "kopf")
    operator = start_kopf(run_operator, kopf_bin, "-n", namespace, "-P", peering, file)
    _wait(lambda: len(_records(kubectl, namespace)) == 1, "Kopf's record", timeout=60)
    _freeze_and_resume(kubeconfig, kubectl, namespace, operator)


def test_kopf_resume_lifts_our_freeze_made_on_the_same_machine(
    peering: str, kubeconfig: Path, kubectl: Kubectl, namespace: str, kopf_bin: str
) -> None:
    """Without --id, both tools name the record user@host the same way."""
    frozen = _command(kubeconfig, "freeze", "-P", peering, "-n", namespace, "-t", "600")
    assert frozen.returncode == 0, frozen.stderr
    assert len(_records(kubectl, namespace)) == 1
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    resumed = subprocess.run(
        [kopf_bin, "resume", "-P", peering, "-n", namespace],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert _records(kubectl, namespace) == {}


def test_kopfs_own_freeze_pauses_a_trioperator_operator(
    example_crd: None,
    peering: str,
    kubeconfig: Path,
    kubectl: Kubectl,
    namespace: str,
    run_operator: Any,
    kopf_bin: str,
    tmp_path: Path,
) -> None:
    file = _operator_file(tmp_path, "trioperator")
    operator = start_trioperator(run_operator, "-n", namespace, "-P", peering, file)
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    args = ["-P", peering, "-n", namespace, "-i", ADMIN]
    kopf = [kopf_bin, "freeze", *args, "-t", "600"], [kopf_bin, "resume", *args]
    since = 0
    for command in kopf:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        if command[1] == "freeze":
            operator.wait_for(r"Pausing operations in favour of \[<Peer ", timeout=60)
            since = _wait_stream_closed(operator, timeout=60)
            _create(kubectl, namespace, "while-frozen")
    operator.wait_for("Resuming operations after the pause", timeout=60)
    operator.wait_for("CREATE-CALLED while-frozen", timeout=60)
    _handled_only_after_resuming(operator, "while-frozen", since)
    assert operator.stop() == 0


def test_freezing_a_peering_that_does_not_exist_fails_and_says_so(
    peering_crds: None, kubeconfig: Path, namespace: str
) -> None:
    result = _command(kubeconfig, "freeze", "-P", "no-such-peering", "-n", namespace, "-t", "60")
    assert result.returncode == 1
    assert "does not exist in" in result.stderr
