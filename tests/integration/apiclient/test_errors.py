"""API errors come out typed and carrying the server's Status; what is worth retrying is
retried a bounded number of times, with the delays the mock clock shows."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trioperator as kopf
from tests.integration.apiclient.conftest import configmap
from trioperator.testing import FakeAPI


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, kopf.APIBadRequestError),
        (403, kopf.APIForbiddenError),
        (404, kopf.APINotFoundError),
        (409, kopf.APIConflictError),
        (410, kopf.APIGoneError),
        (422, kopf.APIUnprocessableEntityError),
    ],
)
async def test_client_errors_are_typed_and_not_retried(
    api: kopf.AsyncAPI, fake_api: FakeAPI, status: int, error: type[kopf.APIError]
) -> None:
    cms = api.resource("configmaps")
    await cms.resolve()
    fake_api.inject("POST", "*/configmaps", status=status, body={
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status,
        "reason": "Because", "message": f"refused with {status}",
    })  # fmt: skip
    with pytest.raises(error) as info:
        await cms.create(configmap("x"))
    assert type(info.value) is error
    assert info.value.status == status
    assert info.value.message == f"refused with {status}"
    assert info.value.payload is not None
    assert info.value.payload["reason"] == "Because"
    assert len([r for r in fake_api.requests if r.method == "POST"]) == 1
    assert not fake_api.has_object("configmaps", "x", "default")


async def test_a_real_conflict_on_create(api: kopf.AsyncAPI, fake_api: FakeAPI) -> None:
    cms = api.resource("configmaps")
    await cms.create(configmap("twice"))
    with pytest.raises(kopf.APIConflictError) as info:
        await cms.create(configmap("twice"))
    assert info.value.reason == "AlreadyExists"
    assert not isinstance(info.value, kopf.APIFieldConflictError)


async def test_too_many_requests_are_retried_after_the_servers_delay(
    autojump_clock: Any, api: kopf.AsyncAPI, fake_api: FakeAPI
) -> None:
    cms = api.resource("configmaps")
    await cms.resolve()
    fake_api.inject("POST", "*/configmaps", status=429, headers={"Retry-After": "2"}, times=2)
    started = trio.current_time()
    await cms.create(configmap("later"))
    assert trio.current_time() - started == pytest.approx(4, abs=0.1)
    assert fake_api.has_object("configmaps", "later", "default")
    assert len([r for r in fake_api.requests if r.method == "POST"]) == 3


async def test_retries_are_bounded(
    autojump_clock: Any, api: kopf.AsyncAPI, fake_api: FakeAPI
) -> None:
    cms = api.resource("configmaps")
    await cms.resolve()
    fake_api.inject("POST", "*/configmaps", status=429, times=None)
    with pytest.raises(kopf.APITooManyRequestsError):
        await cms.create(configmap("never"))
    assert len([r for r in fake_api.requests if r.method == "POST"]) == 1 + api.settings.retries


async def test_server_errors_are_retried_for_reads_but_not_for_creations(
    autojump_clock: Any, api: kopf.AsyncAPI, fake_api: FakeAPI
) -> None:
    cms = api.resource("configmaps")
    await cms.create(configmap("r"))
    fake_api.inject("GET", "*/configmaps/r", status=503, times=2)
    started = trio.current_time()
    assert (await cms.get("r", namespace="default"))["metadata"]["name"] == "r"
    assert trio.current_time() - started == pytest.approx(0.5 + 1.0, abs=0.1)  # 0.5 s, doubled

    fake_api.inject("POST", "*/configmaps", status=500)
    with pytest.raises(kopf.APIServerError):
        await cms.create(configmap("s"))
    assert len([r for r in fake_api.requests if r.method == "POST"]) == 2  # "r", then "s" once


async def test_redirects_are_not_followed(api: kopf.AsyncAPI, fake_api: FakeAPI) -> None:
    cms = api.resource("configmaps")
    await cms.resolve()
    fake_api.inject(
        "GET", "*/configmaps/r", status=302, headers={"Location": "http://elsewhere.example/"}
    )
    with pytest.raises(kopf.APIRedirectError) as info:
        await cms.get("r", namespace="default")
    assert info.value.location == "http://elsewhere.example/"


async def test_responses_over_the_size_limit_are_refused(fake_api: FakeAPI) -> None:
    settings = kopf.APIClientSettings(max_response_size=4096)
    credentials = kopf.ConnectionInfo(server=fake_api.url, token="fake")
    fake_api.create_object("configmaps", configmap("big", blob="x" * 10_000))
    async with kopf.connect_api(credentials=credentials, settings=settings) as api:
        cms = api.resource(kopf.Resource(group="", version="v1", plural="configmaps"))
        with pytest.raises(kopf.APIResponseTooLargeError):
            await cms.get("big", namespace="default")
        fake_api.create_object("configmaps", configmap("small"))
        assert (await cms.get("small", namespace="default"))["metadata"]["name"] == "small"


async def test_a_slow_server_times_out(autojump_clock: Any, fake_api: FakeAPI) -> None:
    settings = kopf.APIClientSettings(request_timeout=5)
    credentials = kopf.ConnectionInfo(server=fake_api.url, token="fake")
    fake_api.inject("GET", "*/configmaps/slow", delay=60)
    async with kopf.connect_api(credentials=credentials, settings=settings) as api:
        cms = api.resource(kopf.Resource(group="", version="v1", plural="configmaps"))
        started = trio.current_time()
        with pytest.raises(kopf.APITimeoutError):
            await cms.get("slow", namespace="default")
        assert trio.current_time() - started == pytest.approx(5, abs=0.1)


SSA_CONFLICT = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": 'Apply failed with 2 conflicts: conflict with "kubectl-edit" using v1: .data.a'
    ', conflict with "other-operator": .data.b',
    "reason": "Conflict",
    "details": {
        "causes": [
            {
                "reason": "FieldManagerConflict",
                "message": 'conflict with "kubectl-edit" using v1',
                "field": ".data.a",
            },
            {
                "reason": "FieldManagerConflict",
                "message": 'conflict with "other-operator" with subresource "status"',
                "field": ".data.b",
            },
        ]
    },
    "code": 409,
}


async def test_a_conflict_status_in_all_its_wordings_is_parsed(
    api: kopf.AsyncAPI, fake_api: FakeAPI
) -> None:
    """The wordings the fake API does not produce itself (a manager of a subresource, of
    Kubernetes 1.22+); real applies and their conflicts: test_apply.py."""
    cms = api.resource("configmaps")
    await cms.resolve()
    fake_api.inject("PATCH", "*/configmaps/applied", status=409, body=SSA_CONFLICT)
    with pytest.raises(kopf.APIFieldConflictError) as info:
        await cms.apply(configmap("applied", a="1", b="2"), field_manager="my-operator")
    error = info.value
    assert isinstance(error, kopf.APIConflictError)
    assert error.managers == {"kubectl-edit", "other-operator"}
    assert [(c.field, c.manager, c.version, c.subresource) for c in error.conflicts] == [
        (".data.a", "kubectl-edit", "v1", ""),
        (".data.b", "other-operator", "", "status"),
    ]


async def test_apply_needs_a_field_manager_and_a_full_intent(
    api: kopf.AsyncAPI, fake_api: FakeAPI
) -> None:
    cms = api.resource("configmaps")
    with pytest.raises(ValueError, match="field manager"):
        await cms.apply(configmap("x"), field_manager="")
    with pytest.raises(ValueError, match="apiVersion and kind"):
        await cms.apply({"metadata": {"name": "x", "namespace": "default"}}, field_manager="m")
    with pytest.raises(ValueError, match="no name"):
        await cms.apply(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "default"}},
            field_manager="m",
        )
    assert not [r for r in fake_api.requests if r.method == "PATCH"]
