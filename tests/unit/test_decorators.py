"""The public decorators: what they register, their signatures, and the options they reject."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import trioperator as kopf
from trioperator._engine.handlers import (
    Activity,
    ActivityHandler,
    ChangingHandler,
    DaemonHandler,
    IndexingHandler,
    SpawningHandler,
    TimerHandler,
    WatchingHandler,
    WebhookHandler,
    WebhookType,
)
from trioperator._engine.registry import collect_subhandlers
from trioperator._engine.selectors import Selector


@pytest.fixture
def registry() -> Iterator[kopf.OperatorRegistry]:
    """A fresh default registry, so that decorators without registry= land there."""
    original = kopf.get_default_registry()
    fresh = kopf.OperatorRegistry()
    kopf.set_default_registry(fresh)
    try:
        yield fresh
    finally:
        kopf.set_default_registry(original)


def fn(**_: Any) -> None:
    pass


def only(registry: kopf.OperatorRegistry, kind: type[Any]) -> Any:
    handlers = registry.get_handlers(kind)
    assert len(handlers) == 1, handlers
    return handlers[0]


# -------------------------------------------------------------------------------- signatures

SELECTOR_ARGS = ["arg1", "arg2", "arg3"]
SELECTOR_KWARGS = ["group", "version", "kind", "plural", "singular", "shortcut", "category"]
BEHAVIOUR = ["id", "param", "errors", "timeout", "retries", "backoff"]
FILTERS = ["labels", "annotations", "when", "field", "value"]

EXPECTED_SIGNATURES: dict[str, list[str]] = {
    "startup": [*BEHAVIOUR, "registry"],
    "cleanup": [*BEHAVIOUR, "registry"],
    "login": [*BEHAVIOUR, "registry"],
    "probe": [*BEHAVIOUR, "registry"],
    "validate": [
        *SELECTOR_ARGS, *SELECTOR_KWARGS, "id", "param", "operation", "operations", "subresource",
        "persistent", "side_effects", "ignore_failures", *FILTERS, "registry",
    ],
    "mutate": [
        *SELECTOR_ARGS, *SELECTOR_KWARGS, "id", "param", "operation", "operations", "subresource",
        "persistent", "side_effects", "ignore_failures", *FILTERS, "registry",
    ],
    "resume": [*SELECTOR_ARGS, *SELECTOR_KWARGS, *BEHAVIOUR, "deleted", *FILTERS, "registry"],
    "create": [*SELECTOR_ARGS, *SELECTOR_KWARGS, *BEHAVIOUR, *FILTERS, "registry"],
    "update": [*SELECTOR_ARGS, *SELECTOR_KWARGS, *BEHAVIOUR, *FILTERS, "old", "new", "registry"],
    "delete": [*SELECTOR_ARGS, *SELECTOR_KWARGS, *BEHAVIOUR, "optional", *FILTERS, "registry"],
    "field": [*SELECTOR_ARGS, *SELECTOR_KWARGS, *BEHAVIOUR, *FILTERS, "old", "new", "registry"],
    "index": [*SELECTOR_ARGS, *SELECTOR_KWARGS, *BEHAVIOUR, *FILTERS, "registry"],
    "event": [*SELECTOR_ARGS, *SELECTOR_KWARGS, "id", "param", *FILTERS, "registry"],
    "daemon": [
        *SELECTOR_ARGS, *SELECTOR_KWARGS, *BEHAVIOUR, "initial_delay", "cancellation_backoff",
        "cancellation_timeout", "cancellation_polling", *FILTERS, "registry",
    ],
    "timer": [
        *SELECTOR_ARGS, *SELECTOR_KWARGS, *BEHAVIOUR, "interval", "initial_delay", "sharp", "idle",
        *FILTERS, "registry",
    ],
    "subhandler": [*BEHAVIOUR, *FILTERS, "old", "new"],
    "register": ["fn", *BEHAVIOUR, "labels", "annotations", "when"],
}  # fmt: skip


def _with_flavor(parameters: list[str]) -> list[str]:
    """trioperator's one extension of Kopf's signatures: ``flavor=``, before ``registry=``."""
    if parameters[-1] == "registry":
        return [*parameters[:-1], "flavor", "registry"]
    return [*parameters, "flavor"]


EXPECTED_SIGNATURES = {name: _with_flavor(params) for name, params in EXPECTED_SIGNATURES.items()}


@pytest.mark.parametrize("name", sorted(EXPECTED_SIGNATURES))
def test_signatures_are_kopfs(name: str) -> None:
    parameters = inspect.signature(getattr(kopf.on, name)).parameters
    assert list(parameters) == EXPECTED_SIGNATURES[name]
    for param in parameters.values():
        if param.name in SELECTOR_ARGS:
            assert param.kind is inspect.Parameter.POSITIONAL_ONLY
            assert param.default is None
        elif param.name == "fn":
            assert param.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        elif name == "field" and param.name == "field":
            assert param.kind is inspect.Parameter.KEYWORD_ONLY
            assert param.default is inspect.Parameter.empty  # mandatory
        else:
            assert param.kind is inspect.Parameter.KEYWORD_ONLY, param
            assert param.default is None, param


def test_top_level_aliases() -> None:
    assert kopf.daemon is kopf.on.daemon
    assert kopf.timer is kopf.on.timer
    assert kopf.index is kopf.on.index
    assert kopf.subhandler is kopf.on.subhandler
    assert kopf.register is kopf.on.register


# -------------------------------------------------------------------------------- activities


@pytest.mark.parametrize(
    ("decorator", "activity"),
    [
        (kopf.on.startup, Activity.STARTUP),
        (kopf.on.cleanup, Activity.CLEANUP),
        (kopf.on.login, Activity.AUTHENTICATION),
        (kopf.on.probe, Activity.PROBE),
    ],
)
def test_activity_decorators(
    registry: kopf.OperatorRegistry, decorator: Callable[..., Any], activity: Activity
) -> None:
    result = decorator(
        id="x", param=1, errors=kopf.ErrorsMode.PERMANENT, timeout=2, retries=3, backoff=4.5
    )(fn)
    assert result is fn
    handler = only(registry, ActivityHandler)
    assert handler.fn is fn
    assert handler.activity is activity
    assert (handler.id, handler.param, handler.errors) == ("x", 1, kopf.ErrorsMode.PERMANENT)
    assert (handler.timeout, handler.retries, handler.backoff) == (2, 3, 4.5)
    assert registry.get_activity_handlers(activity) == [handler]


def test_activity_defaults(registry: kopf.OperatorRegistry) -> None:
    kopf.on.startup()(fn)
    handler = only(registry, ActivityHandler)
    assert handler.id == "fn"
    assert handler.param is None
    assert handler.errors is None
    assert handler.timeout is None
    assert handler.retries is None
    assert handler.backoff is None


def test_explicit_registry_is_used(registry: kopf.OperatorRegistry) -> None:
    other = kopf.OperatorRegistry()
    kopf.on.startup(registry=other)(fn)
    kopf.on.create("pods", registry=other)(fn)
    assert len(other.get_handlers(ActivityHandler)) == 1
    assert len(other.get_handlers(ChangingHandler)) == 1
    assert registry.get_handlers(ActivityHandler) == ()


# ------------------------------------------------------------------------- resource handlers


def test_event(registry: kopf.OperatorRegistry) -> None:
    def when(**_: Any) -> bool:
        return True

    result = kopf.on.event(
        "kopf.dev", "v1", "kopfexamples", id="ev", param="p", labels={"a": "b"},
        annotations={"c": kopf.PRESENT}, when=when, field="spec.x", value=kopf.ABSENT,
    )(fn)  # fmt: skip
    assert result is fn
    handler = only(registry, WatchingHandler)
    assert handler.selector == Selector("kopf.dev", "v1", "kopfexamples")
    assert handler.id == "ev/spec.x"
    assert handler.param == "p"
    assert dict(handler.labels) == {"a": "b"}
    assert dict(handler.annotations) == {"c": kopf.PRESENT}
    assert handler.when is when
    assert handler.field == ("spec", "x")
    assert handler.value is kopf.ABSENT
    assert handler.errors is None


def test_create(registry: kopf.OperatorRegistry) -> None:
    kopf.on.create("kopfexamples", retries=2)(fn)
    handler = only(registry, ChangingHandler)
    assert handler.reason is kopf.Reason.CREATE
    assert handler.selector == Selector("kopfexamples")
    assert handler.id == "fn"
    assert handler.retries == 2
    assert not handler.initial
    assert not handler.requires_finalizer
    assert not handler.field_needs_change


def test_update(registry: kopf.OperatorRegistry) -> None:
    kopf.on.update("kopfexamples", field=["spec", "x"], old="a", new=kopf.PRESENT)(fn)
    handler = only(registry, ChangingHandler)
    assert handler.reason is kopf.Reason.UPDATE
    assert handler.id == "fn/spec.x"
    assert handler.field == ("spec", "x")
    assert (handler.old, handler.new) == ("a", kopf.PRESENT)
    assert handler.field_needs_change is True


@pytest.mark.parametrize(("optional", "requires"), [(None, True), (False, True), (True, False)])
def test_delete(registry: kopf.OperatorRegistry, optional: bool | None, requires: bool) -> None:
    kopf.on.delete("kopfexamples", optional=optional)(fn)
    handler = only(registry, ChangingHandler)
    assert handler.reason is kopf.Reason.DELETE
    assert handler.requires_finalizer is requires


@pytest.mark.parametrize("deleted", [None, True, False])
def test_resume(registry: kopf.OperatorRegistry, deleted: bool | None) -> None:
    kopf.on.resume("kopfexamples", deleted=deleted)(fn)
    handler = only(registry, ChangingHandler)
    assert handler.reason is None
    assert handler.initial is True
    assert handler.deleted is deleted
    assert not handler.field_needs_change


def test_field(registry: kopf.OperatorRegistry) -> None:
    kopf.on.field("kopfexamples", field="spec.x", value="v", id="custom")(fn)
    handler = only(registry, ChangingHandler)
    assert handler.reason is None
    assert handler.id == "custom/spec.x"
    assert handler.field == ("spec", "x")
    assert handler.value == "v"
    assert handler.field_needs_change is True


def test_one_function_for_several_fields(registry: kopf.OperatorRegistry) -> None:
    kopf.on.update("kex", field="spec.field", param="fld")(fn)
    kopf.on.update("kex", field="spec.items", param="itm")(fn)
    handlers = registry.get_handlers(ChangingHandler)
    assert [(h.id, h.param) for h in handlers] == [
        ("fn/spec.field", "fld"),
        ("fn/spec.items", "itm"),
    ]


# The ids Kopf 1.45 gives: the field is a suffix of every resource handler's id except an
# index's, whose id is also the kwarg name other handlers receive the index under.
_ANY_KOPF: Any = kopf
FIELD_ID_CASES = [
    (_ANY_KOPF.on.create, "fn/spec.x"),
    (_ANY_KOPF.on.update, "fn/spec.x"),
    (_ANY_KOPF.on.delete, "fn/spec.x"),
    (_ANY_KOPF.on.resume, "fn/spec.x"),
    (_ANY_KOPF.on.field, "fn/spec.x"),
    (_ANY_KOPF.on.event, "fn/spec.x"),
    (_ANY_KOPF.on.daemon, "fn/spec.x"),
    (_ANY_KOPF.on.timer, "fn/spec.x"),
    (_ANY_KOPF.on.validate, "fn/spec.x"),
    (_ANY_KOPF.on.mutate, "fn/spec.x"),
    (_ANY_KOPF.index, "fn"),
]


@pytest.mark.parametrize(("decorator", "expected"), FIELD_ID_CASES)
def test_ids_with_field_as_kopf_forms_them(
    registry: kopf.OperatorRegistry, decorator: Callable[..., Any], expected: str
) -> None:
    decorator("kopfexamples", field="spec.x", value=kopf.PRESENT)(fn)
    decorator("kopfexamples", field="spec.x", value=kopf.PRESENT, id="own")(fn)
    kinds = (ChangingHandler, WatchingHandler, DaemonHandler, TimerHandler, WebhookHandler)
    ids = [
        handler.id for kind in (*kinds, IndexingHandler) for handler in registry.get_handlers(kind)
    ]
    assert ids == [expected, expected.replace("fn", "own", 1)]


def kex_by_key(**_: Any) -> None:
    pass


def test_index_with_field_is_named_after_the_function(registry: kopf.OperatorRegistry) -> None:
    kopf.index("kopfexamples", field="spec.key", value=kopf.PRESENT)(kex_by_key)
    assert only(registry, IndexingHandler).id == "kex_by_key"


def test_stacked_decorators(registry: kopf.OperatorRegistry) -> None:
    @kopf.on.resume("kopfexamples")
    @kopf.on.create("kopfexamples")
    def handler(**_: Any) -> None:
        pass

    reasons = [h.reason for h in registry.get_handlers(ChangingHandler)]
    assert reasons == [kopf.Reason.CREATE, None]
    assert callable(handler)


def test_index(registry: kopf.OperatorRegistry) -> None:
    kopf.index("pods", errors=kopf.ErrorsMode.PERMANENT, labels={"x": kopf.ABSENT})(fn)
    handler = only(registry, IndexingHandler)
    assert handler.selector == Selector("pods")
    assert handler.errors is kopf.ErrorsMode.PERMANENT
    assert dict(handler.labels) == {"x": kopf.ABSENT}


def test_daemon(registry: kopf.OperatorRegistry) -> None:
    kopf.daemon(
        "kopfexamples", initial_delay=1.5, cancellation_backoff=2, cancellation_timeout=3,
        cancellation_polling=4, backoff=5,
    )(fn)  # fmt: skip
    handler = only(registry, DaemonHandler)
    assert isinstance(handler, DaemonHandler)
    assert issubclass(DaemonHandler, SpawningHandler)
    assert handler.requires_finalizer is True
    assert handler.initial_delay == 1.5
    assert (handler.cancellation_backoff, handler.cancellation_timeout) == (2, 3)
    assert handler.cancellation_polling == 4
    assert handler.backoff == 5


def test_daemon_with_a_callable_initial_delay(registry: kopf.OperatorRegistry) -> None:
    def delay(**_: Any) -> float:
        return 1.0

    kopf.on.daemon("kopfexamples", initial_delay=delay)(fn)
    assert only(registry, DaemonHandler).initial_delay is delay


def test_timer(registry: kopf.OperatorRegistry) -> None:
    kopf.timer("kopfexamples", interval=10, initial_delay=60, sharp=True, idle=600)(fn)
    handler = only(registry, TimerHandler)
    assert handler.requires_finalizer is True
    assert (handler.interval, handler.initial_delay, handler.sharp, handler.idle) == (
        10,
        60,
        True,
        600,
    )


def test_timer_without_schedule_is_allowed(registry: kopf.OperatorRegistry) -> None:
    kopf.on.timer("kopfexamples")(fn)
    assert only(registry, TimerHandler).interval is None


@pytest.mark.parametrize(
    ("decorator", "reason"),
    [(kopf.on.validate, WebhookType.VALIDATING), (kopf.on.mutate, WebhookType.MUTATING)],
)
def test_webhooks(
    registry: kopf.OperatorRegistry, decorator: Callable[..., Any], reason: WebhookType
) -> None:
    decorator(
        "kopfexamples", id="hook", param=1, operations=["CREATE", "UPDATE"], subresource="status",
        persistent=True, side_effects=True, ignore_failures=True, field="spec.x",
    )(fn)  # fmt: skip
    handler = only(registry, WebhookHandler)
    assert handler.reason is reason
    assert handler.id == "hook/spec.x"
    assert handler.operations == {"CREATE", "UPDATE"}
    assert handler.subresource == "status"
    assert (handler.persistent, handler.side_effects, handler.ignore_failures) == (True,) * 3


def test_webhook_defaults(registry: kopf.OperatorRegistry) -> None:
    kopf.on.validate("kopfexamples")(fn)
    handler = only(registry, WebhookHandler)
    assert handler.operations is None
    assert handler.subresource is None
    assert (handler.persistent, handler.side_effects, handler.ignore_failures) == (False,) * 3


@pytest.mark.parametrize("operations", [["*"], ["CREATE", "*"]])
def test_webhook_star_means_all_operations(
    registry: kopf.OperatorRegistry, operations: list[str]
) -> None:
    kopf.on.validate("kopfexamples", operations=operations)(fn)  # type: ignore[arg-type]
    assert only(registry, WebhookHandler).operations is None


def test_webhook_operation_is_deprecated_but_works(registry: kopf.OperatorRegistry) -> None:
    with pytest.warns(DeprecationWarning, match="operations=") as record:
        kopf.on.validate("kopfexamples", operation="DELETE")(fn)
    assert record[0].filename == __file__
    assert only(registry, WebhookHandler).operations == {"DELETE"}


def test_none_label_filters_are_deprecated_presence_checks(
    registry: kopf.OperatorRegistry,
) -> None:
    with pytest.warns(DeprecationWarning, match="PRESENT") as record:
        kopf.on.create("kopfexamples", labels={"a": None})(fn)
    assert record[0].filename == __file__
    assert dict(only(registry, ChangingHandler).labels) == {"a": kopf.PRESENT}


def test_filters_are_copied_at_decoration(registry: kopf.OperatorRegistry) -> None:
    labels = {"a": "b"}
    kopf.on.create("kopfexamples", labels=labels)(fn)
    labels["c"] = "d"
    assert dict(only(registry, ChangingHandler).labels) == {"a": "b"}


@pytest.mark.parametrize(
    "decorator",
    [kopf.on.event, kopf.on.create, kopf.on.update, kopf.on.delete, kopf.on.resume, kopf.index,
     kopf.daemon, kopf.timer, kopf.on.validate, kopf.on.mutate],
)  # fmt: skip
def test_selector_forms_reach_the_handler(
    registry: kopf.OperatorRegistry, decorator: Callable[..., Any]
) -> None:
    def selector_fn(resource: kopf.Resource) -> bool:
        return True

    decorator("kopf.dev/v1", "kopfexamples")(fn)
    decorator(kopf.EVERYTHING)(fn)
    decorator(selector_fn, group="kopf.dev")(fn)
    decorator(plural="pods", version="v1")(fn)
    selectors = [h.selector for h in registry.get_handlers(type(_first(registry)))]
    assert selectors == [
        Selector("kopf.dev", "v1", "kopfexamples"),
        Selector(kopf.EVERYTHING),
        Selector(selector_fn, group="kopf.dev"),
        Selector(plural="pods", version="v1"),
    ]


def _first(registry: kopf.OperatorRegistry) -> Any:
    for kind in [WatchingHandler, ChangingHandler, IndexingHandler, SpawningHandler]:
        if registry.get_handlers(kind):
            return registry.get_handlers(kind)[0]
    return registry.get_handlers(WebhookHandler)[0]


# ------------------------------------------------------------------------------ sub-handlers


def test_subhandler_inside_a_handler(registry: kopf.OperatorRegistry) -> None:
    kopf.on.update("kopfexamples", id="parent")(fn)
    parent = only(registry, ChangingHandler)

    with collect_subhandlers(parent) as subregistry:
        for item in ["a", "b"]:

            @kopf.subhandler(id=f"item-{item}", field="spec.x", new="y", retries=1)
            def child(item: str = item, **_: Any) -> None:
                pass

        def other(**_: Any) -> None:
            pass

        assert kopf.register(other, param=5) is other

    handlers = subregistry.handlers
    assert [h.id for h in handlers] == [
        "parent/item-a",
        "parent/item-b",
        f"parent/{other.__qualname__}",  # ids of inner functions are their qualified names
    ]
    first = handlers[0]
    assert first.selector is None
    assert first.reason is None
    assert first.field == ("spec", "x")  # but no field suffix in the id
    assert first.new == "y"
    assert first.retries == 1
    assert first.field_needs_change is True  # inherited from the update parent
    assert handlers[2].param == 5
    assert registry.get_handlers(ChangingHandler) == (parent,)  # nothing leaks upwards


def test_subhandlers_of_subhandlers_nest_their_ids() -> None:
    parent = ChangingHandler(fn=fn, id=kopf.HandlerId("p"), reason=kopf.Reason.CREATE)
    with collect_subhandlers(parent) as outer:
        kopf.register(fn, id="c")
    with collect_subhandlers(outer.handlers[0]) as inner:
        kopf.register(fn, id="g")
    assert inner.ids == ("p/c/g",)


def test_subhandler_old_new_need_an_update_parent() -> None:
    parent = ChangingHandler(fn=fn, id=kopf.HandlerId("p"), reason=kopf.Reason.CREATE)
    with collect_subhandlers(parent), pytest.raises(TypeError, match="old=/new="):
        kopf.subhandler(field="spec.x", old="a")(fn)


def test_subhandlers_outside_of_handlers_are_rejected() -> None:
    with pytest.raises(RuntimeError, match="only while"):
        kopf.subhandler()(fn)
    with pytest.raises(RuntimeError, match="only while"):
        kopf.register(fn)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"value": "x"}, TypeError),
        ({"retries": -1}, ValueError),
        ({"labels": ["a"]}, TypeError),
        ({"when": "yes"}, TypeError),
    ],
)
def test_subhandler_options_are_validated(options: dict[str, Any], error: type[Exception]) -> None:
    parent = ChangingHandler(fn=fn, id=kopf.HandlerId("p"), reason=kopf.Reason.UPDATE)
    with collect_subhandlers(parent), pytest.raises(error):
        kopf.subhandler(**options)(fn)


# ---------------------------------------------------------------------------- invalid options


# Deliberately wrong calls go through untyped references, so that type checkers let them be.
ON: Any = kopf.on
KOPF: Any = kopf

INVALID: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    ("unknown kwarg", lambda: ON.create("pods", nonexistent=1), TypeError, "nonexistent"),
    ("old= on create", lambda: ON.create("pods", field="spec", old=1), TypeError, "old"),
    ("new= on delete", lambda: ON.delete("pods", new=1), TypeError, "new"),
    ("value without field", lambda: ON.create("pods", value="x"), TypeError, "field="),
    ("old without field", lambda: ON.update("pods", old="x"), TypeError, "field="),
    ("value with old", lambda: ON.update("pods", field="a", value=1, old=2), TypeError,
     "not both"),
    ("field= is mandatory", lambda: ON.field("pods"), TypeError, "field"),
    ("field=None", lambda: ON.field("pods", field=None), TypeError, "field"),
    ("empty field", lambda: ON.field("pods", field=""), TypeError, "field"),
    ("bad field", lambda: ON.create("pods", field="spec..x"), ValueError, "empty keys"),
    ("non-callable when", lambda: ON.create("pods", when=True), TypeError, "when="),
    ("labels not a mapping", lambda: ON.create("pods", labels=["a"]), TypeError, "labels="),
    ("label value int", lambda: ON.event("pods", labels={"a": 1}), TypeError, "labels="),
    ("annotation key int", lambda: KOPF.daemon("pods", annotations={1: "a"}), TypeError,
     "annotations="),
    ("negative retries", lambda: ON.create("pods", retries=-1), ValueError, "retries="),
    ("float retries", lambda: ON.create("pods", retries=1.5), TypeError, "retries="),
    ("bool retries", lambda: ON.startup(retries=True), TypeError, "retries="),
    ("negative timeout", lambda: ON.update("pods", timeout=-1), ValueError, "timeout="),
    ("NaN backoff", lambda: KOPF.index("pods", backoff=float("nan")), ValueError, "NaN"),
    ("str backoff", lambda: ON.probe(backoff="1"), TypeError, "backoff="),
    ("errors as str", lambda: ON.login(errors="ignored"), TypeError, "ErrorsMode"),
    ("empty id", lambda: ON.cleanup(id=""), ValueError, "id="),
    ("int id", lambda: ON.event("pods", id=1), TypeError, "id="),
    ("zero interval", lambda: KOPF.timer("pods", interval=0), ValueError, "interval="),
    ("negative interval", lambda: KOPF.timer("pods", interval=-5), ValueError, "interval="),
    ("negative idle", lambda: KOPF.timer("pods", idle=-5), ValueError, "idle="),
    ("callable idle", lambda: KOPF.timer("pods", idle=lambda: 1), TypeError, "idle="),
    ("sharp not bool", lambda: KOPF.timer("pods", sharp="yes"), TypeError, "sharp="),
    ("negative delay", lambda: KOPF.timer("pods", initial_delay=-1), ValueError,
     "initial_delay="),
    ("negative cancellation", lambda: KOPF.daemon("pods", cancellation_timeout=-1), ValueError,
     "cancellation_timeout="),
    ("zero polling", lambda: KOPF.daemon("pods", cancellation_polling=0), ValueError,
     "cancellation_polling="),
    ("deleted not bool", lambda: ON.resume("pods", deleted="yes"), TypeError, "deleted="),
    ("optional not bool", lambda: ON.delete("pods", optional=1), TypeError, "optional="),
    ("bad operation", lambda: ON.validate("pods", operations=["PATCH"]), ValueError,
     "PATCH"),
    ("operations as str", lambda: ON.mutate("pods", operations="CREATE"), TypeError,
     "collection"),
    ("empty operations", lambda: ON.mutate("pods", operations=[]), ValueError, "empty"),
    ("bad subresource", lambda: ON.mutate("pods", subresource=""), TypeError,
     "subresource="),
    ("persistent not bool", lambda: ON.validate("pods", persistent="y"), TypeError,
     "persistent="),
    ("no resource", lambda: ON.create(), TypeError, "must be specified"),
    ("positional and keyword group", lambda: ON.create("kopf.dev", "kex", group="x"),
     TypeError, "both"),
    ("bad registry", lambda: ON.create("pods", registry={}), TypeError, "registry="),
    ("errors on event", lambda: ON.event("pods", errors=kopf.ErrorsMode.IGNORED),
     TypeError, "errors"),
    ("retries on validate", lambda: ON.validate("pods", retries=1), TypeError, "retries"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("factory", "error", "message"),
    [pytest.param(f, e, m, id=name) for name, f, e, m in INVALID],
)
def test_invalid_options_are_rejected_at_decoration(
    registry: kopf.OperatorRegistry,
    factory: Callable[[], Any],
    error: type[Exception],
    message: str,
) -> None:
    with pytest.raises(error, match=message):
        factory()
    assert registry.get_handlers(ChangingHandler) == ()


def test_non_callables_cannot_be_decorated(registry: kopf.OperatorRegistry) -> None:
    with pytest.raises(TypeError, match="callable"):
        ON.create("pods")("not a function")
    assert registry.get_handlers(ChangingHandler) == ()
