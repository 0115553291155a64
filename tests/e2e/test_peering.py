"""Peering on a real cluster: a higher-priority operator pauses a lower one, Kopf's included.

Every test uses its own peering object (a ``KopfPeering`` in the test's namespace, named
explicitly with ``--peering``), so tests running in parallel never see each other's operators.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import EXAMPLES, ROOT, Kubectl, OperatorProcess

PEERING = "e2e-peering"

OPERATOR_SOURCE = """
{import_line}


@kopf.on.create("kopfexamples")
def create_fn(name, **kwargs):
    print(f"CREATE-CALLED {{name}}", flush=True)
"""


@pytest.fixture(scope="session")
def peering_crds(kubectl: Kubectl) -> None:
    """The peering CRDs from our manifest: applied, never deleted (other tests, other runs)."""
    for attempt in range(3):
        # Idempotent; a conflict with a parallel apply of the same manifest is retried.
        try:
            kubectl("apply", "-f", str(ROOT / "manifests" / "peering.yaml"))
            break
        except AssertionError:
            if attempt == 2:
                raise
            time.sleep(1)
    for name in ("kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev"):
        kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=30s")


@pytest.fixture
def peering(peering_crds: None, kubectl: Kubectl, namespace: str) -> str:
    manifest = (
        "apiVersion: kopf.dev/v1\nkind: KopfPeering\n"
        f"metadata:\n  name: {PEERING}\n  namespace: {namespace}\n"
    )
    kubectl("apply", "-f", "-", input=manifest)
    return PEERING


@pytest.fixture(scope="session")
def kopf_bin() -> str:
    result = subprocess.run(
        [str(ROOT / "scripts" / "kopf-venv")],
        check=True,
        capture_output=True,
        text=True,
        timeout=900,
    )
    python = Path(result.stdout.strip().splitlines()[-1])
    return str(python.parent / "kopf")


def _operator_file(tmp_path: Path, framework: str) -> str:
    import_line = "import kopf" if framework == "kopf" else "import trioperator as kopf"
    path = tmp_path / f"peering_operator_{framework}.py"
    path.write_text(OPERATOR_SOURCE.format(import_line=import_line))
    return str(path)


def _records(kubectl: Kubectl, namespace: str) -> dict[str, Any]:
    obj = kubectl.get("kopfpeering", PEERING, "-n", namespace)
    return dict(obj.get("status") or {})


def _wait(predicate: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    raise AssertionError(f"Not within {timeout}s: {what}")


def _create(kubectl: Kubectl, namespace: str, name: str) -> None:
    manifest = (EXAMPLES / "obj.yaml").read_text()
    kubectl("apply", "-n", namespace, "-f", "-", input=manifest.replace("kopf-example-1", name))


def _start_trioperator(
    run_operator: Any, file: str, namespace: str, priority: int
) -> OperatorProcess:
    process: OperatorProcess = run_operator(
        "-n", namespace, "-P", PEERING, "-p", str(priority), file
    )
    process.wait_for("The operator is ready")
    return process


def _start_kopf(
    run_operator: Any, kopf_bin: str, file: str, namespace: str, priority: int
) -> OperatorProcess:
    process: OperatorProcess = run_operator(
        "--verbose",
        "-n",
        namespace,
        "-P",
        PEERING,
        "-p",
        str(priority),
        file,
        command=[kopf_bin, "run"],
    )
    process.wait_for("Starting the watch-stream for kopfexamples")
    return process


def _record_count(kubectl: Kubectl, namespace: str, count: int) -> Callable[[], bool]:
    return lambda: len(_records(kubectl, namespace)) >= count


def test_the_lower_priority_operator_waits_until_the_higher_one_stops(
    example_crd: None,
    peering: str,
    kubectl: Kubectl,
    namespace: str,
    run_operator: Any,
    tmp_path: Path,
) -> None:
    file = _operator_file(tmp_path, "trioperator")
    high = _start_trioperator(run_operator, file, namespace, priority=10)
    _wait(_record_count(kubectl, namespace, 1), "the higher operator's record")
    low = _start_trioperator(run_operator, file, namespace, priority=1)
    low.wait_for(r"Pausing operations in favour of \[<Peer .*priority=10, lifetime=60")
    records = _records(kubectl, namespace)
    assert sorted(record["priority"] for record in records.values()) == [1, 10]
    assert all(set(record) == {"priority", "lifetime", "lastseen"} for record in records.values())

    _create(kubectl, namespace, "while-high-runs")
    high.wait_for("CREATE-CALLED while-high-runs")
    time.sleep(3)  # the lower one would have reacted within this time if it were not paused
    assert low.count("CREATE-CALLED") == 0

    assert high.stop() == 0
    _wait(lambda: len(_records(kubectl, namespace)) == 1, "the higher record removed on exit")
    low.wait_for("Resuming operations after the pause")
    _create(kubectl, namespace, "after-high-stopped")
    low.wait_for("CREATE-CALLED after-high-stopped")
    # The object handled by the higher operator is not handled again after the resume.
    assert low.count("CREATE-CALLED while-high-runs") == 0


def test_kopf_with_a_higher_priority_pauses_trioperator(
    example_crd: None,
    peering: str,
    kubectl: Kubectl,
    namespace: str,
    run_operator: Any,
    kopf_bin: str,
    tmp_path: Path,
) -> None:
    ours = _start_trioperator(run_operator, _operator_file(tmp_path, "trioperator"), namespace, 0)
    _wait(_record_count(kubectl, namespace, 1), "trioperator's record")
    kopf = _start_kopf(run_operator, kopf_bin, _operator_file(tmp_path, "kopf"), namespace, 100)
    ours.wait_for(r"Pausing operations in favour of \[<Peer .*priority=100", timeout=60)

    _create(kubectl, namespace, "while-kopf-runs")
    kopf.wait_for("CREATE-CALLED while-kopf-runs", timeout=60)
    time.sleep(3)
    assert ours.count("CREATE-CALLED") == 0

    kopf.stop()
    ours.wait_for("Resuming operations after the pause", timeout=60)
    _create(kubectl, namespace, "after-kopf-stopped")
    ours.wait_for("CREATE-CALLED after-kopf-stopped")
    assert ours.count("CREATE-CALLED while-kopf-runs") == 0


def test_trioperator_with_a_higher_priority_pauses_kopf(
    example_crd: None,
    peering: str,
    kubectl: Kubectl,
    namespace: str,
    run_operator: Any,
    kopf_bin: str,
    tmp_path: Path,
) -> None:
    ours = _start_trioperator(run_operator, _operator_file(tmp_path, "trioperator"), namespace, 100)
    _wait(_record_count(kubectl, namespace, 1), "trioperator's record")
    kopf = _start_kopf(run_operator, kopf_bin, _operator_file(tmp_path, "kopf"), namespace, 0)
    # Kopf (lower, mandatory peering) starts paused; its record shows it took part.
    _wait(_record_count(kubectl, namespace, 2), "Kopf's record", timeout=60)

    _create(kubectl, namespace, "while-ours-runs")
    ours.wait_for("CREATE-CALLED while-ours-runs")
    time.sleep(3)
    assert kopf.count("CREATE-CALLED") == 0

    assert ours.stop() == 0
    _create(kubectl, namespace, "after-ours-stopped")
    kopf.wait_for("CREATE-CALLED after-ours-stopped", timeout=60)
    assert kopf.count("CREATE-CALLED while-ours-runs") == 0
