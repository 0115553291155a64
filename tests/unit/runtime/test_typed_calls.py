"""Typed handler arguments: which handlers opt in, what they receive, what they return."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
import trio
import trio.lowlevel
import trioperator as kopf
from trioperator import typed
from trioperator._engine.errors import PermanentError
from trioperator._engine.handlers import ChangingHandler
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.selectors import Selector
from trioperator._runtime.handling.typed_calls import typed_handler


class Spec(msgspec.Struct, kw_only=True, rename="camel"):
    image_name: str
    replicas: int = 1


class Status(msgspec.Struct, kw_only=True, omit_defaults=True):
    ready: int = 0
    phase: str | None = None


@typed.resource("example.com", "v1", kind="Thing")
class Thing(msgspec.Struct, kw_only=True):
    spec: Spec
    status: Status | None = None


BODY: dict[str, Any] = {
    "apiVersion": "example.com/v1",
    "kind": "Thing",
    "metadata": {"name": "n", "namespace": "ns", "uid": "u"},
    "spec": {"imageName": "nginx", "replicas": 2},
    "status": {"ready": 1},
}


def _kwargs(body: dict[str, Any] = BODY, **extra: Any) -> dict[str, Any]:
    return {
        "body": kopf.Body(body),
        "spec": kopf.Body(body).spec,
        "status": kopf.Body(body).status,
        "patch": kopf.Patch(),
        **extra,
    }


def test_dict_handlers_are_not_wrapped() -> None:
    def plain(spec, **_):  # type: ignore[no-untyped-def]
        pass

    def dicts(spec: kopf.Spec, old: dict[str, Any] | None, body: kopf.Body, **_: Any) -> None:
        pass

    def unresolvable(spec: "NotImportedAnywhere", **_: Any) -> None:  # type: ignore[name-defined]  # noqa: F821, UP037
        pass

    for fn in (plain, dicts, unresolvable):
        assert typed_handler(fn, field=None) is None
    registry = OperatorRegistry()
    kopf.on.create("things", registry=registry)(dicts)
    (handler,) = registry.get_handlers(ChangingHandler)
    assert handler.fn is dicts


def test_spec_and_status_are_decoded_and_results_encoded() -> None:
    received: list[Any] = []

    def fn(spec: Spec, status: Status, patch: kopf.Patch, **_: Any) -> Status:
        received.extend([spec, status])
        patch["status"] = Status(phase="Running")
        return Status(ready=spec.replicas)

    wrapper = typed_handler(fn, field=None)
    assert wrapper is not None
    kwargs = _kwargs()
    result = wrapper(**kwargs)
    assert received == [Spec(image_name="nginx", replicas=2), Status(ready=1)]
    assert result == {"ready": 2}
    assert kwargs["patch"] == {"status": {"phase": "Running"}}


async def test_async_handlers_stay_async_and_keep_their_identity() -> None:
    async def fn(spec: Spec, **_: Any) -> int:
        await trio.lowlevel.checkpoint()
        return spec.replicas

    wrapper = typed_handler(fn, field=None)
    assert wrapper is not None
    assert wrapper.__wrapped__ is fn  # type: ignore[attr-defined]  # flavor detection looks inside
    assert await wrapper(**_kwargs()) == 2


def test_old_and_new_are_specs_or_field_values_or_whole_objects() -> None:
    received: list[Any] = []

    def specs(old: Spec | None, new: Spec, **_: Any) -> None:
        received.append((old, new))

    def whole(old: Thing | None, new: Thing, **_: Any) -> None:
        received.append((old, new))

    def field(old: Spec | None, new: Spec, **_: Any) -> None:
        received.append((old, new))

    new_body = {**BODY, "spec": {"imageName": "nginx", "replicas": 5}}
    typed_handler(specs, field=None)(**_kwargs(old=BODY, new=new_body))  # type: ignore[misc]
    assert received[-1] == (
        Spec(image_name="nginx", replicas=2),
        Spec(image_name="nginx", replicas=5),
    )
    typed_handler(specs, field=None)(**_kwargs(old=None, new=new_body))  # type: ignore[misc]
    assert received[-1] == (None, Spec(image_name="nginx", replicas=5))
    # No old object (creation): None, even where the annotation does not allow it.
    typed_handler(field, field=None)(**_kwargs(old=None, new=new_body))  # type: ignore[misc]
    assert received[-1] == (None, Spec(image_name="nginx", replicas=5))
    typed_handler(field, field=("spec", "x"))(**_kwargs(old=None, new=None))  # type: ignore[misc]
    assert received[-1] == (None, None)
    typed_handler(whole, field=None)(**_kwargs(old=BODY, new=new_body))  # type: ignore[misc]
    assert received[-1][1] == Thing(
        spec=Spec(image_name="nginx", replicas=5), status=Status(ready=1)
    )
    typed_handler(field, field=("spec",))(**_kwargs(old=BODY["spec"], new=new_body["spec"]))  # type: ignore[misc]
    assert received[-1] == (
        Spec(image_name="nginx", replicas=2),
        Spec(image_name="nginx", replicas=5),
    )


def test_string_annotations_are_evaluated_in_the_handlers_module() -> None:
    def fn(spec: "Spec", **_: Any) -> str:  # noqa: UP037 -- the point of the test
        return spec.image_name

    wrapper = typed_handler(fn, field=None)
    assert wrapper is not None
    assert wrapper(**_kwargs()) == "nginx"


def test_an_invalid_spec_does_not_call_the_handler() -> None:
    calls: list[Any] = []

    def fn(spec: Spec, **_: Any) -> None:
        calls.append(spec)

    wrapper = typed_handler(fn, field=None)
    assert wrapper is not None
    bad = {**BODY, "spec": {"imageName": "nginx", "replicas": "2"}}
    with pytest.raises(
        PermanentError,
        match=r"spec does not match Spec: Expected `int`, got `str` \(at spec.replicas\)",
    ):
        wrapper(**_kwargs(bad))
    missing = {**BODY, "spec": {"replicas": 2}}
    with pytest.raises(
        PermanentError, match=r"Object missing required field `imageName` \(at spec\)"
    ):
        wrapper(**_kwargs(missing))
    assert calls == []


def test_events_are_posted_only_about_existing_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    posted: list[tuple[Any, str, str]] = []

    def warn(obj: Any, *, reason: str, message: str = "") -> None:
        posted.append((obj["metadata"]["name"], reason, message))

    monkeypatch.setattr("trioperator._runtime.handling.typed_calls.warn", warn)

    def fn(spec: Spec, **_: Any) -> None:
        pass

    wrapper = typed_handler(fn, field=None)
    assert wrapper is not None
    bad = {**BODY, "spec": {"replicas": 2}}
    with pytest.raises(PermanentError):
        wrapper(**_kwargs(bad))
    assert posted == [
        (
            "n",
            "InvalidSpec",
            "spec does not match Spec: Object missing required field `imageName` (at spec)",
        )
    ]
    # Under admission, a new object has no uid yet: the rejection tells the client instead.
    unborn = {**bad, "metadata": {"name": "m", "namespace": "ns"}}
    with pytest.raises(PermanentError):
        wrapper(**_kwargs(unborn))
    assert len(posted) == 1


def test_misused_annotations_are_refused_at_registration() -> None:
    def whole_spec(spec: Thing, **_: Any) -> None:
        pass

    def body_spec(body: Spec, **_: Any) -> None:
        pass

    with pytest.raises(TypeError, match="is a whole resource"):
        kopf.on.create(Thing, registry=OperatorRegistry())(whole_spec)
    with pytest.raises(TypeError, match="body can only be annotated with a resource model"):
        kopf.on.create(Thing, registry=OperatorRegistry())(body_spec)


def test_models_select_their_resource_in_every_decorator() -> None:
    registry = OperatorRegistry()

    def fn(spec: Spec, **_: Any) -> None:
        pass

    kopf.on.create(Thing, registry=registry)(fn)
    kopf.on.update(Thing, registry=registry)(fn)
    kopf.on.field(Thing, field="spec.replicas", registry=registry)(fn)
    kopf.daemon(Thing, registry=registry)(fn)
    kopf.on.reconcile(Thing, registry=registry)(fn)
    expected = Selector(group="example.com", version="v1", plural="things")
    handlers = list(registry.iter_all_handlers())
    assert len(handlers) == 5
    assert {repr(getattr(h, "selector", None)) for h in handlers} == {repr(expected)}
    changing = registry.get_handlers(ChangingHandler)
    assert all(h.fn is not fn and h.fn.__wrapped__ is fn for h in changing)  # type: ignore[attr-defined]


def test_models_name_the_resource_alone() -> None:
    with pytest.raises(TypeError, match="names the resource on its own"):
        kopf.on.create(Thing, "things")
    with pytest.raises(TypeError, match="names the resource on its own"):
        kopf.on.create(Thing, group="example.com")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"group": "example"}, "a DNS name with a dot"),
        ({"version": "1"}, "Not a Kubernetes API version"),
        ({"kind": "thing"}, "CamelCase"),
        ({"plural": "Things"}, "lowercase DNS label"),
        ({"short_names": "th"}, "a list of names"),
        ({"scope": "Global"}, "'Namespaced' or 'Cluster'"),
    ],
)
def test_resource_declarations_are_checked(kwargs: dict[str, Any], message: str) -> None:
    options: dict[str, Any] = {"group": "example.com", "version": "v1", **kwargs}
    with pytest.raises((TypeError, ValueError), match=message):
        typed.resource(options.pop("group"), options.pop("version"), **options)(Thing)


def test_a_model_needs_a_spec() -> None:
    class NoSpec(msgspec.Struct):
        status: Status

    with pytest.raises(TypeError, match="needs a 'spec' field"):
        typed.resource("example.com", "v1")(NoSpec)
