"""The operator registry and its queries; sub-registries of running handlers."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import trio
import trio.lowlevel
from trioperator import on as kopf_on
from trioperator._client.resources import Resource
from trioperator._engine.filters import ABSENT, PRESENT
from trioperator._engine.handlers import (
    Activity,
    ActivityHandler,
    BaseHandler,
    ChangingHandler,
    DaemonHandler,
    IndexingHandler,
    ResourceHandler,
    SpawningHandler,
    TimerHandler,
    WatchingHandler,
    WebhookHandler,
    WebhookType,
    build_subhandler,
)
from trioperator._engine.ids import HandlerId
from trioperator._engine.reasons import Reason
from trioperator._engine.registry import (
    OperatorRegistry,
    SubRegistry,
    collect_subhandlers,
    current_subregistry,
    get_default_registry,
    set_default_registry,
    subregistry_var,
)
from trioperator._engine.selectors import Selector

VERBS = frozenset({"list", "watch", "patch", "get"})
KEX = Resource(
    group="kopf.dev", version="v1", plural="kopfexamples", kind="KopfExample", verbs=VERBS
)
PODS = Resource(group="", version="v1", plural="pods", kind="Pod", verbs=VERBS)

KEX_SELECTOR = Selector("kopfexamples")
PODS_SELECTOR = Selector("pods")


def fn1(**_: Any) -> None:
    pass


def fn2(**_: Any) -> None:
    pass


def changing(
    fn: Any = fn1, id: str | None = None, selector: Selector | None = KEX_SELECTOR, **options: Any
) -> ChangingHandler:
    options.setdefault("reason", Reason.CREATE)
    return ChangingHandler(fn=fn, id=HandlerId(id or fn.__name__), selector=selector, **options)


def resource_handler(
    kind: type[ResourceHandler], selector: Selector = KEX_SELECTOR, **kw: Any
) -> Any:
    kw.setdefault("id", HandlerId(kw.get("fn", fn1).__name__))
    kw.setdefault("fn", fn1)
    return kind(selector=selector, **kw)


def body(
    *,
    labels: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
    deleted: bool = False,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "obj", "labels": dict(labels or {})}
    if deleted:
        metadata["deletionTimestamp"] = "2020-01-01T00:00:00Z"
    return {"metadata": metadata, "spec": dict(spec or {})}


def ids(handlers: Any) -> list[str]:
    return [handler.id for handler in handlers]


def changes(
    registry: OperatorRegistry | SubRegistry,
    reason: Reason,
    *,
    obj: dict[str, Any] | None = None,
    old: Any = None,
    new: Any = None,
    initial: bool = False,
    **more: Any,
) -> list[str]:
    obj = body() if obj is None else obj
    common: dict[str, Any] = dict(
        reason=reason, body=obj, old=old, new=obj if new is None else new, diff=None,
        initial=initial, kwargs={"name": "obj"}, **more,
    )  # fmt: skip
    if isinstance(registry, OperatorRegistry):
        return ids(registry.iter_changing_handlers(resource=KEX, **common))
    return ids(registry.iter_handlers(**common))


# ------------------------------------------------------------------------------ registration


def test_empty_registry() -> None:
    registry = OperatorRegistry()
    assert registry.get_handlers(ChangingHandler) == ()
    assert registry.selectors == frozenset()
    assert not registry.has_changing_handlers(KEX)
    assert "empty" in repr(registry)


def test_handlers_are_grouped_by_kind() -> None:
    registry = OperatorRegistry()
    handlers: list[BaseHandler] = [
        ActivityHandler(fn=fn1, id=HandlerId("a"), activity=Activity.STARTUP),
        resource_handler(WatchingHandler, id=HandlerId("w")),
        changing(id="c"),
        resource_handler(DaemonHandler, id=HandlerId("d")),
        resource_handler(TimerHandler, id=HandlerId("t")),
        resource_handler(IndexingHandler, id=HandlerId("i")),
        resource_handler(WebhookHandler, id=HandlerId("v"), reason=WebhookType.VALIDATING),
    ]
    for handler in handlers:
        registry.append(handler)

    assert ids(registry.get_handlers(ActivityHandler)) == ["a"]
    assert ids(registry.get_handlers(WatchingHandler)) == ["w"]
    assert ids(registry.get_handlers(ChangingHandler)) == ["c"]
    assert ids(registry.get_handlers(SpawningHandler)) == ["d", "t"]
    assert ids(registry.get_handlers(DaemonHandler)) == ["d"]
    assert ids(registry.get_handlers(TimerHandler)) == ["t"]
    assert ids(registry.get_handlers(IndexingHandler)) == ["i"]
    assert ids(registry.get_handlers(WebhookHandler)) == ["v"]
    assert "ChangingHandler=1" in repr(registry)


def test_only_handlers_can_be_registered() -> None:
    with pytest.raises(TypeError):
        OperatorRegistry().append(fn1)  # type: ignore[arg-type]


def test_lookups_by_resource_follow_selectors_and_see_new_registrations() -> None:
    registry = OperatorRegistry()
    registry.append(changing(fn1, selector=KEX_SELECTOR))
    assert ids(registry.get_handlers(ChangingHandler, KEX)) == ["fn1"]
    assert ids(registry.get_handlers(ChangingHandler, PODS)) == []
    registry.append(changing(fn2, selector=PODS_SELECTOR))  # after a cached lookup
    assert ids(registry.get_handlers(ChangingHandler, PODS)) == ["fn2"]
    assert ids(registry.get_handlers(ChangingHandler)) == ["fn1", "fn2"]


def test_has_queries() -> None:
    registry = OperatorRegistry()
    registry.append(ActivityHandler(fn=fn1, id=HandlerId("a"), activity=Activity.PROBE))
    registry.append(resource_handler(WatchingHandler, PODS_SELECTOR))
    registry.append(changing())
    registry.append(resource_handler(DaemonHandler))
    registry.append(resource_handler(IndexingHandler, PODS_SELECTOR))
    registry.append(resource_handler(WebhookHandler, reason=WebhookType.MUTATING))

    assert ids(registry.get_activity_handlers(Activity.PROBE)) == ["a"]
    assert registry.get_activity_handlers(Activity.CLEANUP) == []
    assert registry.has_watching_handlers(PODS)
    assert not registry.has_watching_handlers(KEX)
    assert registry.has_changing_handlers(KEX)
    assert not registry.has_changing_handlers(PODS)
    assert registry.has_spawning_handlers(KEX)
    assert registry.get_handlers(DaemonHandler, KEX)
    assert not registry.get_handlers(TimerHandler, KEX)
    assert registry.has_indexing_handlers(PODS)
    assert not registry.has_indexing_handlers(KEX)
    assert registry.get_handlers(WebhookHandler, KEX)
    assert registry.get_handlers(SpawningHandler, KEX)


def test_selectors_and_resolution() -> None:
    registry = OperatorRegistry()
    registry.append(resource_handler(WatchingHandler, PODS_SELECTOR))
    registry.append(changing(selector=KEX_SELECTOR))
    registry.append(build_subhandler(fn2, parent=changing()))  # no selector: not listed
    registry.append(ActivityHandler(fn=fn1, id=HandlerId("a"), activity=Activity.STARTUP))
    assert registry.selectors == {PODS_SELECTOR, KEX_SELECTOR}
    assert registry.get_selectors(WatchingHandler) == {PODS_SELECTOR}
    assert registry.get_selectors(ChangingHandler) == {KEX_SELECTOR}

    served = registry.resolve_resources([KEX, PODS])
    assert served.watching == {PODS}
    assert served.changing == {KEX}
    assert served.watched == {PODS, KEX}


def test_extra_fields_are_those_of_changing_handlers() -> None:
    registry = OperatorRegistry()
    registry.append(changing(fn1, field=("status", "phase"), reason=Reason.UPDATE))
    registry.append(changing(fn2, field=("spec", "x"), selector=PODS_SELECTOR))
    registry.append(resource_handler(DaemonHandler, field=("spec", "y")))
    assert registry.get_extra_fields(KEX) == {("status", "phase")}
    assert registry.get_extra_fields(PODS) == {("spec", "x")}


# ------------------------------------------------------------------------- changing handlers


def test_handlers_match_their_reason() -> None:
    registry = OperatorRegistry()
    registry.append(changing(id="create", reason=Reason.CREATE))
    registry.append(changing(id="update", reason=Reason.UPDATE))
    registry.append(changing(id="delete", reason=Reason.DELETE))
    assert changes(registry, Reason.CREATE) == ["create"]
    assert changes(registry, Reason.UPDATE) == ["update"]
    assert changes(registry, Reason.DELETE, obj=body(deleted=True)) == ["delete"]


@pytest.mark.parametrize("reason", [Reason.NOOP, Reason.FREE, Reason.GONE])
def test_informational_reasons_have_no_handlers(reason: Reason) -> None:
    registry = OperatorRegistry()
    registry.append(changing(id="resume", reason=None, initial=True, deleted=True))
    registry.append(changing(id="field", reason=None, field=("spec", "x"), field_needs_change=True))
    assert changes(registry, reason, initial=True) == []


def test_resume_handlers_are_mixed_in_only_while_initial() -> None:
    registry = OperatorRegistry()
    registry.append(changing(id="create", reason=Reason.CREATE))
    registry.append(changing(id="resume", reason=None, initial=True))
    assert changes(registry, Reason.CREATE, initial=True) == ["create", "resume"]
    assert changes(registry, Reason.CREATE, initial=False) == ["create"]
    assert changes(registry, Reason.RESUME, initial=True) == ["resume"]
    assert changes(registry, Reason.UPDATE, initial=True) == ["resume"]


def test_resume_handlers_skip_deleted_objects_unless_allowed() -> None:
    registry = OperatorRegistry()
    registry.append(changing(id="delete", reason=Reason.DELETE))
    registry.append(changing(id="resume", reason=None, initial=True))
    registry.append(changing(id="resume-deleted", reason=None, initial=True, deleted=True))
    deleted = body(deleted=True)
    assert changes(registry, Reason.DELETE, obj=deleted, initial=True) == [
        "delete",
        "resume-deleted",
    ]
    # The deletion state can also be given explicitly.
    assert changes(registry, Reason.DELETE, initial=True, deleted=True) == [
        "delete",
        "resume-deleted",
    ]


def test_same_function_and_id_runs_once_per_cause() -> None:
    registry = OperatorRegistry()
    registry.append(changing(fn1, reason=Reason.CREATE))
    registry.append(changing(fn1, reason=None, initial=True))
    assert changes(registry, Reason.CREATE, initial=True) == ["fn1"]


def test_handlers_are_deduplicated_by_the_identity_of_their_function_as_in_kopf() -> None:
    # Kopf keys the deduplication on ``id(fn)``: each access to ``instance.handler`` makes a
    # new bound-method object, equal to the others but not the same one, so the same method
    # given to two decorators is two handlers there (and runs twice for one event). Same here:
    # users run ``import trioperator as kopf`` and get the same calls.
    class Holder:
        def handler(self, **_: Any) -> None:
            pass

    instance = Holder()
    registry = OperatorRegistry()
    kopf_on.event("kopfexamples", id="h", registry=registry)(instance.handler)
    kopf_on.event("kopfexamples", id="h", registry=registry)(instance.handler)
    watching = registry.iter_watching_handlers(resource=KEX, body=body(), kwargs={})
    assert [handler.id for handler in watching] == ["h", "h"]

    registry.append(changing(instance.handler, id="h", reason=Reason.CREATE))
    registry.append(changing(instance.handler, id="h", reason=None, initial=True))
    assert changes(registry, Reason.CREATE, initial=True) == ["h", "h"]

    # One and the same object under two decorators is one handler, bound method or not.
    method = instance.handler
    registry = OperatorRegistry()
    kopf_on.event("kopfexamples", id="h", registry=registry)(method)
    kopf_on.event("kopfexamples", id="h", registry=registry)(method)
    watching = registry.iter_watching_handlers(resource=KEX, body=body(), kwargs={})
    assert [handler.id for handler in watching] == ["h"]


def test_an_activity_function_under_two_decorators_runs_once() -> None:
    def started(**_: Any) -> None:
        pass

    registry = OperatorRegistry()
    kopf_on.startup(id="started", registry=registry)(started)
    kopf_on.startup(id="started", registry=registry)(started)
    kopf_on.cleanup(id="started", registry=registry)(started)
    assert [h.id for h in registry.get_activity_handlers(Activity.STARTUP)] == ["started"]
    assert [h.id for h in registry.get_activity_handlers(Activity.CLEANUP)] == ["started"]


def test_same_function_with_different_ids_runs_for_each() -> None:
    registry = OperatorRegistry()
    update: dict[str, Any] = {"reason": Reason.UPDATE, "field_needs_change": True}
    registry.append(changing(fn1, id="fn1/spec.a", field=("spec", "a"), **update))
    registry.append(changing(fn1, id="fn1/spec", field=("spec",), **update))
    old = body(spec={"a": 1})
    new = body(spec={"a": 2})
    assert changes(registry, Reason.UPDATE, obj=new, old=old, new=new) == ["fn1/spec.a", "fn1/spec"]


def test_field_handlers_react_to_field_changes_of_any_cause() -> None:
    registry = OperatorRegistry()
    registry.append(changing(id="field", reason=None, field=("spec", "x"), field_needs_change=True))
    created = body(spec={"x": 1})
    assert changes(registry, Reason.CREATE, obj=created, old=None, new=created) == ["field"]
    unchanged = body(spec={"x": 1, "y": 2})
    assert changes(registry, Reason.UPDATE, obj=unchanged, old=created, new=unchanged) == []


def test_changing_handlers_are_filtered() -> None:
    registry = OperatorRegistry()
    registry.append(changing(fn1, labels={"app": "yes"}))
    registry.append(changing(fn2, when=lambda name, **_: name == "obj"))
    assert changes(registry, Reason.CREATE, obj=body(labels={"app": "yes"})) == ["fn1", "fn2"]
    assert changes(registry, Reason.CREATE, obj=body(labels={"app": "no"})) == ["fn2"]


def test_changing_handlers_can_be_excluded_by_id() -> None:
    registry = OperatorRegistry()
    registry.append(changing(fn1))
    registry.append(changing(fn2))
    assert changes(registry, Reason.CREATE, excluded={"fn1"}) == ["fn2"]


def test_changing_handlers_of_other_resources_are_ignored() -> None:
    registry = OperatorRegistry()
    registry.append(changing(fn1, selector=PODS_SELECTOR))
    assert changes(registry, Reason.CREATE) == []


def test_changing_filters_get_the_kwargs() -> None:
    registry = OperatorRegistry()
    registry.append(changing(fn1, when=lambda reason, **_: reason == "create"))
    found = registry.iter_changing_handlers(
        resource=KEX, reason=Reason.CREATE, body=body(), old=None, new=body(), diff=None,
        initial=False, kwargs=lambda: {"reason": Reason.CREATE},
    )  # fmt: skip
    assert ids(found) == ["fn1"]


# --------------------------------------------------------------------- other resource handlers


def test_watching_indexing_spawning_queries_apply_filters() -> None:
    registry = OperatorRegistry()
    for kind in [WatchingHandler, IndexingHandler, DaemonHandler]:
        registry.append(resource_handler(kind, fn=fn1, labels={"app": PRESENT}))
        registry.append(resource_handler(kind, fn=fn2, labels={"app": ABSENT}))
    labelled = body(labels={"app": "x"})
    queries = [
        registry.iter_watching_handlers,
        registry.iter_indexing_handlers,
        registry.iter_spawning_handlers,
    ]
    for query in queries:
        assert ids(query(resource=KEX, body=labelled, kwargs={})) == ["fn1"]
        assert ids(query(resource=KEX, body=body(), kwargs={})) == ["fn2"]
        assert ids(query(resource=PODS, body=body(), kwargs={})) == []


def test_spawning_handlers_can_be_excluded() -> None:
    registry = OperatorRegistry()
    registry.append(resource_handler(DaemonHandler, fn=fn1))
    registry.append(resource_handler(TimerHandler, fn=fn2))
    found = registry.iter_spawning_handlers(resource=KEX, body=body(), kwargs={}, excluded={"fn1"})
    assert ids(found) == ["fn2"]


def test_webhook_handlers_by_type_id_operation_subresource() -> None:
    registry = OperatorRegistry()

    def hook(id: str, **options: Any) -> WebhookHandler:
        options.setdefault("reason", WebhookType.VALIDATING)
        return WebhookHandler(fn=fn1, id=HandlerId(id), selector=KEX_SELECTOR, **options)

    registry.append(hook("any"))
    registry.append(hook("mutating", reason=WebhookType.MUTATING))
    registry.append(hook("creates", operations=frozenset({"CREATE"})))
    registry.append(hook("status", subresource="status"))
    registry.append(hook("star", subresource="*"))
    registry.append(hook("filtered", labels={"app": "yes"}))

    def find(**kw: Any) -> list[str]:
        return ids(registry.iter_webhook_handlers(resource=KEX, body=body(), kwargs={}, **kw))

    assert find(webhook_type=WebhookType.VALIDATING, operation="CREATE") == [
        "any",
        "creates",
        "star",
    ]
    assert find(webhook_type=WebhookType.VALIDATING, operation="UPDATE") == ["any", "star"]
    assert find(webhook_type=WebhookType.MUTATING) == ["mutating"]
    assert find(subresource="status") == ["status", "star"]
    assert find(subresource="scale") == ["star"]
    assert find(webhook_id="creates") == ["creates"]
    assert find(webhook_id="creates", operation="DELETE") == []
    assert ids(registry.iter_webhook_handlers(resource=PODS, body=body(), kwargs={})) == []


# -------------------------------------------------------------------------------- finalizers


def test_no_handlers_no_finalizer() -> None:
    assert not OperatorRegistry().requires_finalizer(resource=KEX, body=body(), kwargs={})


def test_mandatory_delete_handlers_require_a_finalizer() -> None:
    registry = OperatorRegistry()
    registry.append(changing(reason=Reason.DELETE, requires_finalizer=True))
    assert registry.requires_finalizer(resource=KEX, body=body(), kwargs={})
    assert not registry.requires_finalizer(resource=PODS, body=body(), kwargs={})


def test_optional_delete_and_other_handlers_do_not() -> None:
    registry = OperatorRegistry()
    registry.append(changing(fn1, reason=Reason.DELETE, requires_finalizer=False))
    registry.append(changing(fn2, reason=Reason.CREATE))
    registry.append(resource_handler(WatchingHandler))
    assert not registry.requires_finalizer(resource=KEX, body=body(), kwargs={})


def test_finalizer_follows_the_filters_of_the_current_state() -> None:
    registry = OperatorRegistry()
    registry.append(
        changing(
            reason=Reason.DELETE,
            requires_finalizer=True,
            labels={"app": "yes"},
            field=("spec", "x"),
            when=lambda memo, **_: memo == "ok",
        )
    )
    obj = body(labels={"app": "yes"}, spec={"x": 1})
    assert registry.requires_finalizer(resource=KEX, body=obj, kwargs={"memo": "ok"})
    assert not registry.requires_finalizer(resource=KEX, body=obj, kwargs={"memo": "no"})
    unlabelled = body(spec={"x": 1})
    assert not registry.requires_finalizer(resource=KEX, body=unlabelled, kwargs={"memo": "ok"})
    assert not registry.requires_finalizer(
        resource=KEX, body=body(labels={"app": "yes"}), kwargs={"memo": "ok"}
    )


def test_daemons_and_timers_require_a_finalizer_unless_excluded() -> None:
    registry = OperatorRegistry()
    registry.append(resource_handler(DaemonHandler, fn=fn1))
    registry.append(resource_handler(TimerHandler, fn=fn2, labels={"timer": PRESENT}))
    assert registry.requires_finalizer(resource=KEX, body=body(), kwargs={})
    assert not registry.requires_finalizer(resource=KEX, body=body(), kwargs={}, excluded={"fn1"})
    assert registry.requires_finalizer(
        resource=KEX, body=body(labels={"timer": "1"}), kwargs={}, excluded={"fn1"}
    )


@pytest.mark.parametrize(
    "filters",
    [
        {"when": lambda status, **_: bool(status)},
        {"annotations": {"example.com/x": PRESENT}},
        {"field": ("status", "phase")},
        {"labels": {"app": lambda value, **_: value == "yes"}},
    ],
    ids=["when", "annotations", "field", "label-callback"],
)
def test_the_finalizer_follows_more_than_the_labels_with_these_filters(
    filters: dict[str, Any],
) -> None:
    registry = OperatorRegistry()
    registry.append(changing(reason=Reason.DELETE, requires_finalizer=True, **filters))
    assert not registry.finalizer_follows_labels(KEX)


def test_the_finalizer_follows_the_labels_alone_with_plain_filters() -> None:
    registry = OperatorRegistry()
    assert registry.finalizer_follows_labels(KEX)
    registry.append(changing(fn1, reason=Reason.DELETE, requires_finalizer=True, labels={"a": "b"}))
    registry.append(resource_handler(TimerHandler, fn=fn2, labels={"timer": ABSENT}))
    # Handlers that do not need the finalizer may filter by anything.
    registry.append(changing(fn1, id="create", reason=Reason.CREATE, when=lambda **_: True))
    assert registry.finalizer_follows_labels(KEX)
    # Registered later: seen at once.
    registry.append(resource_handler(DaemonHandler, id="daemon", when=lambda **_: True))
    assert not registry.finalizer_follows_labels(KEX)


# ---------------------------------------------------------------------------- default registry


def test_default_registry_is_a_settable_singleton() -> None:
    original = get_default_registry()
    try:
        assert get_default_registry() is original
        replacement = OperatorRegistry()
        set_default_registry(replacement)
        assert get_default_registry() is replacement
    finally:
        set_default_registry(original)


def test_default_registry_rejects_non_registries() -> None:
    with pytest.raises(TypeError):
        set_default_registry(object())  # type: ignore[arg-type]


# ------------------------------------------------------------------------------- sub-handlers


def test_no_subregistry_outside_of_handlers() -> None:
    with pytest.raises(RuntimeError, match="only while"):
        current_subregistry()


def test_collecting_subhandlers_is_scoped() -> None:
    parent = changing(id="parent")
    with collect_subhandlers(parent) as subregistry:
        assert current_subregistry() is subregistry
        assert subregistry.parent is parent
        subregistry.append(build_subhandler(fn1, parent=parent, id="child"))
        with collect_subhandlers(subregistry.handlers[0]) as nested:
            assert current_subregistry() is nested
        assert current_subregistry() is subregistry
    with pytest.raises(LookupError):
        subregistry_var.get()
    assert subregistry.ids == ("parent/child",)
    assert len(subregistry) == 1
    assert list(subregistry) == list(subregistry.handlers)
    assert "parent/child" in repr(subregistry)


def test_subregistry_filters_and_deduplicates() -> None:
    parent = changing(id="parent")
    subregistry = SubRegistry(parent)
    subregistry.append(build_subhandler(fn1, parent=parent, id="a"))
    subregistry.append(build_subhandler(fn1, parent=parent, id="a"))  # declared twice
    subregistry.append(build_subhandler(fn2, parent=parent, id="b", labels={"app": "yes"}))
    assert changes(subregistry, Reason.CREATE) == ["parent/a"]
    assert changes(subregistry, Reason.CREATE, obj=body(labels={"app": "yes"})) == [
        "parent/a",
        "parent/b",
    ]
    assert changes(subregistry, Reason.UPDATE, excluded={"parent/a"}) == []


def test_subregistry_accepts_only_changing_handlers() -> None:
    subregistry = SubRegistry(changing())
    with pytest.raises(TypeError):
        subregistry.append(resource_handler(DaemonHandler))


async def test_subregistry_is_shared_with_sync_handlers_in_threads() -> None:
    parent = changing(id="parent")

    def sync_handler() -> None:
        current = current_subregistry()
        current.append(build_subhandler(fn1, parent=current.parent, id="from-thread"))

    with collect_subhandlers(parent) as subregistry:
        await trio.to_thread.run_sync(sync_handler)
    assert subregistry.ids == ("parent/from-thread",)


async def test_subregistries_of_concurrent_handlers_are_separate() -> None:
    results: dict[str, tuple[HandlerId, ...]] = {}

    async def run(parent_id: str) -> None:
        parent = changing(id=parent_id)
        with collect_subhandlers(parent) as subregistry:
            await trio.lowlevel.checkpoint()
            current_subregistry().append(build_subhandler(fn1, parent=parent, id="x"))
            await trio.lowlevel.checkpoint()
        results[parent_id] = subregistry.ids

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, "p1")
        nursery.start_soon(run, "p2")
    assert results == {"p1": ("p1/x",), "p2": ("p2/x",)}


def test_partial_subhandlers_are_named_after_the_function() -> None:
    parent = changing(id="parent")
    handler = build_subhandler(functools.partial(fn1, item=1), parent=parent)
    assert handler.id == "parent/fn1"


# ----------------------------------------------------------------- prematching (stealth mode)


def test_prematch_changing_takes_in_only_objects_that_some_filter_accepts() -> None:
    registry = OperatorRegistry()
    registry.append(changing(labels={"app": "x"}))
    registry.append(changing(fn=fn2, when=lambda spec, **_: spec.get("on") == "yes"))
    assert not registry.changing_unfiltered(KEX)
    assert not registry.prematch_changing(resource=KEX, body=body(), kwargs={"spec": {}})
    assert registry.prematch_changing(resource=KEX, body=body(labels={"app": "x"}), kwargs={})
    on = {"on": "yes"}
    assert registry.prematch_changing(resource=KEX, body=body(spec=on), kwargs={"spec": on})


def test_an_unfiltered_changing_handler_takes_in_every_object_once_registered() -> None:
    registry = OperatorRegistry()
    registry.append(changing(labels={"app": "x"}))
    assert not registry.prematch_changing(resource=KEX, body=body(), kwargs={})
    registry.append(changing(fn=fn2))  # registered after the first answer was cached
    assert registry.changing_unfiltered(KEX)
    assert registry.prematch_changing(resource=KEX, body=body(), kwargs={})
