"""The operator's WebhookFn end to end, as a server calls it: bytes in, the response review out."""

from __future__ import annotations

import base64
import json
import threading
from typing import Any

import pytest
import trio
import trioperator as kopf
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.settings import OperatorSettings
from trioperator._engine.webhooks import WebhookRejected
from trioperator._runtime.admission.admission import AdmissionServing
from trioperator._runtime.handling.execution import Execution
from trioperator._runtime.support.metrics import OperatorMetrics

OBJ: dict[str, Any] = {
    "apiVersion": "kopf.dev/v1",
    "kind": "KopfExample",
    "metadata": {"name": "ex1", "namespace": "ns1", "uid": "uid-1", "labels": {"app": "x"}},
    "spec": {"field": "value"},
}


def review(
    *,
    operation: str = "CREATE",
    obj: dict[str, Any] | None = OBJ,
    old: dict[str, Any] | None = None,
    api_version: str = "admission.k8s.io/v1",
    **extra: Any,
) -> bytes:
    request: dict[str, Any] = {
        "uid": "review-uid",
        "kind": {"group": "kopf.dev", "version": "v1", "kind": "KopfExample"},
        "resource": {"group": "kopf.dev", "version": "v1", "resource": "kopfexamples"},
        "name": "ex1",
        "namespace": "ns1",
        "operation": operation,
        "userInfo": {"username": "admin", "groups": ["system:masters"]},
        "object": obj,
        "oldObject": old,
        "dryRun": False,
    }
    request.update(extra)
    return json.dumps(
        {"apiVersion": api_version, "kind": "AdmissionReview", "request": request}
    ).encode()


@pytest.fixture
def serving(
    registry: OperatorRegistry, settings: OperatorSettings, insights: Any, execution: Execution
) -> AdmissionServing:
    return AdmissionServing(
        registry=registry,
        settings=settings,
        memo=kopf.Memo(shared="operator"),
        indices={},
        insights=insights,
        execution=execution,
    )


def decoded_patch(response: dict[str, Any]) -> Any:
    assert response["response"]["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["response"]["patch"]))


async def test_a_validator_rejects_with_its_message_and_code(
    registry: OperatorRegistry, serving: AdmissionServing
) -> None:
    @kopf.on.validate("kopfexamples", id="check", registry=registry)
    async def check(spec: Any, **_: Any) -> None:
        if spec["field"] == "value":
            raise kopf.AdmissionError("The field must not be 'value'.", code=499)

    response = await serving(review(), webhook="check")
    assert response == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": "review-uid",
            "allowed": False,
            "status": {"message": "The field must not be 'value'.", "code": 499},
        },
    }


async def test_v1beta1_reviews_are_answered_in_v1beta1(
    registry: OperatorRegistry, serving: AdmissionServing
) -> None:
    kopf.on.validate("kopfexamples", id="ok", registry=registry)(lambda **_: None)
    response = await serving(review(api_version="admission.k8s.io/v1beta1"), webhook="ok")
    assert response["apiVersion"] == "admission.k8s.io/v1beta1"
    assert response["response"] == {"uid": "review-uid", "allowed": True}


async def test_a_mutator_patch_and_warnings_of_a_sync_handler_in_a_thread(
    registry: OperatorRegistry, serving: AdmissionServing
) -> None:
    threads: list[threading.Thread] = []

    @kopf.on.mutate("kopfexamples", id="defaults", registry=registry)
    def defaults(spec: Any, patch: kopf.Patch, warnings: list[str], **_: Any) -> None:
        threads.append(threading.current_thread())
        patch.spec["numbers"] = [1, 2, 3]
        patch.metadata.labels["app"] = None
        warnings.append("Defaults were added.")

    response = await serving(review(), webhook="defaults")
    assert threads[0] is not threading.main_thread()
    assert response["response"]["allowed"] is True
    assert response["response"]["warnings"] == ["Defaults were added."]
    assert decoded_patch(response) == [
        {"op": "remove", "path": "/metadata/labels/app"},
        {"op": "add", "path": "/spec/numbers", "value": [1, 2, 3]},
    ]


async def test_all_handlers_run_without_an_id_and_the_most_specific_error_is_reported(
    registry: OperatorRegistry, serving: AdmissionServing
) -> None:
    called: list[str] = []

    @kopf.on.validate("kopfexamples", id="arbitrary", registry=registry)
    async def arbitrary(**_: Any) -> None:
        called.append("arbitrary")
        raise ValueError("boom")

    @kopf.on.validate("kopfexamples", id="admission", registry=registry)
    async def admission(**_: Any) -> None:
        called.append("admission")
        raise kopf.AdmissionError("Not admitted.", code=403)

    @kopf.on.mutate("kopfexamples", id="mutator", registry=registry)
    async def mutator(patch: kopf.Patch, warnings: list[str], **_: Any) -> None:
        called.append("mutator")
        warnings.append("w")
        patch.spec["x"] = 1

    response = await serving(review())
    assert called == ["arbitrary", "admission", "mutator"]
    assert response["response"]["allowed"] is False
    assert response["response"]["status"] == {"message": "Not admitted.", "code": 403}
    assert response["response"]["warnings"] == ["w"]


async def test_arbitrary_errors_are_500(
    registry: OperatorRegistry, serving: AdmissionServing
) -> None:
    @kopf.on.validate("kopfexamples", id="broken", registry=registry)
    async def broken(**_: Any) -> None:
        raise kopf.TemporaryError("later", delay=10)

    response = await serving(review(), webhook="broken")
    assert response["response"]["status"] == {"message": "later", "code": 500}


async def test_the_kwargs_of_a_review(
    registry: OperatorRegistry, serving: AdmissionServing, insights: Any
) -> None:
    seen: dict[str, Any] = {}
    insights.memos["uid-1"] = kopf.Memo(mine="served")

    @kopf.on.validate("kopfexamples", id="spy", param="p", registry=registry)
    async def spy(**kwargs: Any) -> None:
        seen.update(kwargs)

    old = {**OBJ, "spec": {"field": "old"}}
    await serving(
        review(operation="UPDATE", old=old, dryRun=True),
        webhook="spy",
        headers={"authorization": "Bearer x"},
        sslpeer={"subject": ()},
    )
    assert seen["dryrun"] is True
    assert seen["operation"] == "UPDATE"
    assert seen["subresource"] is None
    assert seen["userinfo"] == {"username": "admin", "groups": ["system:masters"]}
    assert seen["headers"] == {"authorization": "Bearer x"}
    assert seen["headers"]["Authorization"] == "Bearer x"  # as with Kopf's aiohttp headers
    assert seen["sslpeer"] == {"subject": ()}
    assert seen["param"] == "p"
    assert seen["old"]["spec"] == {"field": "old"}
    assert seen["new"]["spec"] == {"field": "value"}
    assert list(seen["diff"]) == [("change", ("spec", "field"), "old", "value")]
    assert seen["memo"] == {"mine": "served"}  # the served object's memo
    assert (seen["name"], seen["namespace"], seen["uid"]) == ("ex1", "ns1", "uid-1")


async def test_creation_gets_a_throwaway_memo_and_deletion_the_old_object(
    registry: OperatorRegistry, serving: AdmissionServing, insights: Any
) -> None:
    seen: list[Any] = []
    insights.memos["uid-1"] = kopf.Memo(mine="served")

    @kopf.on.validate("kopfexamples", id="spy", registry=registry)
    async def spy(memo: Any, body: Any, new: Any, **_: Any) -> None:
        memo["touched"] = True
        seen.append((dict(memo), body["metadata"]["name"], new))

    await serving(review(), webhook="spy")
    await serving(review(), webhook="spy")
    await serving(review(operation="DELETE", obj=None, old=OBJ), webhook="spy")
    assert seen[0] == ({"shared": "operator", "touched": True}, "ex1", OBJ)
    assert seen[1] == seen[0]  # not remembered between creations
    assert seen[2] == ({"mine": "served", "touched": True}, "ex1", None)


async def test_mutators_are_not_called_on_deletion_unless_asked(
    registry: OperatorRegistry, serving: AdmissionServing
) -> None:
    called: list[str] = []
    kopf.on.mutate("kopfexamples", id="usual", registry=registry)(
        lambda **_: called.append("usual")
    )
    kopf.on.mutate("kopfexamples", id="deleting", operations=["DELETE"], registry=registry)(
        lambda **_: called.append("deleting")
    )
    response = await serving(review(operation="DELETE", obj=None, old=OBJ))
    assert called == ["deleting"]
    assert response["response"]["allowed"] is True


@pytest.mark.parametrize(
    ("payload", "webhook", "status", "message"),
    [
        (b"{broken", None, 400, "not valid JSON"),
        (b'{"kind": "AdmissionReview"}', None, 400, "Not an AdmissionReview request"),
        (review(), "unknown", 404, "Unknown webhook 'unknown'"),
        (
            review(resource={"group": "", "version": "v1", "resource": "pods"}),
            None,
            404,
            "No admission handlers for the resource pods.v1",
        ),
        (review(userInfo=None), None, 400, "User info is missing"),
        (review(obj=None), None, 400, "Either old or new object is missing"),
    ],
)
async def test_requests_that_cannot_be_reviewed_get_http_errors_and_log_lines(
    registry: OperatorRegistry,
    serving: AdmissionServing,
    caplog_trioperator: pytest.LogCaptureFixture,
    payload: bytes,
    webhook: str | None,
    status: int,
    message: str,
) -> None:
    kopf.on.validate("kopfexamples", id="known", registry=registry)(lambda **_: None)
    with pytest.raises(WebhookRejected, match=message) as info:
        await serving(payload, webhook=webhook)
    assert info.value.status == status
    assert f"Admission request rejected with HTTP {status}" in caplog_trioperator.text
    # The operator goes on serving.
    response = await serving(review(), webhook="known")
    assert response["response"]["allowed"] is True


async def test_a_failure_of_the_operator_itself_is_a_500_not_a_crash(
    registry: OperatorRegistry,
    serving: AdmissionServing,
    insights: Any,
    caplog_trioperator: pytest.LogCaptureFixture,
) -> None:
    kopf.on.validate("kopfexamples", id="known", registry=registry)(lambda **_: None)

    def broken(resource: Any, body: Any) -> None:
        raise RuntimeError("a bug")

    insights.recall_memo = broken
    with pytest.raises(WebhookRejected, match="a bug") as info:
        await serving(review(operation="UPDATE", old=OBJ), webhook="known")
    assert info.value.status == 500
    assert "Admission request failed in the operator" in caplog_trioperator.text


async def test_cancellation_is_not_swallowed(
    registry: OperatorRegistry, serving: AdmissionServing, autojump_clock: Any
) -> None:
    @kopf.on.validate("kopfexamples", id="slow", registry=registry)
    async def slow(**_: Any) -> None:
        await trio.sleep(100)

    with trio.move_on_after(1) as scope:
        await serving(review(), webhook="slow")
    assert scope.cancelled_caught


async def test_handlers_are_cut_off_after_the_webhook_timeout(
    registry: OperatorRegistry,
    settings: OperatorSettings,
    serving: AdmissionServing,
    autojump_clock: Any,
) -> None:
    settings.admission.timeout_seconds = 5

    @kopf.on.validate("kopfexamples", id="slow", registry=registry)
    async def slow(**_: Any) -> None:
        await trio.sleep(100)

    started = trio.current_time()
    response = await serving(review(), webhook="slow")
    assert trio.current_time() - started == 5
    assert response["response"]["allowed"] is False
    assert response["response"]["status"] == {
        "message": "Admission handlers did not finish within 5 seconds.",
        "code": 500,
    }


async def test_memos_of_unserved_objects_are_kept_between_reviews_until_deleted(
    registry: OperatorRegistry, serving: AdmissionServing
) -> None:
    seen: list[Any] = []

    @kopf.on.validate("kopfexamples", id="count", registry=registry)
    async def count(memo: Any, operation: str, **_: Any) -> None:
        memo["reviews"] = memo.get("reviews", 0) + 1
        seen.append((operation, memo["reviews"]))

    await serving(review(), webhook="count")  # created: a throw-away memo
    await serving(review(operation="UPDATE", old=OBJ), webhook="count")
    await serving(review(operation="UPDATE", old=OBJ), webhook="count")
    await serving(review(operation="DELETE", obj=None, old=OBJ, dryRun=True), webhook="count")
    await serving(review(operation="DELETE", obj=None, old=OBJ), webhook="count")
    await serving(review(operation="UPDATE", old=OBJ), webhook="count")
    assert seen == [
        ("CREATE", 1),
        ("UPDATE", 1),
        ("UPDATE", 2),
        ("DELETE", 3),
        ("DELETE", 4),  # a dry-run deletion keeps it
        ("UPDATE", 1),  # forgotten with the deletion
    ]


async def test_reviews_are_counted_by_webhook_and_result(
    registry: OperatorRegistry, settings: OperatorSettings, insights: Any, execution: Execution
) -> None:
    @kopf.on.validate("kopfexamples", id="check", registry=registry)
    async def check(spec: Any, **_: Any) -> None:
        if spec["field"] == "forbidden":
            raise kopf.AdmissionError("No.")

    metrics = OperatorMetrics()
    serving = AdmissionServing(
        registry=registry,
        settings=settings,
        memo=kopf.Memo(),
        indices={},
        insights=insights,
        execution=execution,
        metrics=metrics,
    )
    forbidden = {**OBJ, "spec": {"field": "forbidden"}}
    for body in (OBJ, forbidden, forbidden):
        await serving(review(obj=body), webhook="check")
    await serving(review())  # no webhook id in the path: all handlers
    reviews = "trioperator_admission_reviews_total"
    value = metrics.registry.get_sample_value
    assert value(reviews, {"webhook": "check", "result": "allowed"}) == 1
    assert value(reviews, {"webhook": "check", "result": "denied"}) == 2
    assert value(reviews, {"webhook": "", "result": "allowed"}) == 1
