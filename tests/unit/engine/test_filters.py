"""Handler filters: labels/annotations, field/value, old/new, when, callback helpers."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Mapping
from typing import Any

import pytest
from trioperator._client.resources import Resource
from trioperator._engine.bodies import Body
from trioperator._engine.filters import (
    ABSENT,
    PRESENT,
    all_,
    any_,
    match,
    none_,
    not_,
    parse_field,
    prematch,
    resolve_field,
)
from trioperator._engine.handlers import (
    ChangingHandler,
    DaemonHandler,
    ResourceHandler,
    WatchingHandler,
)
from trioperator._engine.ids import HandlerId
from trioperator._engine.reasons import Reason
from trioperator._engine.selectors import Selector


def fn(**_: Any) -> None:
    pass


def watching(**options: Any) -> WatchingHandler:
    return WatchingHandler(fn=fn, id=HandlerId("fn"), **options)


def creating(**options: Any) -> ChangingHandler:
    return ChangingHandler(fn=fn, id=HandlerId("fn"), reason=Reason.CREATE, **options)


def updating(**options: Any) -> ChangingHandler:
    return ChangingHandler(
        fn=fn, id=HandlerId("fn"), reason=Reason.UPDATE, field_needs_change=True, **options
    )


def body_with(
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "obj"}
    if labels is not None:
        metadata["labels"] = dict(labels)
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    return {"metadata": metadata, "spec": dict(spec or {})}


KWARGS = {"name": "obj", "extra": 123}


def check(handler: ResourceHandler, body: Any, **more: Any) -> bool:
    return match(handler, body=body, kwargs=KWARGS, **more)


# -------------------------------------------------------------------------------- markers


def test_markers_have_short_reprs() -> None:
    assert repr(PRESENT) == str(PRESENT) == "PRESENT"
    assert repr(ABSENT) == str(ABSENT) == "ABSENT"


def test_markers_stay_singletons_across_copies_and_pickles() -> None:
    assert copy.copy(PRESENT) is PRESENT
    assert copy.deepcopy(ABSENT) is ABSENT
    assert pickle.loads(pickle.dumps(PRESENT)) is PRESENT
    assert PRESENT is not ABSENT


# ------------------------------------------------------------------------ field utilities


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (None, None),
        ("", None),
        ((), None),
        ("spec", ("spec",)),
        ("spec.field", ("spec", "field")),
        (["spec", "field"], ("spec", "field")),
        (("spec", "a.b"), ("spec", "a.b")),
    ],
)
def test_parse_field(spec: Any, expected: Any) -> None:
    assert parse_field(spec) == expected


@pytest.mark.parametrize(("spec", "error"), [("spec..x", ValueError), (123, TypeError)])
def test_parse_field_rejects_garbage(spec: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        parse_field(spec)


def test_resolve_field_through_mappings_and_views() -> None:
    raw = {"spec": {"a": {"b": 1}, "list": [1, 2], "none": None}}
    assert resolve_field(raw, ("spec", "a", "b")) == 1
    assert resolve_field(Body(raw), ("spec", "a", "b")) == 1
    assert resolve_field(raw, ("spec", "missing")) is None
    assert resolve_field(raw, ("spec", "list", "0")) is None  # lists are not descended into
    assert resolve_field(None, ("spec",)) is None


# ------------------------------------------------------------------- metadata filters


@pytest.mark.parametrize("stanza", ["labels", "annotations"])
@pytest.mark.parametrize(
    ("criterion", "content", "expected"),
    [
        ("value", {"key": "value"}, True),
        ("value", {"key": "other"}, False),
        ("value", {}, False),
        ("", {"key": ""}, True),
        (PRESENT, {"key": "value"}, True),
        (PRESENT, {"key": ""}, True),  # empty strings are values like any other
        (PRESENT, {}, False),
        (ABSENT, {}, True),
        (ABSENT, {"key": ""}, False),
        (ABSENT, {"other": "x"}, True),
    ],
)
def test_metadata_criteria(stanza: str, criterion: Any, content: Any, expected: bool) -> None:
    handler = watching(**{stanza: {"key": criterion}})
    assert check(handler, body_with(**{stanza: content})) is expected


@pytest.mark.parametrize("stanza", ["labels", "annotations"])
def test_metadata_absent_stanza_means_nothing_is_present(stanza: str) -> None:
    assert check(watching(**{stanza: {"key": ABSENT}}), {"metadata": {}}) is True
    assert check(watching(**{stanza: {"key": PRESENT}}), {}) is False


@pytest.mark.parametrize("stanza", ["labels", "annotations"])
def test_metadata_criteria_are_all_required(stanza: str) -> None:
    handler = watching(**{stanza: {"a": "1", "b": PRESENT, "c": ABSENT}})
    assert check(handler, body_with(**{stanza: {"a": "1", "b": "x"}})) is True
    assert check(handler, body_with(**{stanza: {"a": "1", "b": "x", "c": "x"}})) is False
    assert check(handler, body_with(**{stanza: {"a": "2", "b": "x"}})) is False


@pytest.mark.parametrize("stanza", ["labels", "annotations"])
def test_metadata_callbacks_get_the_value_and_the_kwargs(stanza: str) -> None:
    calls: list[tuple[Any, dict[str, Any]]] = []

    def criterion(value: Any, /, **kwargs: Any) -> bool:
        calls.append((value, kwargs))
        return bool(value == "yes")

    handler = watching(**{stanza: {"key": criterion}})
    assert check(handler, body_with(**{stanza: {"key": "yes"}})) is True
    assert check(handler, body_with(**{stanza: {"key": "no"}})) is False
    assert check(handler, body_with(**{stanza: {}})) is False
    assert calls == [("yes", KWARGS), ("no", KWARGS), (None, KWARGS)]


def test_metadata_filters_work_on_body_views() -> None:
    handler = watching(labels={"key": "value"})
    assert check(handler, Body(body_with(labels={"key": "value"}))) is True


# ------------------------------------------------------------- field filters (current state)


@pytest.mark.parametrize(
    ("value", "spec", "expected"),
    [
        (None, {"field": "x"}, True),  # field= alone: the field must be present
        (None, {"field": None}, True),
        (None, {}, False),
        (PRESENT, {"field": "x"}, True),
        (PRESENT, {}, False),
        (ABSENT, {}, True),
        (ABSENT, {"field": "x"}, False),
        ("x", {"field": "x"}, True),
        ("x", {"field": "y"}, False),
        ("x", {}, False),
        (0, {"field": 0}, True),
        ({"a": 1}, {"field": {"a": 1}}, True),
    ],
)
def test_field_value_on_the_current_state(value: Any, spec: Any, expected: bool) -> None:
    for handler in [
        watching(field=("spec", "field"), value=value),
        DaemonHandler(fn=fn, id=HandlerId("fn"), field=("spec", "field"), value=value),
        creating(field=("spec", "field"), value=value),
    ]:
        assert check(handler, body_with(spec=spec)) is expected, handler


def test_field_through_non_mapping_intermediates_is_absent() -> None:
    handler = watching(field=("spec", "field", "sub"), value=ABSENT)
    assert check(handler, body_with(spec={"field": "scalar"})) is True


def test_field_value_callback_gets_none_for_absent_values() -> None:
    seen: list[Any] = []

    def criterion(value: Any, /, **kwargs: Any) -> bool:
        seen.append(value)
        assert kwargs == KWARGS
        return True

    handler = watching(field=("spec", "field"), value=criterion)
    assert check(handler, body_with(spec={"field": 5})) is True
    assert check(handler, body_with(spec={})) is True
    assert seen == [5, None]


def test_non_update_changing_handlers_ignore_the_old_state() -> None:
    # Creation has no "old" state: an ABSENT filter must look at the object as it is now.
    handler = creating(field=("spec", "field"), value=ABSENT)
    body = body_with(spec={"field": "x"})
    assert check(handler, body, old=None, new=body) is False


# ---------------------------------------------------------------- update handlers (changes)


def states(old: Any, new: Any) -> dict[str, Any]:
    """old/new whole-object states with spec.field set to the values (or absent if ABSENT)."""
    old_body = body_with(spec={} if old is ABSENT else {"field": old})
    new_body = body_with(spec={} if new is ABSENT else {"field": new})
    return {"body": new_body, "old": old_body, "new": new_body}


def check_change(handler: ChangingHandler, old: Any, new: Any) -> bool:
    return match(handler, kwargs=KWARGS, **states(old, new))


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("a", "b", True),
        (ABSENT, "b", True),
        ("a", ABSENT, True),
        ("a", "a", False),  # the field is not affected
        (ABSENT, ABSENT, False),
        (None, "b", True),
    ],
)
def test_update_field_needs_a_change(old: Any, new: Any, expected: bool) -> None:
    assert check_change(updating(field=("spec", "field")), old, new) is expected


def test_update_without_field_has_no_change_requirement() -> None:
    handler = updating()
    assert check_change(handler, "a", "a") is True


@pytest.mark.parametrize(
    ("value", "old", "new", "expected"),
    [
        ("x", "x", "y", True),  # the criterion was satisfied before: leaving it counts
        ("x", "y", "x", True),  # ... and reaching it counts
        ("x", "y", "z", False),
        (PRESENT, ABSENT, "y", True),
        (PRESENT, "y", ABSENT, True),
        (ABSENT, ABSENT, "y", True),
        (ABSENT, "y", "z", False),
    ],
)
def test_update_value_accepts_either_side(value: Any, old: Any, new: Any, expected: bool) -> None:
    assert check_change(updating(field=("spec", "field"), value=value), old, new) is expected


@pytest.mark.parametrize(
    ("criteria", "old", "new", "expected"),
    [
        ({"old": "x", "new": "y"}, "x", "y", True),
        ({"old": "x", "new": "y"}, "x", "z", False),
        ({"old": "x", "new": "y"}, "z", "y", False),
        ({"old": ABSENT, "new": PRESENT}, ABSENT, "y", True),
        ({"old": ABSENT, "new": PRESENT}, "x", "y", False),
        ({"old": PRESENT, "new": ABSENT}, "x", ABSENT, True),
        ({"old": PRESENT, "new": ABSENT}, ABSENT, "x", False),
        ({"new": "world"}, "hello", "world", True),
        ({"new": "world"}, ABSENT, "world", True),
        ({"new": "world"}, "world", "world", False),  # no change, no call
        ({"new": "world"}, "world", "hello", False),
        ({"old": "world"}, "world", "hello", True),
        ({"old": "world"}, "world", ABSENT, True),
        ({"old": "world"}, "hello", "world", False),
    ],
)
def test_update_old_new_filters(
    criteria: dict[str, Any], old: Any, new: Any, expected: bool
) -> None:
    assert check_change(updating(field=("spec", "field"), **criteria), old, new) is expected


def test_update_old_new_callbacks_get_none_for_absent() -> None:
    seen: list[tuple[str, Any]] = []

    def old_fn(value: Any, /, **_: Any) -> bool:
        seen.append(("old", value))
        return True

    def new_fn(value: Any, /, **_: Any) -> bool:
        seen.append(("new", value))
        return True

    handler = updating(field=("spec", "field"), old=old_fn, new=new_fn)
    assert check_change(handler, ABSENT, 1) is True
    assert seen == [("old", None), ("new", 1)]


def test_update_value_callback_tries_new_first_and_stops_there() -> None:
    seen: list[Any] = []

    def criterion(value: Any, /, **_: Any) -> bool:
        seen.append(value)
        return bool(value == "new")

    handler = updating(field=("spec", "field"), value=criterion)
    assert check_change(handler, "old", "new") is True
    assert seen == ["new"]
    seen.clear()
    assert check_change(handler, "new", "other") is True
    assert seen == ["other", "new"]


def test_prematch_checks_the_current_body_only() -> None:
    handler = updating(field=("spec", "field"), new="y")
    body = body_with(spec={"field": "y"})
    # No change information at all: only presence of the field (value= is unset) counts.
    assert prematch(handler, body=body, kwargs=KWARGS) is True
    assert prematch(handler, body=body_with(spec={}), kwargs=KWARGS) is False


# ---------------------------------------------------------------------------- when= & kwargs


def test_when_gets_the_kwargs() -> None:
    received: list[dict[str, Any]] = []

    def when(**kwargs: Any) -> bool:
        received.append(kwargs)
        return bool(kwargs["name"] == "obj")

    assert check(watching(when=when), body_with()) is True
    assert received == [KWARGS]
    assert match(watching(when=when), body=body_with(), kwargs={"name": "x"}) is False


def test_kwargs_factory_is_called_lazily_and_once() -> None:
    calls = 0

    def factory() -> Mapping[str, Any]:
        nonlocal calls
        calls += 1
        return KWARGS

    def yes(*_: Any, **__: Any) -> bool:
        return True

    assert match(watching(), body=body_with(), kwargs=factory) is True
    assert calls == 0  # no callbacks, no kwargs needed

    handler = watching(labels={"a": yes}, annotations={"b": yes}, when=yes)
    assert match(handler, body=body_with(), kwargs=factory) is True
    assert calls == 1


def test_when_is_not_evaluated_if_cheaper_filters_fail() -> None:
    def when(**_: Any) -> bool:
        raise AssertionError("must not be called")

    handler = watching(labels={"key": "value"}, when=when)
    assert check(handler, body_with(labels={"key": "other"})) is False


def test_async_callbacks_are_rejected_loudly() -> None:
    async def when(**_: Any) -> bool:
        return True

    with pytest.raises(TypeError, match="synchronous"):
        check(watching(when=when), body_with())


def test_the_resource_selector_is_checked_when_a_resource_is_given() -> None:
    pods = Resource(group="", version="v1", plural="pods", kind="Pod")
    handler = watching(selector=Selector("deployments"))
    assert check(handler, body_with()) is True
    assert check(handler, body_with(), resource=pods) is False
    assert check(watching(selector=Selector("pods")), body_with(), resource=pods) is True


# ------------------------------------------------------------------------ callback helpers


def yes(*_: Any, **__: Any) -> bool:
    return True


def no(*_: Any, **__: Any) -> bool:
    return False


@pytest.mark.parametrize(
    ("helper", "fns", "expected"),
    [
        (all_, [yes, yes], True),
        (all_, [yes, no], False),
        (all_, [], True),
        (any_, [no, yes], True),
        (any_, [no, no], False),
        (any_, [], False),
        (none_, [no, no], True),
        (none_, [no, yes], False),
        (none_, [], True),
    ],
)
def test_helpers_as_when_filters(helper: Any, fns: list[Any], expected: bool) -> None:
    assert check(watching(when=helper(fns)), body_with()) is expected


def test_not_inverts() -> None:
    assert check(watching(when=not_(no)), body_with()) is True
    assert check(watching(when=not_(yes)), body_with()) is False


def test_helpers_as_value_callbacks_pass_the_value_and_kwargs() -> None:
    def starts(value: Any, /, **kwargs: Any) -> bool:
        assert kwargs == KWARGS
        return bool(value) and value.startswith("some")

    def ends(value: Any, /, **_: Any) -> bool:
        return bool(value) and value.endswith("label")

    both = watching(labels={"key": all_([starts, ends])})
    either = watching(labels={"key": any_([starts, ends])})
    assert check(both, body_with(labels={"key": "somelabel"})) is True
    assert check(both, body_with(labels={"key": "some-other"})) is False
    assert check(either, body_with(labels={"key": "some-other"})) is True
    assert check(either, body_with(labels={"key": "other"})) is False
    assert check(watching(labels={"key": not_(starts)}), body_with(labels={"key": "x"})) is True


def test_helpers_short_circuit() -> None:
    def boom(*_: Any, **__: Any) -> bool:
        raise AssertionError("must not be called")

    assert all_([no, boom])() is False
    assert any_([yes, boom])() is True
    assert none_([yes, boom])() is False


def test_helpers_accept_one_shot_iterables_repeatedly() -> None:
    combined = all_(fn for fn in [yes, yes])
    assert combined() is True
    assert combined() is True  # not exhausted after the first use


def test_helpers_nest() -> None:
    assert any_([all_([yes, no]), not_(none_([yes]))])() is True


@pytest.mark.parametrize("helper", [all_, any_, none_])
def test_helpers_reject_a_bare_callable(helper: Any) -> None:
    with pytest.raises(TypeError, match=r"\(\[fn1, fn2\]\)"):
        helper(yes)


@pytest.mark.parametrize("helper", [all_, any_, none_])
def test_helpers_reject_non_callable_items(helper: Any) -> None:
    with pytest.raises(TypeError, match="non-callable"):
        helper([yes, "no"])


def test_not_rejects_non_callables() -> None:
    with pytest.raises(TypeError):
        not_("x")  # type: ignore[arg-type]
