"""Daemons, timers, indices: the same harness as the runtime tests (an operator in the test's
nursery against the fake API, on trio's mock clock), shared from there rather than copied."""

from __future__ import annotations

from tests.integration.runtime.conftest import (
    OBJ,
    Running,
    fake_api,
    obj,
    run_operator,
)

__all__ = [
    "OBJ",
    "Running",
    "fake_api",
    "obj",
    "run_operator",
]
