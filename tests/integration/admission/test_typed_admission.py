"""Typed resources on the webhook server: typed admission handlers (the spec under review
decoded, an undecodable one rejected) and the conversion webhook's reviews."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
import trio
import trioperator as kopf
from tests.integration.admission.test_serving import OBJ, review, serving
from trioperator import typed
from trioperator._client.resources import ALL_VERBS, Resource
from trioperator._engine.rbac import required_permissions
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.settings import OperatorSettings
from trioperator._engine.webhooks import WebhookRejected
from trioperator._runtime.admission.admission import AdmissionServing, run_admission

__all__ = ["serving"]  # the fixture, shared with test_serving


class ExampleSpec(msgspec.Struct, kw_only=True):
    field: str


async def test_a_typed_validator_gets_a_struct_and_an_invalid_spec_is_rejected(
    registry: OperatorRegistry, serving: AdmissionServing
) -> None:
    seen: list[Any] = []

    @kopf.on.validate("kopfexamples", id="check", registry=registry)
    async def check(spec: ExampleSpec, **_: Any) -> None:
        seen.append(spec)

    allowed = await serving(review(), webhook="check")
    assert allowed["response"] == {"uid": "review-uid", "allowed": True}
    assert seen == [ExampleSpec(field="value")]

    invalid = {**OBJ, "spec": {"field": 5}}
    rejected = await serving(review(obj=invalid), webhook="check")
    assert rejected["response"]["allowed"] is False
    message = rejected["response"]["status"]["message"]
    assert "spec does not match ExampleSpec: Expected `str`, got `int` (at spec.field)" in message
    assert seen == [ExampleSpec(field="value")]  # not called for the invalid one


class SizeV1(msgspec.Struct):
    size: str


class SizeV2(msgspec.Struct):
    count: int


@typed.resource("serving.example.com", "v1", kind="Box", plural="boxes", storage=True)
class BoxV1(msgspec.Struct):
    spec: SizeV1


@typed.resource("serving.example.com", "v2", kind="Box", plural="boxes")
class BoxV2(msgspec.Struct):
    spec: SizeV2


@typed.conversion(BoxV1, BoxV2)
def box_up(box: BoxV1) -> BoxV2:
    return BoxV2(spec=SizeV2(count=len(box.spec.size)))


def _conversion_review(desired: str) -> bytes:
    box = {
        "apiVersion": "serving.example.com/v1",
        "kind": "Box",
        "metadata": {"name": "b1", "namespace": "ns1", "uid": "u"},
        "spec": {"size": "xxx"},
    }
    request = {"uid": "c-1", "desiredAPIVersion": desired, "objects": [box]}
    review = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": request,
    }
    return json.dumps(review).encode()


async def test_conversion_reviews_are_served_for_the_handled_resources(
    registry: OperatorRegistry, serving: AdmissionServing
) -> None:
    crd = "boxes.serving.example.com"
    with pytest.raises(WebhookRejected) as unserved:  # no handler names the resource yet
        await serving(_conversion_review("serving.example.com/v2"), webhook=f"conversion/{crd}")
    assert unserved.value.status == 404

    kopf.on.create(BoxV1, registry=registry)(lambda **_: None)
    converted = await serving(
        _conversion_review("serving.example.com/v2"), webhook=f"conversion/{crd}"
    )
    assert converted["kind"] == "ConversionReview"
    assert converted["response"]["uid"] == "c-1"
    assert converted["response"]["result"] == {"status": "Success"}
    assert converted["response"]["convertedObjects"][0]["spec"] == {"count": 3}

    failed = await serving(
        _conversion_review("serving.example.com/v9"), webhook=f"conversion/{crd}"
    )
    assert failed["response"]["result"]["status"] == "Failure"
    assert "No model of Box in serving.example.com/v9" in failed["response"]["result"]["message"]

    with pytest.raises(WebhookRejected) as garbage:
        await serving(b"{not json", webhook=f"conversion/{crd}")
    assert garbage.value.status == 400


def test_rbac_grants_patching_only_the_converted_crds() -> None:
    registry = OperatorRegistry()
    kopf.on.create(BoxV1, registry=registry)(lambda **_: None)
    settings = OperatorSettings()
    settings.admission.managed = "auto"
    known = {
        Resource(
            group="serving.example.com",
            version="v1",
            plural="boxes",
            kind="Box",
            namespaced=True,
            verbs=ALL_VERBS,
        )
    }
    permissions = required_permissions(registry, settings, known, namespaces=[])
    rules = [r for r in permissions.cluster if r.resources == ("customresourcedefinitions",)]
    assert any(r.verbs == ("patch",) and r.names == ("boxes.serving.example.com",) for r in rules)
    settings.admission.managed = None
    permissions = required_permissions(registry, settings, known, namespaces=[])
    assert not any(
        "patch" in r.verbs
        for r in permissions.cluster
        if r.resources == ("customresourcedefinitions",)
    )


async def test_conversions_alone_start_the_server_and_point_the_crd_at_it(
    autojump_clock: Any,
    fake_api: Any,
    api_client: Any,
    registry: OperatorRegistry,
    settings: OperatorSettings,
    insights: Any,
    helpers: Any,
    nursery: trio.Nursery,
) -> None:
    crd = "boxes.serving.example.com"
    fake_api.create_object("customresourcedefinitions", typed.crd_manifest(BoxV1, BoxV2))
    kopf.on.create(BoxV1, registry=registry)(lambda **_: None)  # no admission handlers at all
    server = helpers.FakeServer({"url": "https://127.0.0.1:9443", "caBundle": "Q0E="})
    settings.admission.server = server
    settings.admission.managed = "auto.kopf.dev"
    stopping = trio.Event()
    done = trio.Event()

    async def run(*, task_status: trio.TaskStatus[None]) -> None:
        try:
            await run_admission(
                api=api_client,
                registry=registry,
                settings=settings,
                fn=lambda *_, **__: {},  # type: ignore[arg-type,return-value]
                insights=insights,
                stopping=stopping,
                task_status=task_status,
            )
        finally:
            done.set()

    def conversion() -> Any:
        return fake_api.get_object("customresourcedefinitions", crd)["spec"].get("conversion")

    await nursery.start(run)
    assert server.running
    await helpers.wait_until(lambda: (conversion() or {}).get("strategy") == "Webhook")
    assert conversion() == {
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {"url": f"https://127.0.0.1:9443/conversion/{crd}", "caBundle": "Q0E="},
        },
    }
    await server.send({"url": "https://127.0.0.1:9444", "caBundle": "TkVX"})  # e.g. a new cert
    await helpers.wait_until(lambda: conversion()["webhook"]["clientConfig"]["caBundle"] == "TkVX")
    stopping.set()
    with trio.fail_after(60):
        await done.wait()
    assert conversion()["webhook"]["clientConfig"]["url"].startswith("https://127.0.0.1:9444/")
    # No admission handlers: no webhook configurations were written.
    assert not fake_api.has_object("validatingwebhookconfigurations", "auto.kopf.dev")
