"""One record of run options from every entry point down to the operator (OperatorOptions)."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import pytest
import trioperator as kopf
from trioperator._runtime.program.options import OperatorOptions
from trioperator.testing import OperatorHarness

OPTION_NAMES = {field.name for field in dataclasses.fields(OperatorOptions)}

# The embedding entry points take the flags besides the options; nothing else.
EMBEDDING_EXTRAS = {"ready_flag", "stop_flag"}


def keyword_names(fn: Callable[..., Any]) -> set[str]:
    return {
        name
        for name, param in inspect.signature(fn).parameters.items()
        if param.kind is inspect.Parameter.KEYWORD_ONLY
    }


@pytest.mark.parametrize(
    ("entry", "extras"),
    [
        (kopf.Operator, set()),
        (kopf.run, EMBEDDING_EXTRAS),
        (kopf.operator, EMBEDDING_EXTRAS),
        (kopf.spawn_tasks, EMBEDDING_EXTRAS),
    ],
    ids=["Operator", "run", "operator", "spawn_tasks"],
)
def test_every_entry_point_takes_every_option(entry: Callable[..., Any], extras: set[str]) -> None:
    # An option added to OperatorOptions but forgotten in a public signature fails here.
    assert keyword_names(entry) == OPTION_NAMES | extras


def test_operator_keywords_arrive_as_the_options_record() -> None:
    registry = kopf.OperatorRegistry()
    settings = kopf.OperatorSettings()
    given: dict[str, Any] = {
        "registry": registry,
        "settings": settings,
        "memo": kopf.Memo(x=1),
        "vault": kopf.Vault(),
        "namespaces": ("ns-a", "ns-b"),
        "clusterwide": False,
        "handle_signals": True,
        "liveness_endpoint": "http://127.0.0.1:0/healthz",
        "metrics_endpoint": "http://127.0.0.1:0/metrics",
        "standalone": True,
        "priority": 7,
        "peering_name": "example",
        "identity": "replica-1",
        "async_flavor": "trio",
    }
    assert set(given) == OPTION_NAMES
    op = kopf.Operator(**given)
    assert op.options == OperatorOptions(**given)
    # What the operator made of them: the same as when made from the record itself.
    twin = kopf.Operator.from_options(OperatorOptions(**{**given, "settings": None}))
    assert (op.registry, op.namespaces, op.clusterwide, op.identity) == (
        twin.registry,
        twin.namespaces,
        twin.clusterwide,
        twin.identity,
    )
    peering = op.settings.peering
    assert (peering.name, peering.mandatory, peering.standalone, peering.priority) == (
        "example",
        True,
        True,
        7,
    )
    assert twin.settings.peering == peering
    assert op.settings.execution.async_flavor == "trio"


def test_harness_options_without_credentials_until_started() -> None:
    harness = OperatorHarness(namespaces=["ns-a"], metrics_endpoint="http://127.0.0.1:0/metrics")
    assert harness.options.namespaces == ("ns-a",)
    assert harness.options.clusterwide is False
    assert harness.options.handle_signals is False
    assert harness.options.vault is None  # the harness adds the fake API's credentials
