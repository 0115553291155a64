"""Peering on a real cluster: a higher-priority operator pauses a lower one, Kopf's included.

Every test uses its own peering object (a ``KopfPeering`` in the test's namespace, named
explicitly with ``--peering``), so tests running in parallel never see each other's operators.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import (
    EXAMPLES,
    ROOT,
    Kubectl,
    OperatorProcess,
    framework_operator_file,
    start_kopf,
    start_trioperator,
)

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


def _operator_file(tmp_path: Path, framework: str) -> str:
    return framework_operator_file(tmp_path, OPERATOR_SOURCE, framework, "peering_operator")


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
    return start_trioperator(
        run_operator, "-n", namespace, "-P", PEERING, "-p", str(priority), file
    )


def _start_ours_then_kopf(
    run_operator: Any,
    kopf_bin: str,
    kubectl: Kubectl,
    namespace: str,
    tmp_path: Path,
    *,
    ours: int,
    kopf: int,
) -> tuple[OperatorProcess, OperatorProcess]:
    """trioperator with priority ``ours``; once its record is there, Kopf with ``kopf``."""
    ours_file = _operator_file(tmp_path, "trioperator")
    ours_process = _start_trioperator(run_operator, ours_file, namespace, ours)
    _wait(_record_count(kubectl, namespace, 1), "trioperator's record")
    kopf_file = _operator_file(tmp_path, "kopf")
    args = ("-n", namespace, "-P", PEERING, "-p", str(kopf), kopf_file)
    return ours_process, start_kopf(run_operator, kopf_bin, *args)


STREAM_PAUSED = r"Pausing the watch-stream for kopfexamples\.v1\.kopf\.dev"
STREAM_RESUMED = r"Resuming the watch-stream for kopfexamples\.v1\.kopf\.dev"


def _wait_stream_closed(process: OperatorProcess, timeout: float = 30) -> int:
    """Wait until ``process`` (ours or Kopf) says that its watch-stream of the objects is
    closed for the pause; return how many lines it has written by then.

    Both frameworks log this line once the stream has ended, and the line that it is open
    again before they read it again: an object created after the first line cannot reach the
    process before the second. This, not a wait of a few seconds, is what shows that a paused
    operator does not react.
    """
    _wait(
        lambda: process.count(STREAM_PAUSED) > process.count(STREAM_RESUMED),
        "the watch-stream of the objects closed for the pause",
        timeout,
    )
    return len(process.output.splitlines())


def _created_while_paused(
    kubectl: Kubectl,
    namespace: str,
    name: str,
    serving: OperatorProcess,
    paused: OperatorProcess,
    timeout: float = 30,
) -> None:
    """An object created now, once ``paused`` has closed its watch-stream for the pause, is
    handled by ``serving``. That ``paused`` never handles it is shown later, by
    :func:`_created_after`: the object created after the pause is handled, this one not."""
    _wait_stream_closed(paused, timeout)
    _create(kubectl, namespace, name)
    serving.wait_for(f"CREATE-CALLED {name}", timeout=timeout)
    assert paused.count("CREATE-CALLED") == 0


def _created_after(
    kubectl: Kubectl,
    namespace: str,
    name: str,
    process: OperatorProcess,
    earlier: str,
    timeout: float = 30,
) -> None:
    """An object created now is handled by ``process``; the ``earlier`` one is not (again).

    Once ``process`` has handled the object created now, it has read the ``earlier`` one too:
    its stream, opened again after the pause, lists every object first. So this is where the
    ``earlier`` object, created while ``process`` was paused, shows that it was left alone.
    """
    _create(kubectl, namespace, name)
    process.wait_for(f"CREATE-CALLED {name}", timeout=timeout)
    assert process.count(f"CREATE-CALLED {earlier}") == 0


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

    _created_while_paused(kubectl, namespace, "while-high-runs", high, low)

    assert high.stop() == 0
    _wait(lambda: len(_records(kubectl, namespace)) == 1, "the higher record removed on exit")
    low.wait_for("Resuming operations after the pause")
    # The object handled by the higher operator is not handled again after the resume.
    _created_after(kubectl, namespace, "after-high-stopped", low, "while-high-runs")


def test_kopf_with_a_higher_priority_pauses_trioperator(
    example_crd: None,
    peering: str,
    kubectl: Kubectl,
    namespace: str,
    run_operator: Any,
    kopf_bin: str,
    tmp_path: Path,
) -> None:
    ours, kopf = _start_ours_then_kopf(
        run_operator, kopf_bin, kubectl, namespace, tmp_path, ours=0, kopf=100
    )
    ours.wait_for(r"Pausing operations in favour of \[<Peer .*priority=100", timeout=60)

    _created_while_paused(kubectl, namespace, "while-kopf-runs", kopf, ours, timeout=60)

    kopf.stop()
    ours.wait_for("Resuming operations after the pause", timeout=60)
    _created_after(kubectl, namespace, "after-kopf-stopped", ours, "while-kopf-runs")


def test_trioperator_with_a_higher_priority_pauses_kopf(
    example_crd: None,
    peering: str,
    kubectl: Kubectl,
    namespace: str,
    run_operator: Any,
    kopf_bin: str,
    tmp_path: Path,
) -> None:
    ours, kopf = _start_ours_then_kopf(
        run_operator, kopf_bin, kubectl, namespace, tmp_path, ours=100, kopf=0
    )
    # Kopf (lower, mandatory peering) starts paused; its record shows it took part.
    _wait(_record_count(kubectl, namespace, 2), "Kopf's record", timeout=60)

    _created_while_paused(kubectl, namespace, "while-ours-runs", ours, kopf)

    assert ours.stop() == 0
    _created_after(kubectl, namespace, "after-ours-stopped", kopf, "while-ours-runs", timeout=60)
