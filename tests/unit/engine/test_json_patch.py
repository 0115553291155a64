from __future__ import annotations

import copy
import functools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trioperator._engine.bodies import Body, RawBody
from trioperator._engine.patches import (
    JSONPatchError,
    JSONPatchTestFailed,
    Patch,
    apply_json_patch,
    apply_merge_patch,
    build_json_patch,
    escape_pointer_token,
    split_json_patch_status,
    split_status,
    unescape_pointer_token,
)

RV = "1234567890"
TEST_RV: dict[str, Any] = {"op": "test", "path": "/metadata/resourceVersion", "value": RV}
FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"


def remove_finalizer(body: RawBody, /, name: str = FINALIZER) -> None:
    metadata = body.setdefault("metadata", {})
    finalizers = metadata.get("finalizers", [])
    if name in finalizers:
        finalizers.remove(name)
    if not finalizers:
        metadata.pop("finalizers", None)


def add_finalizer(body: RawBody, /, name: str = FINALIZER) -> None:
    finalizers = body.setdefault("metadata", {}).setdefault("finalizers", [])
    if name not in finalizers:
        finalizers.append(name)


def _body(**metadata: Any) -> RawBody:
    return {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfExample",
        "metadata": {"name": "kex", "resourceVersion": RV, **metadata},
        "spec": {"field": "value", "items": ["a", "b"]},
    }


# ------------------------------------------------------------------ build_json_patch


def test_removing_the_only_finalizer_is_exactly_this_payload() -> None:
    body = _body(finalizers=[FINALIZER])
    ops = build_json_patch(body, [remove_finalizer], resource_version=RV)
    assert ops == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "1234567890"},
        {"op": "remove", "path": "/metadata/finalizers"},
    ]
    assert [list(op) for op in ops] == [["op", "path", "value"], ["op", "path"]]


def test_removing_one_of_several_finalizers_is_one_index_op() -> None:
    body = _body(finalizers=["a/first", FINALIZER, "b/last"])
    ops = build_json_patch(body, [remove_finalizer], resource_version=RV)
    assert ops == [TEST_RV, {"op": "remove", "path": "/metadata/finalizers/1"}]


def test_adding_a_finalizer_to_no_list_adds_the_list() -> None:
    ops = build_json_patch(_body(), [add_finalizer], resource_version=RV)
    assert ops == [TEST_RV, {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]}]


def test_adding_a_finalizer_to_a_list_appends_at_its_index() -> None:
    ops = build_json_patch(_body(finalizers=["other"]), [add_finalizer], resource_version=RV)
    assert ops == [TEST_RV, {"op": "add", "path": "/metadata/finalizers/1", "value": FINALIZER}]


def test_no_changes_means_no_ops_and_no_test() -> None:
    body = _body(finalizers=[FINALIZER])
    assert build_json_patch(body, [], resource_version=RV) == []
    assert build_json_patch(body, [add_finalizer], resource_version=RV) == []  # idempotent
    assert build_json_patch(_body(), [remove_finalizer], resource_version=RV) == []


def test_no_resource_version_means_no_test() -> None:
    ops = build_json_patch(_body(), [add_finalizer], resource_version=None)
    assert ops == [{"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]}]


def test_the_original_body_is_not_modified() -> None:
    body = _body(finalizers=[FINALIZER])
    snapshot = copy.deepcopy(body)
    build_json_patch(body, [remove_finalizer, add_finalizer, remove_finalizer], resource_version=RV)
    assert body == snapshot


def test_a_read_only_body_view_is_accepted() -> None:
    ops = build_json_patch(Body(_body()), [add_finalizer], resource_version=RV)
    assert ops == [TEST_RV, {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]}]


def test_fns_run_in_order_on_the_same_copy() -> None:
    seen: list[Any] = []

    def first(body: RawBody) -> None:
        body["spec"]["field"] = "first"

    def second(body: RawBody) -> None:
        seen.append(body["spec"]["field"])
        body["spec"]["field"] += "+second"

    ops = build_json_patch(_body(), [first, second], resource_version=RV)
    assert seen == ["first"]
    assert ops == [TEST_RV, {"op": "replace", "path": "/spec/field", "value": "first+second"}]


def test_partial_fns_with_arguments() -> None:
    def set_label(body: RawBody, /, name: str, value: str) -> None:
        body.setdefault("metadata", {}).setdefault("labels", {})[name] = value

    fn = functools.partial(set_label, name="my-label", value="my-value")
    ops = build_json_patch(_body(labels={"x": "y"}), [fn], resource_version=RV)
    assert ops == [
        TEST_RV,
        {"op": "add", "path": "/metadata/labels/my-label", "value": "my-value"},
    ]


def test_keys_are_escaped_as_json_pointers() -> None:
    def annotate(body: RawBody) -> None:
        body["metadata"].setdefault("annotations", {})["example.com/a~b"] = "v"
        del body["metadata"]["annotations"]["old/key"]

    ops = build_json_patch(_body(annotations={"old/key": "x"}), [annotate], resource_version=RV)
    assert ops == [
        TEST_RV,
        {"op": "remove", "path": "/metadata/annotations/old~1key"},
        {"op": "add", "path": "/metadata/annotations/example.com~1a~0b", "value": "v"},
    ]


def test_scalar_changes_replace_and_types_matter() -> None:
    def edit(body: RawBody) -> None:
        body["spec"]["flag"] = 1
        body["spec"]["count"] = 1.0
        body["spec"]["text"] = "1"

    base = _body()
    base["spec"].update(flag=True, count=1, text=1)
    ops = build_json_patch(base, [edit], resource_version=None)
    assert ops == [
        {"op": "replace", "path": "/spec/flag", "value": 1},  # true → 1 is a change
        {"op": "replace", "path": "/spec/text", "value": "1"},  # 1 → "1" is a change
    ]  # 1 → 1.0 is the same JSON number


def test_replacing_a_dict_with_a_scalar_and_back() -> None:
    def edit(body: RawBody) -> None:
        body["spec"] = "flat"
        body["metadata"]["labels"] = {"a": "b"}

    ops = build_json_patch(_body(labels="oops"), [edit], resource_version=None)
    assert ops == [
        {"op": "replace", "path": "/metadata/labels", "value": {"a": "b"}},
        {"op": "replace", "path": "/spec", "value": "flat"},
    ]


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (["a", "b"], ["a", "b", "c"], [{"op": "add", "path": "/spec/items/2", "value": "c"}]),
        (["a", "b"], ["z", "a", "b"], [{"op": "add", "path": "/spec/items/0", "value": "z"}]),
        (["a", "b"], ["a", "z", "b"], [{"op": "add", "path": "/spec/items/1", "value": "z"}]),
        (["a", "b", "c"], ["a", "c"], [{"op": "remove", "path": "/spec/items/1"}]),
        (["a", "b", "c"], ["b", "c"], [{"op": "remove", "path": "/spec/items/0"}]),
        (
            ["a", "b", "c", "d"],
            ["a"],
            [
                {"op": "remove", "path": "/spec/items/3"},
                {"op": "remove", "path": "/spec/items/2"},
                {"op": "remove", "path": "/spec/items/1"},
            ],
        ),
        (
            ["a", "b"],
            [],
            [
                {"op": "remove", "path": "/spec/items/1"},
                {"op": "remove", "path": "/spec/items/0"},
            ],
        ),
        (
            [],
            ["a", "b"],
            [
                {"op": "add", "path": "/spec/items/0", "value": "a"},
                {"op": "add", "path": "/spec/items/1", "value": "b"},
            ],
        ),
        (
            ["a", "b", "c"],
            ["a", "x", "c"],
            [{"op": "replace", "path": "/spec/items/1", "value": "x"}],
        ),
        (
            ["a", "b", "c", "d"],
            ["a", "x", "d"],
            [
                {"op": "replace", "path": "/spec/items/1", "value": "x"},
                {"op": "remove", "path": "/spec/items/2"},
            ],
        ),
        (
            [{"n": 1, "v": "a"}, {"n": 2}],
            [{"n": 1, "v": "b"}, {"n": 2}],
            [{"op": "replace", "path": "/spec/items/0/v", "value": "b"}],
        ),
        (["a", "a"], ["a"], [{"op": "remove", "path": "/spec/items/1"}]),
    ],
)
def test_list_edits_are_precise(old: list[Any], new: list[Any], expected: Any) -> None:
    body = _body()
    body["spec"]["items"] = old

    def edit(b: RawBody) -> None:
        b["spec"]["items"] = copy.deepcopy(new)

    ops = build_json_patch(body, [edit], resource_version=None)
    assert ops == expected
    assert apply_json_patch(body, ops)["spec"]["items"] == new


# ------------------------------------------------------------------ round trips


JSON_SCALARS = st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from(["a", "b", "~/"])
JSON_KEYS = st.sampled_from(["a", "b", "c", "x/y", "t~1", ""])
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(JSON_KEYS, inner, max_size=4),
    max_leaves=12,
)
JSON_OBJECTS = st.dictionaries(JSON_KEYS, JSON_VALUES, max_size=5)


@settings(max_examples=300, deadline=None)
@given(old=JSON_OBJECTS, new=JSON_OBJECTS)
def test_any_transformation_round_trips(old: dict[str, Any], new: dict[str, Any]) -> None:
    def become_new(body: RawBody) -> None:
        body.clear()
        body.update(copy.deepcopy(new))

    ops = build_json_patch(old, [become_new], resource_version=None)
    result = apply_json_patch(old, ops)
    # Compare as JSON: in Python, True == 1, but not in JSON.
    assert json.dumps(result, sort_keys=True) == json.dumps(new, sort_keys=True)
    assert (ops == []) == (json.dumps(old, sort_keys=True) == json.dumps(new, sort_keys=True))


def test_round_trip_with_the_resource_version_test() -> None:
    body = _body(finalizers=["x", FINALIZER])
    ops = build_json_patch(body, [remove_finalizer], resource_version=RV)
    assert apply_json_patch(body, ops)["metadata"]["finalizers"] == ["x"]

    newer = copy.deepcopy(body)
    newer["metadata"]["resourceVersion"] = "1234567891"
    with pytest.raises(JSONPatchTestFailed):
        apply_json_patch(newer, ops)


# ------------------------------------------------------------------ apply_json_patch


DOC = {"a": {"b": [1, 2, 3]}, "c": "x", "k/e~y": 1}


@pytest.mark.parametrize(
    ("ops", "expected"),
    [
        ([{"op": "add", "path": "/d", "value": {"e": 1}}], {**DOC, "d": {"e": 1}}),
        ([{"op": "add", "path": "/c", "value": "y"}], {**DOC, "c": "y"}),
        ([{"op": "add", "path": "/a/b/-", "value": 4}], {**DOC, "a": {"b": [1, 2, 3, 4]}}),
        ([{"op": "add", "path": "/a/b/0", "value": 0}], {**DOC, "a": {"b": [0, 1, 2, 3]}}),
        ([{"op": "add", "path": "/a/b/3", "value": 4}], {**DOC, "a": {"b": [1, 2, 3, 4]}}),
        ([{"op": "remove", "path": "/a/b/1"}], {**DOC, "a": {"b": [1, 3]}}),
        ([{"op": "remove", "path": "/k~1e~0y"}], {"a": {"b": [1, 2, 3]}, "c": "x"}),
        ([{"op": "replace", "path": "/c", "value": None}], {**DOC, "c": None}),
        ([{"op": "replace", "path": "/a/b/2", "value": 9}], {**DOC, "a": {"b": [1, 2, 9]}}),
        ([{"op": "replace", "path": "", "value": {"z": 1}}], {"z": 1}),
        (
            [{"op": "move", "from": "/c", "path": "/a/c"}],
            {"a": {"b": [1, 2, 3], "c": "x"}, "k/e~y": 1},
        ),
        ([{"op": "move", "from": "/a/b/0", "path": "/a/b/2"}], {**DOC, "a": {"b": [2, 3, 1]}}),
        ([{"op": "copy", "from": "/a/b", "path": "/d"}], {**DOC, "d": [1, 2, 3]}),
        ([{"op": "test", "path": "/a/b", "value": [1, 2, 3]}], DOC),
        ([{"op": "test", "path": "", "value": DOC}], DOC),
        ([], DOC),
    ],
)
def test_apply_json_patch(ops: list[dict[str, Any]], expected: Any) -> None:
    snapshot = copy.deepcopy(DOC)
    assert apply_json_patch(DOC, ops) == expected
    assert snapshot == DOC  # pure


def test_replace_keeps_the_key_order() -> None:
    result = apply_json_patch({"a": 1, "b": 2}, [{"op": "replace", "path": "/a", "value": 3}])
    assert list(result) == ["a", "b"]


def test_copied_values_are_not_shared() -> None:
    result = apply_json_patch(DOC, [{"op": "copy", "from": "/a", "path": "/d"}])
    result["d"]["b"].append(4)
    assert result["a"]["b"] == [1, 2, 3]


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "remove", "path": "/missing"}],
        [{"op": "replace", "path": "/missing", "value": 1}],
        [{"op": "add", "path": "/missing/deeper", "value": 1}],
        [{"op": "add", "path": "/a/b/5", "value": 1}],
        [{"op": "add", "path": "/a/b/01", "value": 1}],
        [{"op": "remove", "path": "/a/b/3"}],
        [{"op": "remove", "path": "/a/b/-"}],
        [{"op": "add", "path": "/c/x", "value": 1}],
        [{"op": "add", "path": "no-slash", "value": 1}],
        [{"op": "add", "path": "/x"}],
        [{"op": "move", "from": "/a", "path": "/a/b/x"}],
        [{"op": "copy", "path": "/x"}],
        [{"op": "remove", "path": ""}],
        [{"op": "frobnicate", "path": "/c"}],
        [{"path": "/c"}],
        [{"op": "remove"}],
        [{"op": "remove", "path": "/a/b/\u00b2"}],  # a superscript two is no array index
        ["remove /c"],
    ],
)
def test_invalid_json_patches(ops: list[Any]) -> None:
    with pytest.raises(JSONPatchError):
        apply_json_patch(DOC, ops)


@pytest.mark.parametrize(
    "op",
    [
        {"op": "test", "path": "/c", "value": "y"},
        {"op": "test", "path": "/a/b", "value": [1, 2]},
        {"op": "test", "path": "/k~1e~0y", "value": True},  # 1 is not true in JSON
    ],
)
def test_failed_tests_apply_nothing(op: dict[str, Any]) -> None:
    ops = [{"op": "add", "path": "/new", "value": 1}, op]
    with pytest.raises(JSONPatchTestFailed):
        apply_json_patch(DOC, ops)
    assert "new" not in DOC


@pytest.mark.parametrize(
    ("key", "token"), [("a", "a"), ("a/b", "a~1b"), ("a~b", "a~0b"), ("~1", "~01"), ("", "")]
)
def test_pointer_escaping(key: str, token: str) -> None:
    assert escape_pointer_token(key) == token
    assert unescape_pointer_token(token) == key


# ------------------------------------------------------------------ apply_merge_patch


@pytest.mark.parametrize(
    ("doc", "patch", "expected"),
    [
        # The examples of RFC 7386, appendix A.
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "b"}, ["c"], ["c"]),
        ({"a": "foo"}, None, None),
        ({"a": "foo"}, "bar", "bar"),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
        # Kubernetes-flavoured.
        (
            {"metadata": {"annotations": {"x": "1", "y": "2"}}},
            {"metadata": {"annotations": {"x": None, "z": "3"}}},
            {"metadata": {"annotations": {"y": "2", "z": "3"}}},
        ),
        ({"status": {"a": 1}}, {"status": None}, {}),
        ({"spec": {}}, {}, {"spec": {}}),
        ({"spec": {"missing": 1}}, {"spec": {"absent": None}}, {"spec": {"missing": 1}}),
    ],
)
def test_apply_merge_patch(doc: Any, patch: Any, expected: Any) -> None:
    doc_snapshot = copy.deepcopy(doc)
    patch_snapshot = copy.deepcopy(patch)
    assert apply_merge_patch(doc, patch) == expected
    assert doc == doc_snapshot
    assert patch == patch_snapshot


def test_merge_patch_results_share_nothing() -> None:
    doc = {"a": {"b": [1]}, "untouched": {"x": [1]}}
    patch = {"c": {"d": [2]}}
    result = apply_merge_patch(doc, patch)
    result["a"]["b"].append(9)
    result["untouched"]["x"].append(9)
    result["c"]["d"].append(9)
    assert doc == {"a": {"b": [1]}, "untouched": {"x": [1]}}
    assert patch == {"c": {"d": [2]}}


def test_a_patch_object_merges_like_a_dict() -> None:
    patch = Patch()
    patch.meta.labels["l"] = None
    patch.status["s"] = 1
    result = apply_merge_patch({"metadata": {"labels": {"l": "v", "k": "v"}}}, patch)
    assert result == {"metadata": {"labels": {"k": "v"}}, "status": {"s": 1}}


# ------------------------------------------------------------------ status split


def test_split_status_merge_patch() -> None:
    patch = Patch({"metadata": {"labels": {"a": "b"}}, "status": {"x": 1}})
    body_patch, status_patch = split_status(patch)
    assert body_patch == {"metadata": {"labels": {"a": "b"}}}
    assert status_patch == {"status": {"x": 1}}
    assert patch == {"metadata": {"labels": {"a": "b"}}, "status": {"x": 1}}  # untouched


def test_split_status_one_sided() -> None:
    assert split_status({"status": {"x": None}}) == ({}, {"status": {"x": None}})
    assert split_status({"spec": {"x": 1}}) == ({"spec": {"x": 1}}, {})
    assert split_status({}) == ({}, {})
    assert split_status({"status": None}) == ({}, {"status": None})


def test_split_json_patch_status() -> None:
    ops = [
        TEST_RV,
        {"op": "remove", "path": "/metadata/finalizers"},
        {"op": "add", "path": "/status/x", "value": 1},
        {"op": "replace", "path": "/status", "value": {}},
        {"op": "add", "path": "/statusx", "value": 1},
    ]
    body_ops, status_ops = split_json_patch_status(ops)
    assert body_ops == [
        TEST_RV,
        {"op": "remove", "path": "/metadata/finalizers"},
        {"op": "add", "path": "/statusx", "value": 1},
    ]
    assert status_ops == [
        TEST_RV,
        {"op": "add", "path": "/status/x", "value": 1},
        {"op": "replace", "path": "/status", "value": {}},
    ]


def test_split_json_patch_status_one_sided() -> None:
    only_body = [TEST_RV, {"op": "remove", "path": "/metadata/finalizers"}]
    assert split_json_patch_status(only_body) == (only_body, [])
    only_status = [TEST_RV, {"op": "add", "path": "/status/x", "value": 1}]
    assert split_json_patch_status(only_status) == ([], only_status)
    assert split_json_patch_status([]) == ([], [])
    unguarded = [{"op": "add", "path": "/status/x", "value": 1}]
    assert split_json_patch_status(unguarded) == ([], unguarded)
