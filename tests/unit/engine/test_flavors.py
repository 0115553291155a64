"""Which library an async handler gets: its override, the setting, or detection from its module."""

from __future__ import annotations

import functools
import itertools
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
import trioperator as kopf
from trioperator._engine.flavors import choose_flavor, detect_flavor, needs_asyncio
from trioperator._engine.handlers import ChangingHandler, build_subhandler
from trioperator._engine.ids import HandlerId
from trioperator._engine.reasons import Reason

_counter = itertools.count()


@pytest.fixture
def module() -> Iterator[Any]:
    """Make a fresh module from source (registered in sys.modules, as imported code is)."""
    made: list[str] = []

    def make(source: str, **globals_: Any) -> types.ModuleType:
        name = f"_flavor_test_module_{next(_counter)}"
        mod = types.ModuleType(name)
        mod.__dict__.update(globals_)
        sys.modules[name] = mod
        made.append(name)
        exec(compile(source, f"<{name}>", "exec"), mod.__dict__)
        return mod

    yield make
    for name in made:
        sys.modules.pop(name, None)


HANDLER = "\nasync def fn(**_):\n    pass\n"


@pytest.mark.parametrize(
    ("imports", "flavor"),
    [
        ("", "trio"),
        ("import asyncio", "asyncio"),
        ("from asyncio import sleep", "asyncio"),
        ("from asyncio import Lock\nlock = Lock()\ndel Lock", "asyncio"),  # an object made from it
        ("import asyncio.subprocess as sp", "asyncio"),
        ("import trio", "trio"),
        ("import asyncio\nimport trio", "trio"),  # code that knows trio is trio code
        ("import asyncio\nfrom trio import sleep", "trio"),
        ("import anyio", "trio"),  # neutral: runs natively in trio
        ("import sniffio\nimport anyio\nimport logging", "trio"),
        ("import trioperator as kopf", "trio"),
    ],
)
def test_auto_detection_from_the_modules_imports(module: Any, imports: str, flavor: str) -> None:
    mod = module(imports + HANDLER)
    assert detect_flavor(mod.fn) == flavor


@pytest.mark.parametrize(
    "library",
    ["aiohttp", "kubernetes_asyncio.client", "aiofiles", "asyncpg", "motor.motor_asyncio"],
)
def test_asyncio_only_libraries_make_it_asyncio(module: Any, library: str) -> None:
    mod = module(HANDLER, lib=types.ModuleType(library))
    assert detect_flavor(mod.fn) == "asyncio"


@pytest.mark.parametrize("library", ["redis.asyncio", "sqlalchemy.ext.asyncio"])
def test_asyncio_submodules_of_other_libraries_make_it_asyncio(module: Any, library: str) -> None:
    mod = module(HANDLER, lib=types.ModuleType(library))
    assert detect_flavor(mod.fn) == "asyncio"


@pytest.mark.parametrize("library", ["httpx", "anyio.abc", "trio_asyncio", "redis"])
def test_other_libraries_do_not(module: Any, library: str) -> None:
    mod = module(HANDLER, lib=types.ModuleType(library))
    assert detect_flavor(mod.fn) == "trio"


def test_names_imported_from_asyncio_only_libraries_count(module: Any) -> None:
    client = module("class ClientSession:\n    pass\n", __name__="aiohttp.client")
    client.ClientSession.__module__ = "aiohttp.client"
    mod = module(HANDLER, ClientSession=client.ClientSession)
    assert detect_flavor(mod.fn) == "asyncio"


def test_partials_are_looked_through(module: Any) -> None:
    mod = module("import asyncio" + HANDLER)
    assert detect_flavor(functools.partial(mod.fn, x=1)) == "asyncio"
    assert detect_flavor(functools.partial(functools.partial(mod.fn), y=2)) == "asyncio"


def test_wrappers_are_looked_through(module: Any) -> None:
    inner = module("import asyncio" + HANDLER)
    neutral = module(
        "import functools\n"
        "def deco(fn):\n"
        "    @functools.wraps(fn)\n"
        "    async def wrapper(**kwargs):\n"
        "        return await fn(**kwargs)\n"
        "    return wrapper\n"
    )
    assert detect_flavor(neutral.deco(inner.fn)) == "asyncio"


def test_a_wrapper_from_a_trio_module_makes_it_trio(module: Any) -> None:
    inner = module("import asyncio" + HANDLER)
    trio_deco = module(
        "import functools, trio\n"
        "def deco(fn):\n"
        "    @functools.wraps(fn)\n"
        "    async def wrapper(**kwargs):\n"
        "        return await fn(**kwargs)\n"
        "    return wrapper\n"
    )
    assert detect_flavor(trio_deco.deco(inner.fn)) == "trio"


def test_methods_and_callable_objects_use_their_class_module(module: Any) -> None:
    mod = module(
        "import asyncio\n"
        "class Handlers:\n"
        "    async def method(self, **_):\n"
        "        pass\n"
        "    async def __call__(self, **_):\n"
        "        pass\n"
    )
    obj = mod.Handlers()
    assert detect_flavor(obj.method) == "asyncio"
    assert detect_flavor(obj) == "asyncio"


def test_the_decision_is_made_once_per_function(module: Any) -> None:
    mod = module(HANDLER)
    assert detect_flavor(mod.fn) == "trio"
    exec("import asyncio", mod.__dict__)  # imported later: the handler keeps its flavor
    assert detect_flavor(mod.fn) == "trio"
    assert detect_flavor(module("import asyncio" + HANDLER).fn) == "asyncio"


def test_the_override_wins_over_the_setting_which_wins_over_detection(module: Any) -> None:
    aio = module("import asyncio" + HANDLER).fn
    neutral = module(HANDLER).fn
    assert choose_flavor(aio) == "asyncio"
    assert choose_flavor(aio, setting="trio") == "trio"
    assert choose_flavor(neutral, setting="asyncio") == "asyncio"
    assert choose_flavor(aio, override="trio", setting="asyncio") == "trio"
    assert choose_flavor(neutral, override="asyncio", setting="trio") == "asyncio"


def _handler(fn: Any, flavor: Any = None) -> ChangingHandler:
    return ChangingHandler(fn=fn, id=HandlerId("fn"), reason=Reason.CREATE, flavor=flavor)


def test_the_loop_is_needed_only_for_async_asyncio_handlers(module: Any) -> None:
    aio = module("import asyncio" + HANDLER + "def sync_fn(**_):\n    pass\n")
    neutral = module(HANDLER)
    assert needs_asyncio([_handler(aio.fn)], setting="auto")
    assert not needs_asyncio([_handler(aio.sync_fn)], setting="auto")  # threads, as always
    assert not needs_asyncio([_handler(aio.sync_fn)], setting="asyncio")
    assert not needs_asyncio([_handler(neutral.fn)], setting="auto")
    assert not needs_asyncio([_handler(aio.fn)], setting="trio")
    assert needs_asyncio([_handler(neutral.fn, "asyncio")], setting="trio")
    assert needs_asyncio([_handler(neutral.fn)], setting="asyncio")
    assert not needs_asyncio([], setting="asyncio")


def test_decorators_store_the_flavor_and_reject_unknown_ones() -> None:
    registry = kopf.OperatorRegistry()

    @kopf.on.create("kopfexamples", flavor="asyncio", registry=registry)
    @kopf.daemon("kopfexamples", flavor="trio", registry=registry)
    @kopf.on.startup(registry=registry)
    async def fn(**_: Any) -> None:
        pass

    assert [handler.flavor for handler in registry.iter_all_handlers()] == [
        None,
        "asyncio",
        "trio",
    ]
    with pytest.raises(ValueError, match="flavor= must be 'trio', 'asyncio' or None"):
        kopf.on.update("kopfexamples", flavor="curio", registry=registry)  # type: ignore[arg-type]


def test_the_setting_rejects_unknown_flavors() -> None:
    settings = kopf.OperatorSettings()
    assert settings.execution.async_flavor == "auto"
    settings.execution.async_flavor = "asyncio"
    with pytest.raises(ValueError, match="async_flavor must be 'auto', 'trio' or 'asyncio'"):
        settings.execution.async_flavor = "curio"  # type: ignore[assignment]
    assert settings.execution.async_flavor == "asyncio"


def test_subhandlers_inherit_their_parents_override(module: Any) -> None:
    parent = _handler(module(HANDLER).fn, "asyncio")
    assert build_subhandler(module(HANDLER).fn, parent=parent).flavor == "asyncio"
    assert build_subhandler(module(HANDLER).fn, parent=parent, flavor="trio").flavor == "trio"
    assert build_subhandler(module(HANDLER).fn, parent=_handler(parent.fn)).flavor is None


def test_the_operator_takes_the_setting_as_an_option_too() -> None:
    settings = kopf.OperatorSettings()
    operator = kopf.Operator(settings=settings, async_flavor="asyncio")
    assert operator.settings.execution.async_flavor == "asyncio"
    assert kopf.Operator().settings.execution.async_flavor == "auto"
    with pytest.raises(ValueError, match="async_flavor must be"):
        kopf.Operator(async_flavor="curio")  # type: ignore[arg-type]
