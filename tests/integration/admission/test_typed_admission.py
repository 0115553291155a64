"""Typed admission handlers: the spec under review decoded, an undecodable one rejected."""

from __future__ import annotations

from typing import Any

import msgspec
import trioperator as kopf
from tests.integration.admission.test_serving import OBJ, review, serving
from trioperator._engine.registry import OperatorRegistry
from trioperator._runtime.admission import AdmissionServing

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
