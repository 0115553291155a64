"""Strategic merge patches as the fake applies them (orders checked against kube-apiserver 1.20)."""

from __future__ import annotations

from typing import Any

import pytest
from trioperator.testing._fakestore import StatusError
from trioperator.testing._fakestore.strategic import strategic_merge


def pod(*containers: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"containers": list(containers)}}


def names(obj: dict[str, Any]) -> list[str]:
    return [c["name"] for c in obj["spec"]["containers"]]


def test_containers_merge_by_name_new_ones_first() -> None:
    original = pod({"name": "main", "image": "a", "env": [{"name": "A", "value": "1"}]})
    patched = strategic_merge(
        original,
        pod({"name": "side", "image": "s"}, {"name": "main", "env": [{"name": "B", "value": "2"}]}),
    )
    assert patched == pod(
        {"name": "side", "image": "s"},
        {
            "name": "main",
            "image": "a",
            "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}],
        },
    )
    assert original == pod({"name": "main", "image": "a", "env": [{"name": "A", "value": "1"}]})


def test_server_only_items_keep_their_places() -> None:
    original = pod({"name": "a"}, {"name": "b"}, {"name": "c"})
    patched = strategic_merge(
        original, pod({"name": "c", "image": "x"}, {"name": "a", "image": "y"})
    )
    # Patched items in the patch's order; "b" goes before "c", where the server had it.
    assert names(patched) == ["b", "c", "a"]


def test_directives() -> None:
    original = pod({"name": "a", "image": "1", "args": ["x"]}, {"name": "b"})
    assert names(strategic_merge(original, pod({"name": "a", "$patch": "delete"}))) == ["b"]
    replaced = strategic_merge(original, pod({"$patch": "replace"}, {"name": "z"}))
    assert replaced == pod({"name": "z"})
    # Like the apiserver: any item asking for "replace" replaces the list with the others.
    inner = strategic_merge(original, pod({"name": "a", "$patch": "replace", "image": "2"}))
    assert inner == pod()
    ordered = strategic_merge(
        original,
        {"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}], "containers": []}},
    )
    assert names(ordered) == ["b", "a"]
    retained = strategic_merge({"spec": {"x": 1, "y": 2}}, {"spec": {"$retainKeys": ["y"], "y": 3}})
    assert retained == {"spec": {"y": 3}}
    assert strategic_merge({"spec": {"x": 1}}, {"spec": {"$patch": "delete"}}) == {}


def test_maps_merge_and_null_deletes() -> None:
    original = {"metadata": {"labels": {"a": "1", "b": "2"}}, "data": {"k": "v"}}
    patched = strategic_merge(original, {"metadata": {"labels": {"a": None, "c": "3"}}})
    assert patched == {"metadata": {"labels": {"b": "2", "c": "3"}}, "data": {"k": "v"}}


def test_finalizers_merge_as_a_set() -> None:
    original = {"metadata": {"finalizers": ["x/b", "x/a"]}}
    patched = strategic_merge(original, {"metadata": {"finalizers": ["x/c", "x/a"]}})
    assert patched == {"metadata": {"finalizers": ["x/c", "x/b", "x/a"]}}
    removed = strategic_merge(
        patched, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x/a"]}}
    )
    assert removed == {"metadata": {"finalizers": ["x/c", "x/b"]}}


def test_lists_without_a_merge_key_are_replaced() -> None:
    original = pod({"name": "a", "args": ["1", "2"], "ports": [{"containerPort": 80}]})
    patched = strategic_merge(
        original, pod({"name": "a", "args": ["3"], "ports": [{"containerPort": 81}]})
    )
    assert patched == pod(
        {"name": "a", "args": ["3"], "ports": [{"containerPort": 81}, {"containerPort": 80}]}
    )


def test_an_item_without_its_merge_key_is_an_error() -> None:
    with pytest.raises(StatusError) as raised:
        strategic_merge(pod({"name": "a"}), pod({"image": "q"}))
    assert raised.value.code == 500
    assert raised.value.message == "map: map[image:q] does not contain declared merge key: name"
