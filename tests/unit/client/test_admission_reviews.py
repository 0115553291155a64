"""AdmissionReview requests decoded (v1, v1beta1, garbage), responses built as Kopf builds them."""

from __future__ import annotations

import base64
import json
from typing import Any

import msgspec
import pytest
from trioperator._wire.admission import (
    MAX_CONTAINERS,
    ReviewDecodeError,
    build_response,
    decode_review,
)


def review(api_version: str = "admission.k8s.io/v1", **request: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "uid": "1ca13837-ad60-4c9e-abb8-86f29d6c0e84",
        "kind": {"group": "kopf.dev", "version": "v1", "kind": "KopfExample"},
        "resource": {"group": "kopf.dev", "version": "v1", "resource": "kopfexamples"},
        "requestKind": {"group": "kopf.dev", "version": "v1", "kind": "KopfExample"},
        "requestResource": {"group": "kopf.dev", "version": "v1", "resource": "kopfexamples"},
        "name": "kopf-example-1",
        "namespace": "default",
        "operation": "CREATE",
        "userInfo": {"username": "admin", "groups": ["system:masters"]},
        "object": {
            "apiVersion": "kopf.dev/v1",
            "kind": "KopfExample",
            "metadata": {"name": "kopf-example-1", "namespace": "default"},
            "spec": {"field": "value"},
        },
        "oldObject": None,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    payload.update(request)
    return {"apiVersion": api_version, "kind": "AdmissionReview", "request": payload}


@pytest.mark.parametrize("api_version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
@pytest.mark.parametrize("as_bytes", [True, False], ids=["bytes", "mapping"])
def test_both_versions_decode_from_bytes_and_mappings(api_version: str, as_bytes: bool) -> None:
    data = review(api_version, subResource="status", dryRun=True)
    decoded = decode_review(json.dumps(data).encode() if as_bytes else data)
    assert decoded.api_version == api_version
    request = decoded.request
    assert request.uid == "1ca13837-ad60-4c9e-abb8-86f29d6c0e84"
    assert (request.resource.group, request.resource.version, request.resource.resource) == (
        "kopf.dev",
        "v1",
        "kopfexamples",
    )
    assert request.sub_resource == "status"
    assert request.operation == "CREATE"
    assert request.dry_run is True
    assert request.user_info == {"username": "admin", "groups": ["system:masters"]}
    assert request.object == data["request"]["object"]
    assert request.old_object is None
    assert (request.name, request.namespace) == ("kopf-example-1", "default")


def test_core_resources_have_an_empty_group() -> None:
    data = review(resource={"group": "", "version": "v1", "resource": "pods"})
    assert decode_review(data).request.resource.group == ""
    del data["request"]["resource"]["group"]  # omitted when empty (omitempty in Go)
    assert decode_review(data).request.resource.group == ""


def test_unknown_fields_are_ignored() -> None:
    data = review(futureField={"x": 1})
    data["futureTopLevel"] = True
    assert decode_review(data).request.uid


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"", "not valid JSON"),
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "Not an AdmissionReview request"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "request"),
        (json.dumps(review(uid=None)).encode(), "uid"),
        (json.dumps(review(resource=None)).encode(), "resource"),
        (json.dumps(review(object="a string")).encode(), "object"),
        (json.dumps(review("admission.k8s.io/v2")).encode(), "Unsupported review version"),
        (json.dumps({**review(), "kind": "Pod"}).encode(), "Not an AdmissionReview but 'Pod'"),
    ],
)
def test_garbage_gets_a_clear_error(payload: bytes, message: str) -> None:
    with pytest.raises(ReviewDecodeError, match=message):
        decode_review(payload)


def test_a_plain_allowance_echoes_the_version_and_uid() -> None:
    decoded = decode_review(review("admission.k8s.io/v1beta1"))
    assert build_response(decoded, allowed=True) == {
        "apiVersion": "admission.k8s.io/v1beta1",
        "kind": "AdmissionReview",
        "response": {"uid": "1ca13837-ad60-4c9e-abb8-86f29d6c0e84", "allowed": True},
    }


def test_a_rejection_with_warnings_and_status() -> None:
    decoded = decode_review(review())
    response = build_response(
        decoded, allowed=False, warnings=["careful", "twice"], message="No!", code=499
    )
    assert response["response"] == {
        "uid": "1ca13837-ad60-4c9e-abb8-86f29d6c0e84",
        "allowed": False,
        "warnings": ["careful", "twice"],
        "status": {"message": "No!", "code": 499},
    }


def test_a_patch_is_base64_json_with_its_type() -> None:
    ops = [{"op": "add", "path": "/spec/x", "value": [1, 2, 3]}]
    response = build_response(decode_review(review()), allowed=True, json_patch=ops)
    assert response["response"]["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["response"]["patch"])) == ops
    msgspec.json.encode(response)  # everything in it is JSON-ready


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}", id="nested-100k"),
        pytest.param(json.dumps(review()).encode().replace(b'"value"', b'"\xff\xfe"'), id="utf8"),
    ],
)
def test_broken_input_is_a_decode_error_not_a_crash(payload: bytes) -> None:
    with pytest.raises(ReviewDecodeError, match="not valid JSON"):
        decode_review(payload)


def test_a_review_of_too_many_objects_is_refused_before_decoding() -> None:
    dense = review(object={"apiVersion": "kopf.dev/v1", "kind": "KopfExample", "spec": {}})
    dense["request"]["object"]["spec"]["items"] = [{}] * (MAX_CONTAINERS + 1)
    with pytest.raises(ReviewDecodeError, match="too many JSON objects and arrays"):
        decode_review(json.dumps(dense, separators=(",", ":")).encode())


def test_a_large_review_of_few_objects_decodes() -> None:
    # Many bytes, few containers: a long string (e.g. a ConfigMap's data) is fine.
    large = review()
    large["request"]["object"]["spec"]["field"] = "x" * (4 * MAX_CONTAINERS)
    decoded = decode_review(json.dumps(large).encode())
    assert decoded.request.object is not None
    assert len(decoded.request.object["spec"]["field"]) == 4 * MAX_CONTAINERS
