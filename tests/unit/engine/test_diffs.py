from __future__ import annotations

from typing import Any

import pytest
from trioperator._engine.diffs import (
    EMPTY,
    Diff,
    DiffItem,
    DiffOperation,
    diff,
    parse_field,
    reduce,
    resolve,
)

ADD, CHANGE, REMOVE = DiffOperation.ADD, DiffOperation.CHANGE, DiffOperation.REMOVE


# ------------------------------------------------------------------ structures


def test_operation_values_are_plain_strings() -> None:
    assert [op.value for op in DiffOperation] == ["add", "change", "remove"]
    assert ADD == "add"
    assert str(CHANGE) == "change"
    assert repr(REMOVE) == "'remove'"
    assert f"{ADD}" == "add"


def test_item_unpacks_and_has_attributes() -> None:
    item = DiffItem(ADD, ("spec", "x"), None, 1)
    op, field, old, new = item
    assert (op, field, old, new) == ("add", ("spec", "x"), None, 1)
    assert item.operation is ADD
    assert item.op is ADD
    assert item.field == ("spec", "x")
    assert item.old is None
    assert item.new == 1
    assert repr(item) == "('add', ('spec', 'x'), None, 1)"


def test_diff_is_an_immutable_sequence() -> None:
    d = Diff([("add", ["a"], None, 1), ("remove", ("b",), 2, None)])
    assert len(d) == 2
    assert isinstance(d[0], DiffItem)
    assert d[0].op is ADD  # strings are converted to operations
    assert d[0].field == ("a",)  # lists are converted to tuples
    assert isinstance(d[1:], Diff)
    assert d[1:] == [("remove", ("b",), 2, None)]
    assert list(d) == [DiffItem(ADD, ("a",), None, 1), DiffItem(REMOVE, ("b",), 2, None)]
    assert repr(d) == "(('add', ('a',), None, 1), ('remove', ('b',), 2, None))"
    with pytest.raises(TypeError):
        d[0] = DiffItem(ADD, (), None, None)  # type: ignore[index]
    with pytest.raises(AttributeError):
        d.foo = 1  # type: ignore[attr-defined]


def test_diff_equality() -> None:
    d = Diff([DiffItem(CHANGE, ("spec", "x"), 1, 2)])
    assert d == [("change", ("spec", "x"), 1, 2)]
    assert d == (("change", ("spec", "x"), 1, 2),)
    assert d == Diff([("change", ("spec", "x"), 1, 2)])
    assert d != [("change", ("spec", "x"), 1, 3)]
    assert d != []
    assert d != [1]
    assert d != "change"
    assert d != None  # noqa: E711
    assert Diff() == [] == EMPTY
    assert not EMPTY
    assert d


def test_diff_is_unhashable() -> None:
    with pytest.raises(TypeError):
        hash(Diff())


# ------------------------------------------------------------------ parse_field & resolve


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("spec", ("spec",)),
        ("spec.field", ("spec", "field")),
        (["spec", "field"], ("spec", "field")),
        (("spec", "field"), ("spec", "field")),
        ((), ()),
        ([], ()),
        ("", ()),
        (None, ()),
    ],
)
def test_parse_field(field: Any, expected: tuple[str, ...]) -> None:
    assert parse_field(field) == expected


def test_parse_field_rejects_other_types() -> None:
    with pytest.raises(ValueError, match="field"):
        parse_field(123)  # type: ignore[arg-type]


BODY = {"spec": {"field": "value", "nested": {"deep": 1}, "items": ["a"]}, "status": None}


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("spec.field", "value"),
        (("spec", "field"), "value"),
        ("spec.nested.deep", 1),
        ("spec.items", ["a"]),
        ("spec", BODY["spec"]),
        ("", BODY),
        ("spec.missing", None),
        ("missing.deeper", None),
        ("status.anything", None),  # through a None
        ("spec.field.deeper", None),  # through a scalar
        ("spec.items.0", None),  # lists are not walked
    ],
)
def test_resolve(field: Any, expected: Any) -> None:
    assert resolve(BODY, field) == expected


def test_resolve_with_default() -> None:
    sentinel = object()
    assert resolve(BODY, "spec.missing", sentinel) is sentinel
    assert resolve(None, "spec", sentinel) is sentinel
    assert resolve(BODY, "status", sentinel) is None  # present, and None


# ------------------------------------------------------------------ diff


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (None, None),
        (1, 1),
        ("x", "x"),
        ([1, 2], [1, 2]),
        ({}, {}),
        ({"a": {"b": [1]}}, {"a": {"b": [1]}}),
    ],
)
def test_equal_values_have_no_diff(a: Any, b: Any) -> None:
    assert diff(a, b) == []


def test_scalars_change() -> None:
    assert diff(1, 2) == [("change", (), 1, 2)]
    assert diff("a", "b") == [("change", (), "a", "b")]


def test_none_vs_value_at_root() -> None:
    assert diff(None, {"a": 1}) == [("add", (), None, {"a": 1})]
    assert diff({"a": 1}, None) == [("remove", (), {"a": 1}, None)]
    assert diff(None, 5) == [("add", (), None, 5)]
    assert diff(5, None) == [("remove", (), 5, None)]


def test_lists_are_compared_as_whole_values() -> None:
    assert diff([1, 2], [1, 3]) == [("change", (), [1, 2], [1, 3])]
    assert diff({"l": [1]}, {"l": [1, 2]}) == [("change", ("l",), [1], [1, 2])]
    assert diff({"l": [{"a": 1}]}, {"l": [{"a": 2}]}) == [
        ("change", ("l",), [{"a": 1}], [{"a": 2}])
    ]


def test_dict_vs_scalar_is_a_change() -> None:
    assert diff({"a": {"b": 1}}, {"a": "x"}) == [("change", ("a",), {"b": 1}, "x")]
    assert diff({"a": "x"}, {"a": {"b": 1}}) == [("change", ("a",), "x", {"b": 1})]


def test_keys_added_removed_changed() -> None:
    old = {"metadata": {"labels": {"label2": "old-value", "label3": "old-value"}}, "spec": {}}
    new = {"metadata": {"labels": {"label1": "new-value", "label2": "new-value"}}, "spec": {}}
    assert diff(old, new) == [
        ("add", ("metadata", "labels", "label1"), None, "new-value"),
        ("remove", ("metadata", "labels", "label3"), "old-value", None),
        ("change", ("metadata", "labels", "label2"), "old-value", "new-value"),
    ]


def test_whole_stanzas_added_and_removed() -> None:
    assert diff({}, {"spec": {"a": 1}}) == [("add", ("spec",), None, {"a": 1})]
    assert diff({"spec": {"a": 1}}, {}) == [("remove", ("spec",), {"a": 1}, None)]


def test_none_values_are_the_same_as_absent_keys() -> None:
    assert diff({}, {"a": None}) == []
    assert diff({"a": None}, {}) == []
    assert diff({"a": None}, {"a": 1}) == [("add", ("a",), None, 1)]
    assert diff({"a": 1}, {"a": None}) == [("remove", ("a",), 1, None)]


def test_deeply_nested() -> None:
    old = {"spec": {"a": {"b": {"c": 1, "d": 2}}}}
    new = {"spec": {"a": {"b": {"c": 10, "d": 2}}}}
    assert diff(old, new) == [("change", ("spec", "a", "b", "c"), 1, 10)]


def test_the_order_is_adds_removes_changes_in_key_order() -> None:
    old = {"r1": 1, "c1": 1, "r2": 2, "c2": 2}
    new = {"a2": 2, "c2": 20, "a1": 1, "c1": 10}
    assert diff(old, new) == [
        ("add", ("a2",), None, 2),
        ("add", ("a1",), None, 1),
        ("remove", ("r1",), 1, None),
        ("remove", ("r2",), 2, None),
        ("change", ("c1",), 1, 10),
        ("change", ("c2",), 2, 20),
    ]


def test_path_prefix() -> None:
    assert diff({"a": 1}, {"a": 2}, path=("spec",)) == [("change", ("spec", "a"), 1, 2)]
    assert diff(None, 1, path=("x", "y")) == [("add", ("x", "y"), None, 1)]


def test_users_can_unpack_the_items() -> None:
    d = diff({"labels": {"a": "1", "b": "2"}}, {"labels": {"a": "1", "c": "3"}})
    patch = {field[-1]: new for op, field, old, new in d}
    assert patch == {"c": "3", "b": None}


def test_mappings_other_than_dicts_are_walked() -> None:
    from trioperator._engine.bodies import Body

    old = Body({"spec": {"a": 1}})
    new = Body({"spec": {"a": 2}})
    assert diff(old, new) == [("change", ("spec", "a"), 1, 2)]


# ------------------------------------------------------------------ reduce


FULL = Diff(
    [
        ("add", ("metadata", "labels", "label1"), None, "new-value"),
        ("change", ("metadata", "labels", "label2"), "old-value", "new-value"),
        ("remove", ("metadata", "labels", "label3"), "old-value", None),
        ("change", ("spec", "size"), "1G", "2G"),
    ]
)


@pytest.mark.parametrize("field", [None, "", (), []])
def test_reduce_to_the_root_is_the_same(field: Any) -> None:
    assert reduce(FULL, field) == FULL


@pytest.mark.parametrize(
    "field", ["metadata.labels", ("metadata", "labels"), ["metadata", "labels"]]
)
def test_reduce_to_a_field_reroots_and_filters(field: Any) -> None:
    assert reduce(FULL, field) == [
        ("add", ("label1",), None, "new-value"),
        ("change", ("label2",), "old-value", "new-value"),
        ("remove", ("label3",), "old-value", None),
    ]


def test_reduce_to_an_exact_field() -> None:
    assert reduce(FULL, "spec.size") == [("change", (), "1G", "2G")]
    assert reduce(FULL, "spec") == [("change", ("size",), "1G", "2G")]


def test_reduce_to_an_unrelated_field_is_empty() -> None:
    assert reduce(FULL, "spec.other") == []
    assert reduce(FULL, "status") == []
    assert reduce(FULL, "metadata.labels.label4") == []
    assert reduce(FULL, "spec.size.deeper") == []  # scalars have nothing beneath


def test_reduce_below_an_added_stanza() -> None:
    d = diff({}, {"spec": {"struct": {"field": 1, "other": 2}}})
    assert d == [("add", ("spec",), None, {"struct": {"field": 1, "other": 2}})]
    assert reduce(d, "spec.struct.field") == [("add", (), None, 1)]
    assert reduce(d, "spec.struct") == [("add", (), None, {"field": 1, "other": 2})]
    assert reduce(d, "spec.missing") == []


def test_reduce_below_a_removed_stanza() -> None:
    d = diff({"spec": {"struct": {"field": 1}}}, {})
    assert reduce(d, "spec.struct.field") == [("remove", (), 1, None)]
    assert reduce(d, "spec.struct") == [("remove", (), {"field": 1}, None)]


def test_reduce_below_a_changed_whole_value() -> None:
    d = diff({"spec": "scalar"}, {"spec": {"field": 1}})
    assert d == [("change", ("spec",), "scalar", {"field": 1})]
    # The old side has no such field (not a dict): the field appears.
    assert reduce(d, "spec.field") == [("add", (), None, 1)]


def test_reduce_above_expands_into_a_full_subdiff() -> None:
    d = Diff([("change", ("spec",), {"a": {"x": 1, "y": 2}}, {"a": {"x": 1, "y": 3, "z": 4}})])
    assert reduce(d, "spec.a") == [
        ("add", ("z",), None, 4),
        ("change", ("y",), 2, 3),
    ]


def test_reduce_of_a_root_add() -> None:
    d = diff(None, {"spec": {"field": "v"}})
    assert reduce(d, "spec.field") == [("add", (), None, "v")]
    assert reduce(d, "spec") == [("add", (), None, {"field": "v"})]


def test_reduce_returns_a_diff() -> None:
    reduced = reduce(FULL, "spec")
    assert isinstance(reduced, Diff)
    assert all(isinstance(item, DiffItem) for item in reduced)
