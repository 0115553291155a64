"""Which async library a user's coroutine function is written for: trio or asyncio.

trioperator runs on trio. Kopf's handlers are written for asyncio: they ``await asyncio.sleep()``,
use aiohttp or kubernetes_asyncio, hold ``asyncio.Lock`` objects. Such code runs on an asyncio
loop that the runtime provides on top of trio (trio-asyncio); everything else runs natively in
trio. This module decides, without any I/O, which of the two a function gets (its *flavor*).

The rule, in order (the first that applies wins):

1. The handler's own ``flavor=`` option (``"trio"`` or ``"asyncio"``).
2. ``settings.execution.async_flavor`` if it is ``"trio"`` or ``"asyncio"``.
3. ``"auto"`` (the default): the module(s) the function comes from are inspected once and the
   answer is cached per function:

   - the modules are those of every layer of the callable: ``functools.partial`` objects,
     ``functools.wraps`` wrappers (``__wrapped__``), bound methods (their function) and callable
     objects (their class's ``__call__``); each layer's module is read from the function's
     ``__globals__`` (or its ``__module__`` in ``sys.modules``);
   - a module *uses trio* if one of its global names is the ``trio`` module or a submodule, or
     a function, class or object from it, or from ``trio_asyncio`` (code that bridges to asyncio
     explicitly is trio code);
   - a module *uses asyncio* in the same sense for ``asyncio`` and the asyncio-only libraries in
     ``ASYNCIO_ONLY_LIBRARIES`` (``import asyncio``, ``from aiohttp import ClientSession``,
     ``lock = asyncio.Lock()`` all count), and for any module with a dotted component named
     ``asyncio`` (``redis.asyncio``, ``sqlalchemy.ext.asyncio``);
   - if any layer's module uses trio: trio. Else if any uses asyncio: asyncio. Else: trio.

   Libraries that work with both (anyio, sniffio, httpx, trioperator itself) count for neither:
   code that uses only them runs natively in trio, and works the same under asyncio if forced.

Sync functions have no flavor: they run in worker threads either way.
"""

from __future__ import annotations

import functools
import inspect
import sys
import types
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final, Literal, Protocol, TypeAlias

__all__ = [
    "ASYNCIO_ONLY_LIBRARIES",
    "FLAVOR_SETTINGS",
    "FLAVORS",
    "Flavor",
    "FlavorSetting",
    "FlavoredHandler",
    "check_flavor",
    "check_flavor_setting",
    "choose_flavor",
    "detect_flavor",
    "is_async_callable",
    "needs_asyncio",
]

Flavor: TypeAlias = Literal["trio", "asyncio"]
"""The library a coroutine function runs under."""

FlavorSetting: TypeAlias = Literal["auto", "trio", "asyncio"]
"""``settings.execution.async_flavor``: a flavor for all, or ``auto`` (detected per function)."""

FLAVORS: Final[frozenset[str]] = frozenset({"trio", "asyncio"})
FLAVOR_SETTINGS: Final[frozenset[str]] = frozenset({"auto", "trio", "asyncio"})

ASYNCIO_ONLY_LIBRARIES: Final[frozenset[str]] = frozenset(
    {
        "asyncio",
        "aiohttp",
        "kubernetes_asyncio",
        "aiofiles",
        "aioredis",
        "asyncpg",
        "motor",
        "aiokafka",
        "aio_pika",
        "aiomysql",
        "aiopg",
        "aiosqlite",
        "aiobotocore",
        "aioboto3",
        "uvloop",
    }
)
"""Top-level packages whose async code needs an asyncio loop (they do not run on trio)."""

TRIO_LIBRARIES: Final[frozenset[str]] = frozenset({"trio", "trio_asyncio"})
"""Top-level packages that mark a module as written for trio."""


def check_flavor(flavor: object) -> Flavor | None:
    """Validate a handler's ``flavor=`` option (``None``: as the settings say)."""
    if flavor is not None and flavor not in FLAVORS:
        raise ValueError(f"flavor= must be 'trio', 'asyncio' or None, got {flavor!r}.")
    return flavor  # type: ignore[return-value]


def check_flavor_setting(value: object) -> FlavorSetting:
    """Validate ``settings.execution.async_flavor`` (and the CLI option that sets it)."""
    if value not in FLAVOR_SETTINGS:
        raise ValueError(f"async_flavor must be 'auto', 'trio' or 'asyncio', got {value!r}.")
    return value  # type: ignore[return-value]


def choose_flavor(
    fn: Callable[..., Any],
    *,
    override: Flavor | None = None,
    setting: FlavorSetting = "auto",
) -> Flavor:
    """The flavor ``fn`` runs under: its handler's override, else the setting, else detected."""
    if override is not None:
        return override
    if setting != "auto":
        return setting
    return detect_flavor(fn)


def is_async_callable(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` gives a coroutine (partials and callable objects looked through)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 -- callable objects with an async __call__
    )


class FlavoredHandler(Protocol):
    """A handler as flavors see it (``trioperator._engine.handlers`` builds on this module)."""

    @property
    def fn(self) -> Callable[..., Any]: ...
    @property
    def flavor(self) -> Flavor | None: ...


def needs_asyncio(handlers: Iterable[FlavoredHandler], *, setting: FlavorSetting) -> bool:
    """Whether any of these handlers runs under asyncio (so the operator needs the loop)."""
    return any(
        is_async_callable(handler.fn)
        and choose_flavor(handler.fn, override=handler.flavor, setting=setting) == "asyncio"
        for handler in handlers
    )


_detected: weakref.WeakKeyDictionary[Any, Flavor] = weakref.WeakKeyDictionary()


def detect_flavor(fn: Callable[..., Any]) -> Flavor:
    """The ``auto`` flavor of ``fn``: decided once per callable, from its modules' globals."""
    try:
        return _detected[fn]
    except (KeyError, TypeError):  # TypeError: not weak-referenceable or not hashable
        pass
    uses_trio = uses_asyncio = False
    for namespace in _namespaces(fn):
        kinds = _library_kinds(namespace)
        uses_trio = uses_trio or "trio" in kinds
        uses_asyncio = uses_asyncio or "asyncio" in kinds
    flavor: Flavor = "asyncio" if uses_asyncio and not uses_trio else "trio"
    try:
        _detected[fn] = flavor
    except TypeError:
        pass  # cannot be cached: decided again on the next call (cheap enough, and correct)
    return flavor


def _layers(fn: Any) -> Iterator[Any]:
    """Every callable that calling ``fn`` goes through: partials, wrappers, methods."""
    seen: set[int] = set()
    pending = [fn]
    while pending:
        obj = pending.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        yield obj
        if isinstance(obj, functools.partial):
            pending.append(obj.func)
        if isinstance(obj, types.MethodType):
            pending.append(obj.__func__)
        wrapped = getattr(obj, "__wrapped__", None)
        if wrapped is not None:
            pending.append(wrapped)
        if not isinstance(obj, (types.FunctionType, types.MethodType, functools.partial, type)):
            call = getattr(type(obj), "__call__", None)  # noqa: B004 -- a callable object
            if isinstance(call, types.FunctionType):
                pending.append(call)


def _namespaces(fn: Any) -> Iterator[Mapping[str, Any]]:
    for layer in _layers(fn):
        if isinstance(layer, types.FunctionType):
            yield layer.__globals__
        else:
            module = sys.modules.get(getattr(layer, "__module__", None) or "")
            if module is not None:
                yield vars(module)


_MODULE_KINDS: dict[str, frozenset[str]] = {}


def _module_kind(name: str) -> frozenset[str]:
    """``{"trio"}``, ``{"asyncio"}`` or nothing, for a dotted module name (memoized)."""
    try:
        return _MODULE_KINDS[name]
    except KeyError:
        pass
    parts = name.split(".")
    kind: frozenset[str] = frozenset()
    if parts[0] in TRIO_LIBRARIES:
        kind = frozenset({"trio"})
    elif parts[0] in ASYNCIO_ONLY_LIBRARIES or "asyncio" in parts:
        kind = frozenset({"asyncio"})
    _MODULE_KINDS[name] = kind
    return kind


def _library_kinds(namespace: Mapping[str, Any]) -> set[str]:
    kinds: set[str] = set()
    for value in list(namespace.values()):
        if isinstance(value, types.ModuleType):
            name = value.__name__
        elif isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType)):
            name = getattr(value, "__module__", None) or ""
        else:
            name = getattr(type(value), "__module__", None) or ""
        if isinstance(name, str) and name:
            kinds |= _module_kind(name)
    return kinds
