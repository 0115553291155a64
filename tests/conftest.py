"""Shared fixtures. Tests run in trio mode (pyproject: ``trio_mode = true``)."""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterator
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


@pytest.fixture(autouse=True)
def _restore_logging_levels() -> Iterator[None]:
    """The CLI configures logging process-wide (levels, the root's handler); a test that runs
    it must not change what later tests log. Handlers that pytest itself installs are left to
    pytest; the CLI's own stream handler is removed."""
    manager = logging.Logger.manager
    levels = {
        name: logger.level
        for name, logger in manager.loggerDict.items()
        if isinstance(logger, logging.Logger)
    }
    root = logging.getLogger()
    root_level, root_handlers = root.level, set(root.handlers)
    yield
    for name, logger in list(manager.loggerDict.items()):
        if isinstance(logger, logging.Logger):
            logger.setLevel(levels.get(name, logging.NOTSET))
    root.setLevel(root_level)
    for handler in list(root.handlers):
        ours = (
            type(handler) is logging.StreamHandler or handler.get_name() == "trioperator.configure"
        )
        if handler not in root_handlers and ours:
            root.removeHandler(handler)
