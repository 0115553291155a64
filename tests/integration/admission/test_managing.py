"""run_admission against the fake API on the mock clock: the server, the managed configurations."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import pytest
import trio
import trioperator as kopf
from trioperator._client.api import APIClient
from trioperator._client.errors import APIForbiddenError
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.settings import OperatorSettings
from trioperator._engine.webhooks import WebhookClientConfig, WebhookFn
from trioperator._runtime.admission.admission import AdmissionSetupError, run_admission
from trioperator.testing import FakeAPI

MANAGED = "auto.kopf.dev"


def fn(**_: Any) -> None:
    pass


async def webhook_fn(request: Any, **_: Any) -> dict[str, Any]:
    return {}


def webhooks(api: FakeAPI, plural: str) -> list[dict[str, Any]]:
    return list(api.get_object(plural, MANAGED).get("webhooks") or [])


def names(api: FakeAPI, plural: str) -> list[str]:
    return [w["name"] for w in webhooks(api, plural)]


def urls(api: FakeAPI, plural: str) -> list[str]:
    return [w["clientConfig"]["url"] for w in webhooks(api, plural)]


def has_configs(api: FakeAPI) -> bool:
    return all(
        api.has_object(plural, MANAGED) and "webhooks" in api.get_object(plural, MANAGED)
        for plural in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")
    )


@pytest.fixture
def handlers(registry: OperatorRegistry) -> None:
    kopf.on.validate("kopfexamples", id="check", registry=registry)(fn)
    kopf.on.validate("kopfexamples", id="keep", persistent=True, registry=registry)(fn)
    kopf.on.mutate("kopfexamples", id="defaults", registry=registry)(fn)


async def start(
    nursery: trio.Nursery,
    api_client: APIClient,
    registry: OperatorRegistry,
    settings: OperatorSettings,
    insights: Any,
    stopping: trio.Event,
    fn: WebhookFn = webhook_fn,
) -> trio.Event:
    """Start run_admission; return an event set when it has returned."""
    done = trio.Event()

    async def run(*, task_status: trio.TaskStatus[None]) -> None:
        try:
            await run_admission(
                api=api_client,
                registry=registry,
                settings=settings,
                fn=fn,
                insights=insights,
                stopping=stopping,
                task_status=task_status,
            )
        finally:
            done.set()

    await nursery.start(run)
    return done


@pytest.mark.usefixtures("handlers")
async def test_configurations_created_repatched_and_cleaned_up(
    autojump_clock: Any,
    fake_api: FakeAPI,
    api_client: APIClient,
    registry: OperatorRegistry,
    settings: OperatorSettings,
    insights: Any,
    helpers: Any,
    nursery: trio.Nursery,
) -> None:
    server = helpers.FakeServer({"url": "https://127.0.0.1:9443", "caBundle": "Q0E="})
    settings.admission.server = server
    settings.admission.managed = MANAGED
    stopping = trio.Event()
    done = await start(nursery, api_client, registry, settings, insights, stopping)
    assert server.running
    await helpers.wait_until(lambda: has_configs(fake_api))

    assert names(fake_api, "validatingwebhookconfigurations") == [
        "check.auto.kopf.dev",
        "keep.auto.kopf.dev",
    ]
    assert names(fake_api, "mutatingwebhookconfigurations") == ["defaults.auto.kopf.dev"]
    [check, _] = webhooks(fake_api, "validatingwebhookconfigurations")
    assert check["clientConfig"] == {"url": "https://127.0.0.1:9443/check", "caBundle": "Q0E="}
    assert check["rules"][0]["apiGroups"] == ["kopf.dev"]
    assert check["failurePolicy"] == "Fail"
    assert check["admissionReviewVersions"] == ["v1", "v1beta1"]

    # A new client config (e.g. a rotated certificate): patched again.
    await server.send({"url": "https://127.0.0.1:9444", "caBundle": "TkVX"})
    await helpers.wait_until(
        lambda: (
            urls(fake_api, "mutatingwebhookconfigurations") == ["https://127.0.0.1:9444/defaults"]
        )
    )
    assert urls(fake_api, "validatingwebhookconfigurations") == [
        "https://127.0.0.1:9444/check",
        "https://127.0.0.1:9444/keep",
    ]

    # Stopping: the non-persistent webhooks are removed while the server is still running.
    server_running_at_cleanup: list[bool] = []
    original_patch = api_client.patch

    async def spying_patch(*args: Any, **kwargs: Any) -> Any:
        server_running_at_cleanup.append(server.running)
        return await original_patch(*args, **kwargs)

    api_client.patch = spying_patch  # type: ignore[method-assign]
    stopping.set()
    with trio.fail_after(60):
        await done.wait()
    assert server_running_at_cleanup == [True, True]
    assert not server.running
    assert names(fake_api, "validatingwebhookconfigurations") == ["keep.auto.kopf.dev"]
    assert names(fake_api, "mutatingwebhookconfigurations") == []


@pytest.mark.usefixtures("handlers")
async def test_served_resources_changing_repatch_the_rules(
    autojump_clock: Any,
    fake_api: FakeAPI,
    api_client: APIClient,
    registry: OperatorRegistry,
    settings: OperatorSettings,
    insights: Any,
    helpers: Any,
    nursery: trio.Nursery,
) -> None:
    settings.admission.server = helpers.FakeServer()
    settings.admission.managed = MANAGED
    insights.webhook_resources = frozenset()
    await start(nursery, api_client, registry, settings, insights, trio.Event())
    await helpers.wait_until(lambda: has_configs(fake_api))
    assert names(fake_api, "validatingwebhookconfigurations") == []  # nothing served yet
    insights.revise(frozenset({helpers.EXAMPLES}))
    await helpers.wait_until(lambda: len(names(fake_api, "validatingwebhookconfigurations")) == 2)


@pytest.mark.usefixtures("handlers")
async def test_beyond_kopf_settings_reach_the_configurations(
    autojump_clock: Any,
    fake_api: FakeAPI,
    api_client: APIClient,
    registry: OperatorRegistry,
    settings: OperatorSettings,
    insights: Any,
    helpers: Any,
    nursery: trio.Nursery,
) -> None:
    service: WebhookClientConfig = {
        "service": {"namespace": "ops", "name": "operator", "port": 443},
        "caBundle": "Q0E=",
    }
    settings.admission.server = helpers.FakeServer(service)
    settings.admission.managed = MANAGED
    settings.admission.namespace_selector = {"matchLabels": {"admission": "on"}}
    settings.admission.timeout_seconds = 7
    await start(nursery, api_client, registry, settings, insights, trio.Event())
    await helpers.wait_until(lambda: has_configs(fake_api))
    [webhook] = webhooks(fake_api, "mutatingwebhookconfigurations")
    assert webhook["clientConfig"] == {
        "service": {"namespace": "ops", "name": "operator", "port": 443, "path": "/defaults"},
        "caBundle": "Q0E=",
    }
    assert webhook["namespaceSelector"] == {"matchLabels": {"admission": "on"}}
    assert webhook["timeoutSeconds"] == 7


@pytest.mark.usefixtures("handlers")
async def test_existing_configurations_are_overwritten(
    autojump_clock: Any,
    fake_api: FakeAPI,
    api_client: APIClient,
    registry: OperatorRegistry,
    settings: OperatorSettings,
    insights: Any,
    helpers: Any,
    nursery: trio.Nursery,
) -> None:
    stale = {"name": "stale.auto.kopf.dev", "clientConfig": {"url": "https://gone"}}
    fake_api.create_object(
        "validatingwebhookconfigurations",
        {"metadata": {"name": MANAGED}, "webhooks": [stale]},
    )
    settings.admission.server = helpers.FakeServer()
    settings.admission.managed = MANAGED
    await start(nursery, api_client, registry, settings, insights, trio.Event())
    await helpers.wait_until(lambda: has_configs(fake_api))
    await helpers.wait_until(
        lambda: "stale.auto.kopf.dev" not in names(fake_api, "validatingwebhookconfigurations")
    )
    assert names(fake_api, "validatingwebhookconfigurations") == [
        "check.auto.kopf.dev",
        "keep.auto.kopf.dev",
    ]


@pytest.mark.usefixtures("handlers")
async def test_a_kopf_shaped_server_an_async_generator(
    autojump_clock: Any,
    fake_api: FakeAPI,
    api_client: APIClient,
    registry: OperatorRegistry,
    settings: OperatorSettings,
    insights: Any,
    helpers: Any,
    nursery: trio.Nursery,
) -> None:
    received: list[Any] = []
    closed = trio.Event()

    async def tunnel(fn: WebhookFn) -> AsyncIterator[WebhookClientConfig]:
        received.append(fn)
        try:
            yield {"url": "https://tunnel.example.com/hooks"}
            await trio.sleep_forever()
        finally:
            closed.set()

    settings.admission.server = tunnel
    settings.admission.managed = MANAGED
    stopping = trio.Event()
    done = await start(nursery, api_client, registry, settings, insights, stopping, webhook_fn)
    await helpers.wait_until(lambda: has_configs(fake_api))
    assert received == [webhook_fn]
    assert urls(fake_api, "mutatingwebhookconfigurations") == [
        "https://tunnel.example.com/hooks/defaults"
    ]
    stopping.set()
    with trio.fail_after(60):
        await done.wait()
    assert closed.is_set()
    assert names(fake_api, "mutatingwebhookconfigurations") == []


@pytest.mark.usefixtures("handlers")
async def test_unmanaged_configurations_are_left_alone(
    autojump_clock: Any,
    fake_api: FakeAPI,
    api_client: APIClient,
    registry: OperatorRegistry,
    settings: OperatorSettings,
    insights: Any,
    helpers: Any,
    nursery: trio.Nursery,
    caplog_trioperator: pytest.LogCaptureFixture,
) -> None:
    server = helpers.FakeServer()
    settings.admission.server = server
    stopping = trio.Event()
    done = await start(nursery, api_client, registry, settings, insights, stopping)
    await trio.sleep(10)
    assert server.running
    assert fake_api.objects("validatingwebhookconfigurations") == []
    assert "Admission webhooks are served at https://127.0.0.1:9443" in caplog_trioperator.text
    stopping.set()
    with trio.fail_after(60):
        await done.wait()
    assert not server.running


@pytest.mark.usefixtures("handlers")
async def test_handlers_without_a_server_fail_loudly(
    autojump_clock: Any,
    api_client: APIClient,
    registry: OperatorRegistry,
    settings: OperatorSettings,
    insights: Any,
) -> None:
    with pytest.raises(AdmissionSetupError, match="no admission server/tunnel is configured"):
        await run_admission(
            api=api_client,
            registry=registry,
            settings=settings,
            fn=webhook_fn,
            insights=insights,
            stopping=trio.Event(),
        )


async def test_no_handlers_no_server(
    autojump_clock: Any,
    fake_api: FakeAPI,
    api_client: APIClient,
    registry: OperatorRegistry,
    settings: OperatorSettings,
    insights: Any,
    helpers: Any,
    nursery: trio.Nursery,
) -> None:
    server = helpers.FakeServer()
    settings.admission.server = server
    settings.admission.managed = MANAGED
    stopping = trio.Event()
    done = await start(nursery, api_client, registry, settings, insights, stopping)
    await trio.sleep(10)
    assert not server.running
    assert fake_api.objects("validatingwebhookconfigurations") == []
    stopping.set()
    with trio.fail_after(1):
        await done.wait()


@pytest.mark.usefixtures("handlers")
async def test_rbac_denial_of_creation_stops_loudly(
    autojump_clock: Any,
    fake_api: FakeAPI,
    api_client: APIClient,
    registry: OperatorRegistry,
    settings: OperatorSettings,
    insights: Any,
    helpers: Any,
    caplog_trioperator: pytest.LogCaptureFixture,
) -> None:
    fake_api.inject("PATCH", "/apis/admissionregistration.k8s.io/v1/*", status=403)
    settings.admission.server = helpers.FakeServer()
    settings.admission.managed = MANAGED
    with pytest.raises(BaseExceptionGroup) as info, trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                partial(
                    run_admission,
                    api=api_client,
                    registry=registry,
                    settings=settings,
                    fn=webhook_fn,
                    insights=insights,
                    stopping=trio.Event(),
                )
            )
    assert info.group_contains(APIForbiddenError, depth=None)
    assert "Not enough RBAC permissions to manage" in caplog_trioperator.text


@pytest.mark.usefixtures("handlers")
async def test_a_configuration_deleted_meanwhile_is_created_again(
    autojump_clock: Any,
    fake_api: FakeAPI,
    api_client: APIClient,
    registry: OperatorRegistry,
    settings: OperatorSettings,
    insights: Any,
    helpers: Any,
    nursery: trio.Nursery,
) -> None:
    server = helpers.FakeServer()
    settings.admission.server = server
    settings.admission.managed = MANAGED
    await start(nursery, api_client, registry, settings, insights, trio.Event())
    await helpers.wait_until(lambda: has_configs(fake_api))
    fake_api.delete_object("mutatingwebhookconfigurations", MANAGED)
    await server.send({"url": "https://127.0.0.1:9444"})
    await helpers.wait_until(
        lambda: (
            has_configs(fake_api)
            and urls(fake_api, "mutatingwebhookconfigurations")
            == ["https://127.0.0.1:9444/defaults"]
        )
    )


@pytest.mark.usefixtures("handlers")
async def test_a_failed_cleanup_is_logged_and_does_not_fail_the_stop(
    autojump_clock: Any,
    fake_api: FakeAPI,
    api_client: APIClient,
    registry: OperatorRegistry,
    settings: OperatorSettings,
    insights: Any,
    helpers: Any,
    nursery: trio.Nursery,
    caplog_trioperator: pytest.LogCaptureFixture,
) -> None:
    settings.admission.server = helpers.FakeServer()
    settings.admission.managed = MANAGED
    stopping = trio.Event()
    done = await start(nursery, api_client, registry, settings, insights, stopping)
    await helpers.wait_until(lambda: has_configs(fake_api))
    fake_api.inject("PATCH", "/apis/admissionregistration.k8s.io/v1/*", status=500, times=None)
    stopping.set()
    with trio.fail_after(60):
        await done.wait()
    assert "The admission webhooks 'auto.kopf.dev' were not cleaned up" in caplog_trioperator.text
    assert names(fake_api, "mutatingwebhookconfigurations") == ["defaults.auto.kopf.dev"]


class ReturningServer:
    """A trio-native server whose serving ends on its own (e.g. a bug in a custom server)."""

    async def serve(self, fn: WebhookFn, *, configs: Any, task_status: Any) -> None:
        task_status.started()


@pytest.mark.usefixtures("handlers")
async def test_a_server_that_is_not_one_fails_at_once(
    api_client: APIClient,
    registry: OperatorRegistry,
    settings: OperatorSettings,
    insights: Any,
) -> None:
    settings.admission.server = "https://not-a-server"
    with pytest.raises(AdmissionSetupError, match="must be a webhook server or a callable"):
        await run_admission(
            api=api_client,
            registry=registry,
            settings=settings,
            fn=webhook_fn,
            insights=insights,
            stopping=trio.Event(),
        )


@pytest.mark.usefixtures("handlers")
async def test_a_server_that_stops_on_its_own_fails_loudly(
    autojump_clock: Any,
    api_client: APIClient,
    registry: OperatorRegistry,
    settings: OperatorSettings,
    insights: Any,
) -> None:
    settings.admission.server = ReturningServer()
    with pytest.raises(BaseExceptionGroup) as info, trio.fail_after(60):
        await run_admission(
            api=api_client,
            registry=registry,
            settings=settings,
            fn=webhook_fn,
            insights=insights,
            stopping=trio.Event(),
        )
    assert info.group_contains(AdmissionSetupError, match="stopped on its own", depth=None)
