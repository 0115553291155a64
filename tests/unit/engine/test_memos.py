from __future__ import annotations

import copy
import dataclasses
import pickle
from typing import Any

import pytest
from trioperator._engine.memos import Memo, copy_memo


def test_attributes_and_keys_are_the_same_storage() -> None:
    memo = Memo()
    memo.f1 = 100
    assert memo["f1"] == 100
    memo["f2"] = 200
    assert memo.f2 == 200
    assert set(memo.keys()) == {"f1", "f2"}
    assert isinstance(memo, dict)


def test_missing_attributes_raise_attribute_errors() -> None:
    memo = Memo()
    with pytest.raises(AttributeError, match="'missing'"):
        _ = memo.missing
    assert getattr(memo, "missing", "default") == "default"
    assert not hasattr(memo, "missing")
    with pytest.raises(KeyError):
        _ = memo["missing"]


def test_deleting_attributes() -> None:
    memo = Memo(x=1)
    del memo.x
    assert "x" not in memo
    with pytest.raises(AttributeError):
        del memo.x


def test_dict_methods_are_not_shadowed() -> None:
    memo = Memo()
    memo["keys"] = "a value"
    assert callable(memo.keys)
    assert memo["keys"] == "a value"
    assert memo.get("counter", 0) == 0


def test_no_instance_dict_is_used() -> None:
    memo = Memo()
    memo.x = 1
    assert vars(memo) == {}


def test_repr() -> None:
    assert repr(Memo(a=1)) == "Memo({'a': 1})"


def test_copy_is_shallow_and_of_the_same_class() -> None:
    shared: list[int] = []
    memo = Memo(queue=shared, n=1)
    clone = copy.copy(memo)
    assert type(clone) is Memo
    assert clone == memo
    assert clone is not memo
    clone.n = 2
    clone.own = "x"
    assert memo == {"queue": shared, "n": 1}
    clone.queue.append(1)
    assert memo.queue == [1]


def test_deepcopy_and_pickle() -> None:
    memo = Memo(a=[1])
    deep = copy.deepcopy(memo)
    assert type(deep) is Memo
    assert deep == memo
    assert deep.a is not memo.a
    restored = pickle.loads(pickle.dumps(memo))
    assert type(restored) is Memo
    assert restored == memo


def test_per_object_memos_from_the_operator_memo() -> None:
    lock = object()
    operator_memo = Memo(lock=lock)
    memo1 = copy_memo(operator_memo)
    memo2 = copy_memo(operator_memo)
    assert isinstance(memo1, Memo)
    assert memo1 is not operator_memo
    assert memo1 is not memo2
    assert memo1.lock is lock
    assert memo2.lock is lock
    memo1.counter = 1
    assert "counter" not in memo2
    assert "counter" not in operator_memo


def test_without_an_operator_memo_each_object_gets_a_fresh_one() -> None:
    memo1 = copy_memo(None)
    memo2 = copy_memo(None)
    assert memo1 == {}
    assert isinstance(memo1, Memo)
    assert memo1 is not memo2


def test_custom_memo_classes_are_copied_with_copy_copy() -> None:
    @dataclasses.dataclass
    class Context:
        template: str
        seen: list[Any] = dataclasses.field(default_factory=list)

    operator_memo = Context(template="Hello, {name}!")
    memo = copy_memo(operator_memo)
    assert isinstance(memo, Context)
    assert memo is not operator_memo
    assert memo.seen is operator_memo.seen  # shallow


def test_custom_memo_classes_can_be_global() -> None:
    class Global:
        def __copy__(self) -> Global:
            return self

    operator_memo = Global()
    assert copy_memo(operator_memo) is operator_memo
