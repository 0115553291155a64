"""Resource selectors: parsing the decorators' arguments and resolving them against discovery."""

from __future__ import annotations

from typing import Any

import pytest
from trioperator._client.resources import Resource, in_scope
from trioperator._engine.selectors import EVERYTHING, Selector, discovery_scope, resolve_resources

ALL_VERBS = frozenset({"get", "list", "watch", "create", "update", "patch", "delete"})

PODS = Resource(
    group="",
    version="v1",
    plural="pods",
    kind="Pod",
    singular="",  # as older clusters report it for core resources
    shortcuts=frozenset({"po"}),
    categories=frozenset({"all"}),
    verbs=ALL_VERBS,
)
NAMESPACES = Resource(
    group="", version="v1", plural="namespaces", kind="Namespace", namespaced=False, verbs=ALL_VERBS
)
METRICS_PODS = Resource(
    group="metrics.k8s.io",
    version="v1beta1",
    plural="pods",
    kind="PodMetrics",
    singular="",
    verbs=frozenset({"get", "list"}),
)
CORE_EVENTS = Resource(group="", version="v1", plural="events", kind="Event", verbs=ALL_VERBS)
NEW_EVENTS = Resource(
    group="events.k8s.io", version="v1", plural="events", kind="Event", verbs=ALL_VERBS
)
KEX_V1 = Resource(
    group="kopf.dev",
    version="v1",
    plural="kopfexamples",
    kind="KopfExample",
    singular="kopfexample",
    shortcuts=frozenset({"kex", "kexes", "kopfex", "kopfexes"}),
    categories=frozenset({"kopf", "all"}),
    verbs=ALL_VERBS,
)
KEX_V1BETA1 = Resource(
    group="kopf.dev",
    version="v1beta1",
    plural="kopfexamples",
    kind="KopfExample",
    singular="kopfexample",
    shortcuts=frozenset({"kex", "kexes", "kopfex", "kopfexes"}),
    categories=frozenset({"kopf", "all"}),
    preferred=False,
    verbs=ALL_VERBS,
)
DEPLOYMENTS = Resource(
    group="apps",
    version="v1",
    plural="deployments",
    kind="Deployment",
    singular="deployment",
    shortcuts=frozenset({"deploy"}),
    categories=frozenset({"all"}),
    verbs=ALL_VERBS,
)
WIDGETS_A = Resource(
    group="a.example.com", version="v1", plural="widgets", kind="Widget", verbs=ALL_VERBS
)
WIDGETS_B = Resource(
    group="b.example.com", version="v2", plural="widgets", kind="Widget", verbs=ALL_VERBS
)
READONLY = Resource(
    group="x.dev",
    version="v1",
    plural="readonlies",
    kind="ReadOnly",
    verbs=frozenset({"get", "list", "watch"}),
)

RESOURCES = frozenset(
    {
        PODS,
        NAMESPACES,
        METRICS_PODS,
        CORE_EVENTS,
        NEW_EVENTS,
        KEX_V1,
        KEX_V1BETA1,
        DEPLOYMENTS,
        WIDGETS_A,
        WIDGETS_B,
        READONLY,
    }
)


# ---------------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("args", "group", "version", "name"),
    [
        (("kopfexamples",), None, None, "kopfexamples"),
        (("kopfexamples.kopf.dev",), "kopf.dev", None, "kopfexamples"),
        (("deployments.apps",), "apps", None, "deployments"),
        (("pods.v1",), "", "v1", "pods"),
        (("deployments.v1.apps",), "apps", "v1", "deployments"),
        (("kex.v1beta1.kopf.dev",), "kopf.dev", "v1beta1", "kex"),
        (("pods.metrics.k8s.io",), "metrics.k8s.io", None, "pods"),
        (("kopf.dev", "kopfexamples"), "kopf.dev", None, "kopfexamples"),
        (("kopf.dev/v1", "kopfexamples"), "kopf.dev", "v1", "kopfexamples"),
        (("apps/v1", "deployments"), "apps", "v1", "deployments"),
        (("kopf.dev", "v1", "kopfexamples"), "kopf.dev", "v1", "kopfexamples"),
        (("v1", "pods"), "", "v1", "pods"),
        (("", "v1", "pods"), "", "v1", "pods"),
        (("", "pods"), "", None, "pods"),
        ((EVERYTHING,), None, None, EVERYTHING),
        (("kopf.dev", EVERYTHING), "kopf.dev", None, EVERYTHING),
        (("kopf.dev/v1", EVERYTHING), "kopf.dev", "v1", EVERYTHING),
        (("kopf.dev", "v1", EVERYTHING), "kopf.dev", "v1", EVERYTHING),
        (("pods", None, None), None, None, "pods"),
    ],
)
def test_positional_forms(args: tuple[Any, ...], group: Any, version: Any, name: Any) -> None:
    selector = Selector(*args)
    assert (selector.group, selector.version, selector.any_name) == (group, version, name)
    assert selector.callback is None


def test_keyword_forms() -> None:
    selector = Selector(group="kopf.dev", version="v1", plural="kopfexamples")
    assert (selector.group, selector.version, selector.plural) == ("kopf.dev", "v1", "kopfexamples")
    assert selector.any_name is None
    assert Selector(kind="KopfExample").kind == "KopfExample"
    assert Selector(singular="kopfexample").singular == "kopfexample"
    assert Selector(shortcut="kex").shortcut == "kex"
    assert Selector(category="all").category == "all"


def test_callable_selector_with_keywords() -> None:
    def fn(resource: Resource) -> bool:
        return True

    selector = Selector(fn, group="kopf.dev")
    assert selector.callback is fn
    assert selector.group == "kopf.dev"


def test_selectors_are_hashable_values() -> None:
    assert Selector("pods") == Selector("pods")
    assert Selector("v1", "pods") == Selector("", "v1", "pods") == Selector("pods.v1")
    assert len({Selector("pods"), Selector("pods"), Selector("deployments")}) == 2
    assert "pods" in repr(Selector("pods"))
    assert "None" not in repr(Selector("pods"))


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        ((), {}, TypeError, "must be specified"),
        ((), {"group": "kopf.dev"}, TypeError, "must be specified"),
        ((), {"version": "v1"}, TypeError, "must be specified"),
        (("kopf.dev", "kopfexamples"), {"group": "kopf.dev"}, TypeError, "both positionally"),
        (("kopf.dev/v1", "kopfexamples"), {"version": "v1"}, TypeError, "both positionally"),
        (("kopfexamples",), {"plural": "kopfexamples"}, TypeError, "both positionally"),
        ((EVERYTHING,), {"kind": "Pod"}, TypeError, "both positionally"),
        ((EVERYTHING, "pods"), {}, TypeError, "last"),
        ((None, "pods"), {}, TypeError, "gaps"),
        (("kopf.dev", None, "kopfexamples"), {}, TypeError, "gaps"),
        ((lambda r: True, "pods"), {}, TypeError, "only positional"),
        (("pods", lambda r: True), {}, TypeError, "strings or EVERYTHING"),
        ((123,), {}, TypeError, "strings or EVERYTHING"),
        (("",), {}, ValueError, "empty"),
        (("kopf.dev", ""), {}, ValueError, "empty"),
        (("kopf.dev/v1",), {}, ValueError, "slash"),
        (("kopf.dev/", "kopfexamples"), {}, ValueError, "Malformed"),
        (("a/b/c", "kopfexamples"), {}, ValueError, "Malformed"),
        (("kopf.dev/v1", "v1", "kopfexamples"), {}, ValueError, "separate"),
        (("kopf.dev", "", "kopfexamples"), {}, ValueError, "empty"),
        ((".kopf.dev",), {}, ValueError, "Malformed"),
        ((), {"plural": 123}, TypeError, "must be a string"),
        ((), {"plural": ""}, ValueError, "empty"),
        ((), {"kind": "Pod", "version": ""}, ValueError, "empty"),
    ],
)
def test_invalid_arguments(
    args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        Selector(*args, **kwargs)


def test_unknown_keywords_are_rejected() -> None:
    with pytest.raises(TypeError):
        Selector("pods", namespace="default")  # type: ignore[call-arg]


# ---------------------------------------------------------------------------------- selecting


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        # Any name: plural, singular, kind, short names.
        (Selector("kopfexamples"), {KEX_V1}),
        (Selector("kopfexample"), {KEX_V1}),
        (Selector("KopfExample"), {KEX_V1}),
        (Selector("kex"), {KEX_V1}),
        (Selector("deploy"), {DEPLOYMENTS}),
        (Selector("deployments.apps"), {DEPLOYMENTS}),
        (Selector("Deployment"), {DEPLOYMENTS}),
        # The singular of core resources is derived from the kind where discovery lacks it.
        (Selector("pod"), {PODS}),
        (Selector("Pod"), {PODS}),
        (Selector("po"), {PODS}),
        # Versions: preferred by default, any explicitly named one.
        (Selector("kopf.dev", "kopfexamples"), {KEX_V1}),
        (Selector("kopf.dev", "v1beta1", "kopfexamples"), {KEX_V1BETA1}),
        (Selector("kopfexamples.v1beta1.kopf.dev"), {KEX_V1BETA1}),
        (Selector(plural="kopfexamples", version="v1beta1"), {KEX_V1BETA1}),
        # Keywords match only their own kind of name.
        (Selector(plural="kopfexamples"), {KEX_V1}),
        (Selector(plural="kopfexample"), set()),
        (Selector(singular="kopfexample"), {KEX_V1}),
        (Selector(singular="pod"), {PODS}),
        (Selector(kind="KopfExample"), {KEX_V1}),
        (Selector(kind="kopfexamples"), set()),
        (Selector(shortcut="kex"), {KEX_V1}),
        (Selector(shortcut="kopfexamples"), set()),
        (Selector(group="kopf.dev", plural="kopfexamples"), {KEX_V1}),
        (Selector(group="zalando.org", plural="kopfexamples"), set()),
        # Core v1 wins over same-named resources of other groups...
        (Selector("pods"), {PODS}),
        # ... unless another group is requested explicitly.
        (Selector("metrics.k8s.io", "pods"), {METRICS_PODS}),
        (Selector("pods.metrics.k8s.io"), {METRICS_PODS}),
        (Selector("v1", "pods"), {PODS}),
        # Events are served when named directly.
        (Selector("v1", "events"), {CORE_EVENTS}),
        (Selector("events.k8s.io", "events"), {NEW_EVENTS}),
        (Selector("events"), {CORE_EVENTS}),
        # Categories: whatever is in them (except events), no priorities.
        (Selector(category="all"), {PODS, KEX_V1, DEPLOYMENTS}),
        (Selector(category="kopf"), {KEX_V1}),
        (Selector(category="kopf", version="v1beta1"), {KEX_V1BETA1}),
        # Same-named resources in two groups: both are found (and the selector is ambiguous).
        (Selector("widgets"), {WIDGETS_A, WIDGETS_B}),
        (Selector("b.example.com", "widgets"), {WIDGETS_B}),
        (Selector("nonexistent"), set()),
    ],
)
def test_select(selector: Selector, expected: set[Resource]) -> None:
    assert selector.select(RESOURCES) == expected


def test_everything_excludes_events_and_non_preferred_versions() -> None:
    selected = Selector(EVERYTHING).select(RESOURCES)
    assert CORE_EVENTS not in selected
    assert NEW_EVENTS not in selected
    assert KEX_V1BETA1 not in selected
    assert selected == RESOURCES - {CORE_EVENTS, NEW_EVENTS, KEX_V1BETA1}


def test_everything_within_a_group_or_version() -> None:
    assert Selector("kopf.dev", EVERYTHING).select(RESOURCES) == {KEX_V1}
    assert Selector("kopf.dev", "v1beta1", EVERYTHING).select(RESOURCES) == {KEX_V1BETA1}
    assert Selector("v1", EVERYTHING).select(RESOURCES) == {PODS, NAMESPACES}
    assert Selector("events.k8s.io", EVERYTHING).select(RESOURCES) == set()


def test_callable_selectors_see_all_versions_but_never_events() -> None:
    seen: list[Resource] = []

    def everything(resource: Resource) -> bool:
        seen.append(resource)
        return True

    selected = Selector(everything).select(RESOURCES)
    assert KEX_V1BETA1 in selected
    assert CORE_EVENTS not in selected
    assert NEW_EVENTS not in selected
    assert set(seen) == RESOURCES

    def core(resource: Resource) -> bool:
        return resource.group == "" and resource.preferred

    assert Selector(core).select(RESOURCES) == {PODS, NAMESPACES}


def test_callable_selectors_combine_with_keywords() -> None:
    def yes(resource: Resource) -> bool:
        return True

    assert Selector(yes, group="kopf.dev").select(RESOURCES) == {KEX_V1, KEX_V1BETA1}
    assert Selector(yes, group="kopf.dev", version="v1").select(RESOURCES) == {KEX_V1}


@pytest.mark.parametrize(
    ("selector", "ambiguous"),
    [
        (Selector("widgets"), True),
        (Selector(kind="Widget"), True),
        (Selector("a.example.com", "widgets"), False),
        (Selector("pods"), False),  # core v1 wins
        (Selector("kopfexamples"), False),
        (Selector(EVERYTHING), False),  # intentionally multi-resource
        (Selector(category="all"), False),
        (Selector(lambda r: True), False),
        # Several versions of one resource are not an ambiguity.
        (Selector(lambda r: True, plural="kopfexamples"), False),
        (Selector("nonexistent"), False),
    ],
)
def test_is_ambiguous(selector: Selector, ambiguous: bool) -> None:
    assert selector.is_ambiguous(RESOURCES) is ambiguous


# ---------------------------------------------------------------------------------- resolving


def test_resolving_serves_what_is_selected_per_kind() -> None:
    served = resolve_resources(
        RESOURCES,
        watching=[Selector("pods")],
        changing=[Selector("kopfexamples")],
        spawning=[Selector("deployments")],
        indexing=[Selector("v1", "namespaces")],
        webhooks=[Selector("kopf.dev", "v1beta1", "kopfexamples")],
    )
    assert served.watching == {PODS}
    assert served.changing == {KEX_V1}
    assert served.spawning == {DEPLOYMENTS}
    assert served.indexing == {NAMESPACES}
    assert served.webhooks == {KEX_V1BETA1}
    assert served.watched == {PODS, KEX_V1, DEPLOYMENTS, NAMESPACES}
    assert served.warnings == ()


def test_ambiguous_selectors_serve_nothing_and_warn_once() -> None:
    served = resolve_resources(
        RESOURCES,
        watching=[Selector("widgets"), Selector("a.example.com", "widgets")],
        changing=[Selector("widgets")],
    )
    assert served.watching == {WIDGETS_A}
    assert served.changing == set()
    assert len(served.warnings) == 1
    warning = served.warnings[0]
    assert warning.startswith("Ambiguous resources will not be served")
    assert "widgets.v1.a.example.com" in warning
    assert "widgets.v2.b.example.com" in warning


def test_non_watchable_resources_are_excluded_with_a_warning() -> None:
    served = resolve_resources(RESOURCES, watching=[Selector("metrics.k8s.io", "pods")])
    assert served.watched == set()
    assert served.warnings == (
        "Non-watchable resources will not be served: pods.v1beta1.metrics.k8s.io",
    )


def test_non_patchable_resources_are_excluded_only_for_patching_handlers() -> None:
    served = resolve_resources(
        RESOURCES,
        watching=[Selector("readonlies")],
        indexing=[Selector("readonlies")],
        changing=[Selector("readonlies")],
        spawning=[Selector("readonlies")],
    )
    assert served.watching == {READONLY}
    assert served.indexing == {READONLY}
    assert served.changing == set()
    assert served.spawning == set()
    assert served.watched == {READONLY}
    assert len(served.warnings) == 1
    assert served.warnings[0].startswith("Non-patchable resources will not be served")
    assert "readonlies.v1.x.dev" in served.warnings[0]


def test_webhooks_need_no_verbs() -> None:
    served = resolve_resources(RESOURCES, webhooks=[Selector("metrics.k8s.io", "pods")])
    assert served.webhooks == {METRICS_PODS}
    assert served.watched == set()
    assert served.warnings == ()


def test_everything_with_unwatchable_resources_warns_about_them() -> None:
    served = resolve_resources(RESOURCES, watching=[Selector(EVERYTHING)])
    assert METRICS_PODS not in served.watching
    assert PODS in served.watching
    assert served.warnings == (
        "Non-watchable resources will not be served: pods.v1beta1.metrics.k8s.io",
    )


# ---------------------------------------------------------------------------- discovery scope


@pytest.mark.parametrize(
    ("selectors", "scope"),
    [
        ([], frozenset()),
        ([Selector("kopf.dev", "v1", "kopfexamples")], {("kopf.dev", "v1")}),
        ([Selector("kopfexamples.kopf.dev")], {("kopf.dev", None)}),
        ([Selector("pods.v1"), Selector("deployments.v1.apps")], {("", "v1"), ("apps", "v1")}),
        ([Selector("kopf.dev", EVERYTHING)], {("kopf.dev", None)}),
        ([Selector("kopf.dev", "v1", "kopfexamples"), Selector(EVERYTHING)], None),
        ([Selector("pods")], None),
        ([Selector(category="all")], None),
        ([Selector(lambda resource: True)], None),
        ([Selector(lambda resource: True, group="apps")], {("apps", None)}),
    ],
)
def test_discovery_scope(selectors: list[Selector], scope: Any) -> None:
    assert discovery_scope(selectors) == scope


def test_discovery_scope_adds_extra_groups_unless_everything_is_scanned() -> None:
    selectors = [Selector("pods.v1")]
    extra = ("kopf.dev", "zalando.org")
    expected = {("", "v1"), ("kopf.dev", None), ("zalando.org", None)}
    assert discovery_scope(selectors, extra_groups=extra) == expected
    assert discovery_scope([Selector("pods")], extra_groups=extra) is None


@pytest.mark.parametrize(
    ("group", "version", "expected"),
    [("kopf.dev", None, True), ("kopf.dev", "v1", True), ("kopf.dev", "v2", False),
     ("apps", None, True), ("apps", "v7", True), ("", None, False), ("x", "v1", False)],
)  # fmt: skip
def test_in_scope(group: str, version: str | None, expected: bool) -> None:
    scope = frozenset({("kopf.dev", "v1"), ("apps", None)})
    assert in_scope(scope, group, version) is expected
    assert in_scope(None, group, version) is True
