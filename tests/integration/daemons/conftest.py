"""Daemons, timers, indices: the same harness as the runtime tests (an operator in the test's
nursery against the fake API, on trio's mock clock), shared from there rather than copied."""

from __future__ import annotations

from tests.integration.runtime.conftest import (
    CRD,
    OBJ,
    LogLine,
    Logs,
    Running,
    fake_api,
    logs,
    obj,
    registry,
    run_operator,
    settings,
)

__all__ = [
    "CRD",
    "OBJ",
    "LogLine",
    "Logs",
    "Running",
    "fake_api",
    "logs",
    "obj",
    "registry",
    "run_operator",
    "settings",
]
