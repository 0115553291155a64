"""``on.reconcile``: what it registers, and which resources the operator then watches."""

from __future__ import annotations

from typing import Any

import pytest
import trioperator as kopf
from trioperator._client.resources import Resource
from trioperator._engine.handlers import ReconcilingHandler, RelayingHandler

VERBS = frozenset({"list", "watch", "patch", "get", "create", "delete"})
KEX = Resource(
    group="kopf.dev", version="v1", plural="kopfexamples", kind="KopfExample", verbs=VERBS
)
CMS = Resource(group="", version="v1", plural="configmaps", kind="ConfigMap", verbs=VERBS)
SECRETS = Resource(group="", version="v1", plural="secrets", kind="Secret", verbs=VERBS)
PODS = Resource(group="", version="v1", plural="pods", kind="Pod", verbs=VERBS)


def mapper(**_: Any) -> list[str]:
    return []


def test_reconcile_registers_a_handler_and_one_relay_per_child_and_mapper() -> None:
    registry = kopf.OperatorRegistry()

    @kopf.on.reconcile(
        "kopfexamples",
        owns=["configmaps"],
        watches={("", "secrets"): mapper},
        resync=60,
        registry=registry,
    )
    def fn(**_: Any) -> None:
        pass

    [handler] = registry.get_handlers(ReconcilingHandler)
    assert handler.fn is fn
    assert handler.resync == 60
    relays = registry.get_handlers(RelayingHandler)
    assert [(relay.by_owner, relay.fn) for relay in relays] == [(True, fn), (False, mapper)]
    served = registry.resolve_resources([KEX, CMS, SECRETS, PODS])
    assert served.reconciling == {KEX}
    assert served.relaying == {CMS, SECRETS}
    assert served.watched == {KEX, CMS, SECRETS}
    assert registry.is_relayed_only(CMS)
    assert not registry.is_relayed_only(KEX)
    assert registry.get_handlers(ReconcilingHandler, KEX)
    assert not registry.has_changing_handlers(KEX)  # Kopf's kinds are not involved


def test_a_child_resource_with_handlers_of_its_own_is_not_relayed_only() -> None:
    registry = kopf.OperatorRegistry()
    kopf.on.reconcile("kopfexamples", owns=["configmaps"], registry=registry)(mapper)
    kopf.on.event("configmaps", registry=registry)(mapper)
    assert not registry.is_relayed_only(CMS)


def test_no_reconcile_handlers_nothing_relayed() -> None:
    registry = kopf.OperatorRegistry()
    kopf.on.create("kopfexamples", registry=registry)(mapper)
    assert not registry.has_relaying_handlers(CMS)
    assert not registry.get_handlers(ReconcilingHandler, KEX)
    assert registry.resolve_resources([KEX, CMS]).watched == {KEX}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"owns": [42]}, "owns="),
        ({"watches": {"secrets": "not callable"}}, "mapper"),
        ({"watches": ["secrets"]}, "watches="),
        ({"resync": -1}, "resync"),
    ],
)
def test_bad_options_are_refused_at_registration(options: dict[str, Any], message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        kopf.on.reconcile("kopfexamples", registry=kopf.OperatorRegistry(), **options)(mapper)
