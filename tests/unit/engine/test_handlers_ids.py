"""Handler ids: stable names of callables (they key the progress stored on objects)."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from trioperator._engine.handlers import generate_id, get_callable_id


def plain(**_: Any) -> None:
    pass


class Holder:
    def method(self, **_: Any) -> None:
        pass

    @staticmethod
    def static(**_: Any) -> None:
        pass

    @classmethod
    def klass(cls, **_: Any) -> None:
        pass


class CallableObject:
    def __call__(self, **_: Any) -> None:
        pass


def decorated(fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(**kwargs: Any) -> Any:
        return fn(**kwargs)

    return wrapper


@decorated
def wrapped(**_: Any) -> None:
    pass


def test_plain_function() -> None:
    assert get_callable_id(plain) == "plain"


def test_nested_function_uses_the_qualified_name() -> None:
    def inner(**_: Any) -> None:
        pass

    assert get_callable_id(inner) == "test_nested_function_uses_the_qualified_name.<locals>.inner"


def test_methods() -> None:
    assert get_callable_id(Holder.method) == "Holder.method"
    assert get_callable_id(Holder().method) == "Holder.method"
    assert get_callable_id(Holder.static) == "Holder.static"
    assert get_callable_id(Holder.klass) == "Holder.klass"


def test_lambdas_are_named_by_their_location() -> None:
    fn = lambda **_: None  # noqa: E731
    line = fn.__code__.co_firstlineno
    assert get_callable_id(fn) == f"lambda:{__file__}:{line}"


def test_partials_are_unwrapped() -> None:
    assert get_callable_id(functools.partial(plain, x=1)) == "plain"
    assert get_callable_id(functools.partial(functools.partial(plain), y=2)) == "plain"


def test_functools_wraps_is_unwrapped() -> None:
    assert get_callable_id(wrapped) == "wrapped"
    assert get_callable_id(functools.partial(wrapped)) == "wrapped"


def test_callable_objects_are_named_by_their_class() -> None:
    assert get_callable_id(CallableObject()) == "CallableObject"


def test_self_wrapping_objects_do_not_loop_forever() -> None:
    class Loop:
        __qualname__ = "Loop"

        def __call__(self) -> None:
            pass

    loop = Loop()
    loop.__wrapped__ = loop  # type: ignore[attr-defined]
    assert get_callable_id(loop) == "Loop"


def test_non_callables_are_rejected() -> None:
    with pytest.raises(TypeError, match="non-callable"):
        get_callable_id(123)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, "plain"),
        ({"id": "explicit"}, "explicit"),
        ({"suffix": "spec.field"}, "plain/spec.field"),
        ({"id": "explicit", "suffix": "spec.field"}, "explicit/spec.field"),
        ({"prefix": "parent"}, "parent/plain"),
        ({"prefix": "parent", "id": "item1"}, "parent/item1"),
        ({"prefix": "a/b", "id": "c", "suffix": "spec"}, "a/b/c/spec"),
        ({"prefix": "", "suffix": ""}, "plain"),
    ],
)
def test_generate_id(kwargs: dict[str, Any], expected: str) -> None:
    assert generate_id(plain, **kwargs) == expected
