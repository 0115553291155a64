"""Testing operators without a cluster.

- :class:`FakeAPI`: an in-process fake Kubernetes API with fault injection.
- :func:`run_operator` / :class:`OperatorHarness`: an operator in the test's own nursery,
  against a fake API, with waits on trio's (mock) clock and captured logs.
- :class:`KopfRunner`: Kopf's runner of the command line in a background thread, for
  synchronous tests; :class:`FakeAPIThread` serves a fake API for them.
- :class:`RealControlPlane` / :func:`real_control_plane`: etcd and kube-apiserver for tests
  (envtest's ``KUBEBUILDER_ASSETS``), for ``run_operator(server=...)``; :class:`ClusterObjects`
  reads and writes its objects from the test's trio run.
- ``trioperator.testing.pytest_plugin``: fixtures (``pytest_plugins = [...]`` to enable).

See ``docs/testing.md``.
"""

from __future__ import annotations

from trioperator.testing._fakestore import ResourceDef, StatusError
from trioperator.testing.cluster import ClusterObjects, UnknownResourceError
from trioperator.testing.controlplane import (
    ControlPlaneBinaries,
    ControlPlaneError,
    ControlPlaneRequestError,
    RealControlPlane,
    real_control_plane,
)
from trioperator.testing.fakeapi import FakeAPI, Injection, RecordedRequest
from trioperator.testing.harness import (
    CapturedLogs,
    OperatorHarness,
    OperatorRunner,
    OperatorStoppedError,
    load_registry,
    run_operator,
)
from trioperator.testing.runner import FakeAPIThread, KopfRunner

__all__ = [
    "CapturedLogs",
    "ClusterObjects",
    "ControlPlaneBinaries",
    "ControlPlaneError",
    "ControlPlaneRequestError",
    "FakeAPI",
    "FakeAPIThread",
    "Injection",
    "KopfRunner",
    "OperatorHarness",
    "OperatorRunner",
    "OperatorStoppedError",
    "RealControlPlane",
    "RecordedRequest",
    "ResourceDef",
    "StatusError",
    "UnknownResourceError",
    "load_registry",
    "real_control_plane",
    "run_operator",
]
