"""The pure index structures: Index, Store, and how results become index content."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import pytest
from trioperator._engine.indexing import Index, Indexers, Store
from trioperator._engine.memos import Memo


def content(index: Mapping[Any, Collection[Any]]) -> dict[Any, list[Any]]:
    return {key: sorted(store, key=repr) for key, store in index.items()}


@pytest.fixture
def indexers() -> Indexers:
    return Indexers(["idx"])


def test_declared_indices_exist_empty_from_the_start(indexers: Indexers) -> None:
    index = indexers.indices["idx"]
    assert isinstance(index, Index)
    assert isinstance(index, Mapping)
    assert len(index) == 0
    assert not index
    assert dict(index) == {}
    assert list(indexers.indices) == ["idx"]
    assert "idx" in indexers.indices
    assert "other" not in indexers.indices


def test_the_same_index_object_stays_and_is_updated_in_place(indexers: Indexers) -> None:
    index = indexers.indices["idx"]
    indexers.replace("idx", "uid1", "value")
    assert indexers.indices["idx"] is index
    assert content(index) == {None: ["value"]}


@pytest.mark.parametrize(
    "result",
    [
        "text",
        123,
        ("ns", "name"),
        ["a", "b"],
        {"a", "b"},
        Memo(a=1),
        frozenset({1}),
    ],
    ids=["str", "int", "tuple", "list", "set", "memo", "frozenset"],
)
def test_non_dict_results_go_under_none_as_they_are(indexers: Indexers, result: Any) -> None:
    indexers.replace("idx", "uid1", result)
    index = indexers.indices["idx"]
    assert list(index) == [None]
    assert list(index[None]) == [result]


def test_dict_subclasses_are_not_merged_but_stored_as_values(indexers: Indexers) -> None:
    class MyDict(dict[str, Any]):
        pass

    value = MyDict(a=1)
    indexers.replace("idx", "uid1", value)
    assert list(indexers.indices["idx"]) == [None]


def test_dicts_are_merged_by_key_across_objects(indexers: Indexers) -> None:
    indexers.replace("idx", "uid1", {"key1": "valueA"})
    indexers.replace("idx", "uid2", {"key1": "valueB"})
    indexers.replace("idx", "uid3", {"key2": {"key3": "valueC"}})
    assert content(indexers.indices["idx"]) == {
        "key1": ["valueA", "valueB"],
        "key2": [{"key3": "valueC"}],
    }


def test_none_values_in_dicts_are_indexed(indexers: Indexers) -> None:
    indexers.replace("idx", "uid1", {"key": None})
    indexers.replace("idx", "uid2", {"key": None})
    store = indexers.indices["idx"]["key"]
    assert list(store) == [None, None]
    assert None in store


def test_none_result_keeps_the_previous_values(indexers: Indexers) -> None:
    indexers.replace("idx", "uid1", {"a": 1})
    indexers.replace("idx", "uid1", None)
    assert content(indexers.indices["idx"]) == {"a": [1]}


def test_a_new_result_replaces_the_objects_previous_one(indexers: Indexers) -> None:
    indexers.replace("idx", "uid1", {"a": 1, "b": 2})
    indexers.replace("idx", "uid2", {"a": 9})
    indexers.replace("idx", "uid1", {"a": 3, "c": 4})
    assert content(indexers.indices["idx"]) == {"a": [3, 9], "c": [4]}
    indexers.replace("idx", "uid1", "scalar")
    assert content(indexers.indices["idx"]) == {"a": [9], None: ["scalar"]}


def test_discarding_removes_the_object_and_empty_stores(indexers: Indexers) -> None:
    indexers.replace("idx", "uid1", {"a": 1, "b": 2})
    indexers.replace("idx", "uid2", {"a": 3})
    indexers.discard("idx", "uid1")
    assert content(indexers.indices["idx"]) == {"a": [3]}
    indexers.discard("idx", "uid2")
    assert content(indexers.indices["idx"]) == {}
    indexers.discard("idx", "uid2")  # idempotent
    indexers.discard("unknown", "uid2")


def test_discard_all_drops_the_object_from_every_index() -> None:
    indexers = Indexers(["one", "two"])
    indexers.replace("one", "uid1", "x")
    indexers.replace("two", "uid1", {"k": "y"})
    indexers.replace("two", "uid2", {"k": "z"})
    indexers.discard_all("uid1")
    assert content(indexers.indices["one"]) == {}
    assert content(indexers.indices["two"]) == {"k": ["z"]}


def test_unknown_index_names_are_created_on_first_use() -> None:
    indexers = Indexers()
    indexers.replace("late", "uid1", "x")
    assert content(indexers.indices["late"]) == {None: ["x"]}


def test_index_and_store_are_read_only_views() -> None:
    indexers = Indexers(["idx"])
    indexers.replace("idx", "uid1", {"a": 1})
    index = indexers.indices["idx"]
    store = index["a"]
    assert isinstance(store, Store)
    assert isinstance(store, Collection)
    for forbidden in ("__setitem__", "__delitem__", "pop", "update", "clear"):
        assert not hasattr(index, forbidden), forbidden
    for forbidden in ("append", "add", "remove", "discard", "clear"):
        assert not hasattr(store, forbidden), forbidden
    with pytest.raises(TypeError):
        indexers.indices["idx"] = index  # type: ignore[index]


def test_store_and_index_behave_as_collections() -> None:
    indexers = Indexers(["idx"])
    indexers.replace("idx", "uid1", {"a": "x", "b": "y"})
    indexers.replace("idx", "uid2", {"a": "z"})
    index = indexers.indices["idx"]
    assert len(index) == 2
    assert "a" in index
    assert "missing" not in index
    assert index.get("missing") is None
    assert sorted(index.keys()) == ["a", "b"]
    store = index["a"]
    assert len(store) == 2
    assert bool(store)
    assert "x" in store
    assert "nope" not in store
    assert sorted(store) == ["x", "z"]
    assert repr(store) in ("['x', 'z']", "['z', 'x']")
    assert "a" in repr(index)
    with pytest.raises(KeyError):
        index["missing"]


def test_many_objects_under_one_key_stay_consistent() -> None:
    indexers = Indexers(["idx"])
    for number in range(100):
        indexers.replace("idx", f"uid{number}", {number % 3: number})
    for number in range(0, 100, 2):
        indexers.discard("idx", f"uid{number}")
    index = indexers.indices["idx"]
    assert sum(len(store) for store in index.values()) == 50
    assert sorted(v for store in index.values() for v in store) == list(range(1, 100, 2))
