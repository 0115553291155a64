"""pytest fixtures for testing operators without a cluster, or against a real control plane.

Enable them in your top-level ``conftest.py`` (or in a test module)::

    pytest_plugins = ["trioperator.testing.pytest_plugin"]

Fixtures:

``fake_api``
    A :class:`~trioperator.testing.FakeAPI` served in the test's trio run for the test's
    duration. An async fixture: it needs pytest-trio (``trio_mode = true`` in the pytest
    configuration, or ``@pytest.mark.trio`` on the test).
``operator_runner``
    A factory of :class:`~trioperator.testing.OperatorHarness` bound to ``fake_api``:
    ``async with operator_runner(registry=..., crds=[...]) as operator: ...``. It takes the
    keyword arguments of :func:`~trioperator.testing.run_operator` except ``api``; annotate it
    as ``trioperator.testing.OperatorRunner`` (importing this module yourself would defeat
    pytest's assertion rewriting of it).
``fake_api_thread``
    A :class:`~trioperator.testing.FakeAPIThread` for synchronous tests (e.g. with
    ``KopfRunner``).
``fake_kubeconfig``
    A kubeconfig for ``fake_api_thread`` in ``$KUBECONFIG`` for the test's duration, so that
    ``KopfRunner(["run", ...])`` talks to the fake; the value is the file's path.
``real_control_plane``
    A :class:`~trioperator.testing.RealControlPlane` (etcd + kube-apiserver) for the whole test
    session, started on first use from the binaries in ``$KUBEBUILDER_ASSETS`` (else
    trioperator's scripts/kube-up cache), with the CRDs of ``real_control_plane_crds``
    installed. A plain (sync) fixture: it serves sync and async tests alike. The tests share
    it: give each test a namespace of its own (``real_control_plane.create_namespace()``).
``real_control_plane_crds``
    Override it (session-scoped) to list the CRDs to install: paths of YAML files or bodies.
``real_operator_runner``
    Like ``operator_runner``, against ``real_control_plane``:
    ``async with real_operator_runner(registry=..., namespaces=[ns]) as operator: ...``, then
    ``await operator.cluster.create(...)`` and ``await operator.wait_for_object(...)``. On
    real time: no mock clock in these tests.

Clocks are left to pytest-trio: take ``autojump_clock`` (or ``mock_clock``) as an argument of
the test function itself; pytest-trio uses a clock only when the test asks for it directly. If
you make a clock fixture of your own, make it a plain (sync) fixture returning a
``trio.testing.MockClock``. Nothing here replaces or wraps the clock or the test's nursery:
these fixtures are small enough to copy and adapt.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from trioperator.testing.controlplane import CRDSource, RealControlPlane
from trioperator.testing.fakeapi import FakeAPI
from trioperator.testing.harness import OperatorRunner, run_operator
from trioperator.testing.runner import FakeAPIThread

__all__ = [
    "fake_api",
    "fake_api_thread",
    "fake_kubeconfig",
    "operator_runner",
    "real_control_plane",
    "real_control_plane_crds",
    "real_operator_runner",
]


@pytest.fixture
async def fake_api() -> AsyncIterator[FakeAPI]:
    async with FakeAPI.serve() as api:
        yield api


@pytest.fixture
def operator_runner(fake_api: FakeAPI) -> OperatorRunner:
    runner: OperatorRunner = functools.partial(run_operator, api=fake_api)
    return runner


@pytest.fixture
def fake_api_thread() -> Iterator[FakeAPIThread]:
    with FakeAPIThread() as api:
        yield api


@pytest.fixture
def fake_kubeconfig(
    fake_api_thread: FakeAPIThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    path = fake_api_thread.kubeconfig(tmp_path / "kubeconfig")
    monkeypatch.setenv("KUBECONFIG", str(path))
    return path


@pytest.fixture(scope="session")
def real_control_plane_crds() -> list[CRDSource]:
    return []


@pytest.fixture(scope="session")
def real_control_plane(real_control_plane_crds: list[CRDSource]) -> Iterator[RealControlPlane]:
    with RealControlPlane(crds=real_control_plane_crds) as plane:
        yield plane


@pytest.fixture
def real_operator_runner(real_control_plane: RealControlPlane) -> OperatorRunner:
    runner: OperatorRunner = functools.partial(run_operator, server=real_control_plane)
    return runner
