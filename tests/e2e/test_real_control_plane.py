"""The test kit's real control plane: its own etcd and kube-apiserver, found as envtest finds
them, started on free ports, usable through its kubeconfig, and gone after the block."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from trioperator.testing import ControlPlaneRequestError, real_control_plane

CRD = Path(__file__).resolve().parents[2] / "examples" / "crd.yaml"


def test_a_control_plane_of_its_own_from_start_to_stop() -> None:
    with real_control_plane(crds=[CRD], start_timeout=60) as plane:
        state, port = plane.state_dir, plane.port
        # The CRD is installed and established; kubectl works with the kubeconfig given.
        assert plane.kubectl("get", "crd", "kopfexamples.kopf.dev", "-o", "name").strip() == (
            "customresourcedefinition.apiextensions.k8s.io/kopfexamples.kopf.dev"
        )
        namespace = plane.create_namespace("plane-")
        created = plane.request(
            "POST",
            f"/apis/kopf.dev/v1/namespaces/{namespace}/kopfexamples",
            {"apiVersion": "kopf.dev/v1", "kind": "KopfExample", "metadata": {"name": "x"}},
        )
        assert created["metadata"]["namespace"] == namespace
        # Installing again is harmless (server-side apply), and bad requests say why.
        assert plane.install_crds([CRD]) == ["kopfexamples.kopf.dev"]
        with pytest.raises(ControlPlaneRequestError) as error:
            plane.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/absent")
        assert error.value.status == 404

    assert not state.exists()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
