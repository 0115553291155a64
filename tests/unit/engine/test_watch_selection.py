"""Server-side selectors: derived from the handlers' labels, configured per resource."""

from __future__ import annotations

from typing import Any

import pytest
import trioperator as kopf
from trioperator._client.resources import Resource
from trioperator._client.settings import WatchingSettings, WatchSelector
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.watch_selection import (
    configured_selector,
    derive_label_selector,
    label_requirements,
    watch_selector,
)

KEX = Resource(group="kopf.dev", version="v1", plural="kopfexamples", kind="KopfExample")
PODS = Resource(group="", version="v1", plural="pods", kind="Pod")


def _fn(**_: Any) -> None:
    return None


def _registry(*decorators: Any) -> OperatorRegistry:
    registry = OperatorRegistry()
    for decorate in decorators:
        decorate(registry)(_fn)
    return registry


def _create(**filters: Any) -> Any:
    return lambda registry: kopf.on.create("kopfexamples", registry=registry, **filters)


def _delete(**filters: Any) -> Any:
    return lambda registry: kopf.on.delete("kopfexamples", registry=registry, **filters)


def test_equality_existence_and_absence_are_pushed_down() -> None:
    registry = _registry(_create(labels={"app": "web", "tier": kopf.PRESENT, "old": kopf.ABSENT}))
    assert derive_label_selector(registry, KEX) == "app=web,!old,tier"  # sorted by key


def test_the_deprecated_none_means_present() -> None:
    with pytest.warns(DeprecationWarning, match="use kopf.PRESENT"):
        registry = _registry(_create(labels={"tier": None}))
    assert derive_label_selector(registry, KEX) == "tier"


def test_every_kind_of_handler_must_share_the_requirement() -> None:
    def index(registry: OperatorRegistry) -> Any:
        return kopf.index("kopfexamples", registry=registry, labels={"app": "web"})

    def unfiltered_index(registry: OperatorRegistry) -> Any:
        return kopf.index("kopfexamples", registry=registry)  # no labels: sees everything

    shared = [_create(labels={"app": "web"}), _delete(labels={"app": "web"}), index]
    assert derive_label_selector(_registry(*shared), KEX) == "app=web"
    assert derive_label_selector(_registry(*shared, unfiltered_index), KEX) is None


def test_daemons_and_timers_disable_the_derivation() -> None:
    # A departure (DELETED) would stop them as RESOURCE_DELETED, not FILTERS_MISMATCH.
    def daemon(registry: OperatorRegistry) -> Any:
        return kopf.daemon("kopfexamples", registry=registry, labels={"app": "web"})

    def timer(registry: OperatorRegistry) -> Any:
        return kopf.timer("kopfexamples", registry=registry, interval=1, labels={"app": "web"})

    create = _create(labels={"app": "web"})
    assert derive_label_selector(_registry(create, daemon), KEX) is None
    assert derive_label_selector(_registry(create, timer), KEX) is None


def test_only_the_common_exact_part_is_pushed_down() -> None:
    registry = _registry(
        _create(labels={"app": "web", "tier": "front"}),
        _delete(labels={"app": "web", "tier": "back"}),
    )
    assert derive_label_selector(registry, KEX) == "app=web"


def test_disjoint_filters_push_nothing_down() -> None:
    registry = _registry(_create(labels={"app": "web"}), _delete(labels={"app": "db"}))
    assert derive_label_selector(registry, KEX) is None


def test_callables_and_when_stay_client_side() -> None:
    registry = _registry(
        _create(labels={"app": "web", "tier": lambda value, **_: value != "x"}),
        _delete(labels={"app": "web"}, when=lambda **_: True),
    )
    assert derive_label_selector(registry, KEX) == "app=web"
    only_callables = _registry(_create(labels={"tier": lambda value, **_: True}))
    assert derive_label_selector(only_callables, KEX) is None


def test_a_handler_without_labels_disables_the_derivation() -> None:
    registry = _registry(_create(labels={"app": "web"}), _create(annotations={"a": "b"}))
    assert derive_label_selector(registry, KEX) is None


def test_event_handlers_disable_the_derivation() -> None:
    # The server reports an object leaving the selection as DELETED: such a handler would
    # then be called where without the selector it would not be.
    def event(registry: OperatorRegistry) -> Any:
        return kopf.on.event("kopfexamples", registry=registry, labels={"app": "web"})

    assert derive_label_selector(_registry(_create(labels={"app": "web"}), event), KEX) is None


def test_handlers_of_other_resources_do_not_count() -> None:
    def pods(registry: OperatorRegistry) -> Any:
        return kopf.on.create("pods", registry=registry)

    registry = _registry(_create(labels={"app": "web"}), pods)
    assert derive_label_selector(registry, KEX) == "app=web"
    assert derive_label_selector(registry, PODS) is None


def test_values_outside_of_the_label_syntax_stay_client_side() -> None:
    requirements = label_requirements(
        {"app": "a,b", "bad key": "x", "tier": "", "ok": "v-1.2_3", "example.com/x": "y"}
    )
    assert requirements == {("ok", "=", "v-1.2_3"), ("example.com/x", "=", "y")}


def test_configured_selectors_by_the_most_specific_key() -> None:
    selectors: dict[str, WatchSelector | str] = {
        "*": "everywhere=yes",
        "kopfexamples.kopf.dev": WatchSelector(labels="a=b", fields="metadata.name=x"),
    }
    assert configured_selector(selectors, KEX) == WatchSelector(
        labels="a=b", fields="metadata.name=x"
    )
    assert configured_selector(selectors, PODS) == WatchSelector(labels="everywhere=yes")
    assert configured_selector({"KopfExample": "k"}, KEX) == WatchSelector(labels="k")
    assert configured_selector({"pods": "p"}, KEX) is None


def test_a_configured_value_of_another_type_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match=r"selectors\['kopfexamples'\] must be"):
        configured_selector({"kopfexamples": 3}, KEX)  # type: ignore[dict-item]


def test_an_empty_watch_selector_part_is_refused() -> None:
    with pytest.raises(ValueError, match="labels"):
        WatchSelector(labels=" ")


def test_configured_and_derived_selectors_combine() -> None:
    registry = _registry(_create(labels={"app": "web"}))
    settings = WatchingSettings(selectors={"kopfexamples": WatchSelector("env=prod", "f=1")})
    assert watch_selector(settings, registry, KEX) == WatchSelector(
        labels="env=prod,app=web", fields="f=1"
    )
    settings.derive_selectors = False
    assert watch_selector(settings, registry, KEX) == WatchSelector("env=prod", "f=1")
    assert watch_selector(WatchingSettings(derive_selectors=False), registry, KEX) is None
    assert watch_selector(WatchingSettings(), _registry(_create()), KEX) is None
