"""Managed webhook configurations on both back ends: what the operator writes is accepted, and the
create-or-patch flow (404 for an absent one, 409 for a duplicate, the list replaced as a whole)
behaves alike.

The webhooks built here are the operator's own (``build_webhooks``), with awkward handler ids,
so the real server's validation of names, rules and selectors checks the mangling. They can
never be called: their namespace selector matches no namespace and they fail open.
"""

from __future__ import annotations

import uuid
from typing import Any

import trioperator as kopf
from trioperator._client.resources import Resource
from trioperator._engine.admission import build_webhooks
from trioperator._engine.handlers import WebhookHandler
from trioperator._engine.registry import OperatorRegistry

from .conftest import GROUP, MERGE, Backend

KINDS = ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")
BASE = "/apis/admissionregistration.k8s.io/v1"
WIDGETS = Resource(group=GROUP, version="v1", plural="widgets", kind="Widget")


def fn(**_: Any) -> None:
    pass


def webhooks(suffix: str, selector_value: str) -> list[dict[str, Any]]:
    registry = OperatorRegistry()
    for handler_id in ["plain", "Camel_Case", "_private", "fn/spec.field", "a b!", "x" * 300]:
        kopf.on.validate(GROUP, "v1", "widgets", id=handler_id, ignore_failures=True,
                         labels={"app": "x", "on": kopf.PRESENT, "off": kopf.ABSENT},
                         registry=registry)(fn)  # fmt: skip
    kopf.on.validate(
        GROUP, "v1", "widgets", id="sub", subresource="*", operations=["UPDATE", "DELETE"],
        side_effects=True, ignore_failures=True, registry=registry,
    )(fn)  # fmt: skip
    return build_webhooks(
        registry.get_handlers(WebhookHandler),
        resources={WIDGETS},
        name_suffix=suffix,
        client_config={"url": "https://127.0.0.1:1/hooks", "caBundle": "Q0E="},
        namespace_selector={"matchLabels": {"contract-admission": selector_value}},
        timeout_seconds=5,
    )


async def test_the_configuration_flow_and_the_webhooks_are_accepted(backend: Backend) -> None:
    token = uuid.uuid4().hex[:8]
    name = f"contract-{token}.trioperator.dev"
    built = webhooks(name, token)
    try:
        for kind in KINDS:
            path = f"{BASE}/{kind}/{name}"
            # Absent: a patch is a 404 (the operator then creates it).
            response = await backend.request("PATCH", path, {"webhooks": []}, content_type=MERGE)
            assert response.status_code == 404, response.text
            await backend.ok("POST", f"{BASE}/{kind}", {"metadata": {"name": name}})
            response = await backend.request("POST", f"{BASE}/{kind}", {"metadata": {"name": name}})
            assert response.status_code == 409, response.text

            patched = await backend.patch(path, {"webhooks": built})
            assert [w["name"] for w in patched["webhooks"]] == [w["name"] for w in built]
            for stored, sent in zip(patched["webhooks"], built, strict=True):
                # The real server adds defaults (e.g. reinvocationPolicy); what was sent stays.
                assert {key: stored[key] for key in sent} == sent

            # A merge-patch replaces the list as a whole: this is how webhooks are removed.
            patched = await backend.patch(path, {"webhooks": built[:1]})
            assert [w["name"] for w in patched["webhooks"]] == [built[0]["name"]]
            patched = await backend.patch(path, {"webhooks": []})
            assert not patched.get("webhooks")
    finally:
        for kind in KINDS:
            await backend.request("DELETE", f"{BASE}/{kind}/{name}")
