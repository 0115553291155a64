"""Shared fixtures. Tests run in trio mode (pyproject: ``trio_mode = true``)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def real_kubeconfig() -> Path:
    """The kubeconfig of a real kube-apiserver: ``$TRIOPERATOR_KUBECONFIG``, else the local one.

    The local control plane is started by ``scripts/kube-up`` (idempotent; it reuses a running
    one and builds kube-apiserver on first use). It is left running for later test sessions.
    """
    configured = os.environ.get("TRIOPERATOR_KUBECONFIG")
    if configured:
        return Path(configured)
    result = subprocess.run(
        [str(ROOT / "scripts" / "kube-up")],
        check=False,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if result.returncode != 0:
        raise RuntimeError(f"scripts/kube-up failed:\n{result.stderr[-4000:]}")
    return Path(result.stdout.strip().splitlines()[-1])
