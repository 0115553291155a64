"""Admission as a branch of a whole running operator (fake API, mock clock)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import trio
import trioperator as kopf
from trioperator._client.credentials import ConnectionInfo, Vault
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.admission.admission import AdmissionSetupError
from trioperator._runtime.program.operator import Operator
from trioperator.testing import FakeAPI

MANAGED = "auto.kopf.dev"

OBJ: dict[str, Any] = {
    "apiVersion": "kopf.dev/v1",
    "kind": "KopfExample",
    "metadata": {"name": "ex1", "namespace": "default"},
    "spec": {"field": "value"},
}


def review(obj: dict[str, Any], operation: str = "UPDATE") -> bytes:
    request = {
        "uid": "r1",
        "resource": {"group": "kopf.dev", "version": "v1", "resource": "kopfexamples"},
        "operation": operation,
        "userInfo": {"username": "admin"},
        "object": obj,
        "oldObject": obj if operation == "UPDATE" else None,
    }
    payload = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return json.dumps(payload).encode()


def messages(api: FakeAPI) -> str:
    return "\n".join(event.get("message", "") for event in api.objects("events", "default"))


def names(api: FakeAPI, plural: str) -> list[str]:
    if not api.has_object(plural, MANAGED):
        return []
    return [w["name"] for w in api.get_object(plural, MANAGED).get("webhooks") or []]


async def test_an_operator_serves_reviews_manages_configurations_and_stops_in_time(
    autojump_clock: Any,
    caplog_trioperator: pytest.LogCaptureFixture,
    crd_api: FakeAPI,
    registry: OperatorRegistry,
    settings: OperatorSettings,
    helpers: Any,
) -> None:
    @kopf.on.create("kopfexamples", id="remember", registry=registry)
    async def remember(memo: Any, **_: Any) -> None:
        memo["created"] = True

    @kopf.on.validate("kopfexamples", id="check", registry=registry)
    async def check(memo: Any, warnings: list[str], **_: Any) -> None:
        warnings.append(f"memo: {dict(memo)}")

    @kopf.on.mutate("kopfexamples", id="keep", persistent=True, registry=registry)
    async def keep(patch: kopf.Patch, **_: Any) -> None:
        patch.spec["mutated"] = True

    server = helpers.FakeServer()
    settings.admission.server = server
    settings.admission.managed = MANAGED
    settings.process.ultimate_exiting_timeout = 30
    settings.posting.loggers = True  # log lines of objects become k8s Events, but not reviews'
    vault = Vault({"fake": ConnectionInfo(server=crd_api.url, token="fake")})
    operator = Operator(registry=registry, settings=settings, vault=vault)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(operator.main)
        with trio.fail_after(60):
            await operator.ready_flag.wait()
        assert server.running
        await helpers.wait_until(
            lambda: names(crd_api, "validatingwebhookconfigurations") == ["check.auto.kopf.dev"]
        )
        assert names(crd_api, "mutatingwebhookconfigurations") == ["keep.auto.kopf.dev"]

        # The served object's memo reaches the validator; the mutation comes back as a patch.
        created = crd_api.create_object("kopfexamples", copy.deepcopy(OBJ))
        await helpers.wait_until(
            lambda: (
                "kopf.zalando.org/last-handled-configuration"
                in crd_api.get_object("kopfexamples", "ex1", "default")["metadata"].get(
                    "annotations", {}
                )
            )
        )
        response = await server.review(review(created), webhook="check")
        assert response["response"]["warnings"] == ["memo: {'created': True}"]
        response = await server.review(review(created), webhook="keep")
        assert response["response"]["patchType"] == "JSONPatch"
        # The reviews' log lines are not posted as k8s Events (the handlers' ones are).
        await helpers.wait_until(lambda: "remember" in messages(crd_api))
        await trio.sleep(10)
        assert "Handler 'check'" not in messages(crd_api)
        assert "Handler 'keep'" not in messages(crd_api)

        started = trio.current_time()
        operator.stop()
    assert trio.current_time() - started < 30
    assert not server.running
    assert names(crd_api, "validatingwebhookconfigurations") == []
    assert names(crd_api, "mutatingwebhookconfigurations") == ["keep.auto.kopf.dev"]


async def test_an_operator_with_webhooks_but_no_server_fails_at_startup(
    autojump_clock: Any,
    crd_api: FakeAPI,
    registry: OperatorRegistry,
    settings: OperatorSettings,
) -> None:
    kopf.on.validate("kopfexamples", id="check", registry=registry)(lambda **_: None)
    vault = Vault({"fake": ConnectionInfo(server=crd_api.url, token="fake")})
    operator = Operator(registry=registry, settings=settings, vault=vault)
    with pytest.raises(AdmissionSetupError, match=r"settings\.admission\.server"):
        with trio.fail_after(60):
            await operator.main()
    assert not operator.ready_flag.is_set()
