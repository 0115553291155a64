"""The client logs in through the operator's vault: a 401 invalidates the credentials there
and the request goes again with the next ones, or with those of a new login round."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trioperator as kopf
from tests.integration.apiclient.conftest import configmap
from trioperator._client.apiclient.credentials import VaultFromThread
from trioperator._runtime.handling.apiclients import match_resources
from trioperator.testing import FakeAPI


@pytest.fixture
async def guarded() -> AsyncIterator[FakeAPI]:
    """A fake API that accepts only the token ``good``."""
    async with FakeAPI.serve(tokens=["good"]) as api:
        yield api


def info(api: FakeAPI, token: str, priority: int = 0) -> kopf.ConnectionInfo:
    return kopf.ConnectionInfo(server=api.url, token=token, priority=priority)


async def relogin(vault: kopf.Vault, fresh: kopf.ConnectionInfo, logins: list[float]) -> None:
    """The operator's authenticator, in short: log in whenever the vault runs empty."""
    while True:
        await vault.wait_for_emptiness()
        logins.append(trio.current_time())
        await vault.populate({"login": fresh})


async def test_rejected_credentials_give_way_to_the_next_ones(guarded: FakeAPI) -> None:
    vault = kopf.Vault({"bad": info(guarded, "bad", 10), "good": info(guarded, "good")})
    async with kopf.AsyncAPI(vault, matcher=match_resources) as api:
        await api.resource("configmaps").create(configmap("made"))
    assert guarded.has_object("configmaps", "made", "default")
    assert [key for key, _ in vault.items()] == ["good"]
    auth = [r.headers.get("authorization") for r in guarded.raw_requests]
    assert auth[0] == "Bearer bad"
    assert set(auth[1:]) == {"Bearer good"}


async def test_a_401_runs_the_login_again_once(guarded: FakeAPI) -> None:
    vault = kopf.Vault({"login": info(guarded, "stale")})
    logins: list[float] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(relogin, vault, info(guarded, "good"), logins)
        async with kopf.AsyncAPI(vault, matcher=match_resources) as api:
            cms = api.resource("configmaps")
            await cms.create(configmap("after-login"))
            await cms.get("after-login", namespace="default")
        nursery.cancel_scope.cancel()
    assert len(logins) == 1
    assert guarded.has_object("configmaps", "after-login", "default")


async def test_the_sync_client_logs_in_through_the_vault_from_its_thread(
    guarded: FakeAPI,
) -> None:
    vault = kopf.Vault({"login": info(guarded, "stale")})
    logins: list[float] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(relogin, vault, info(guarded, "good"), logins)
        credentials = VaultFromThread(vault, trio.lowlevel.current_trio_token())

        def in_thread() -> dict[str, Any]:
            with kopf.SyncAPI(credentials, matcher=match_resources) as api:
                cms = api.resource("configmaps")
                cms.create(configmap("from-thread", key="v"))
                return cms.get("from-thread", namespace="default")

        got = await trio.to_thread.run_sync(in_thread)
        nursery.cancel_scope.cancel()
    assert got["data"] == {"key": "v"}
    assert len(logins) == 1
    assert [key for key, _ in vault.items()] == ["login"]


async def test_fixed_credentials_all_rejected_fail_to_log_in(guarded: FakeAPI) -> None:
    async with kopf.connect_api(credentials=[info(guarded, "bad")]) as api:
        with pytest.raises(kopf.LoginError):
            await api.resource("configmaps").create(configmap("never"))
    assert not guarded.has_object("configmaps", "never", "default")


async def test_connect_api_reads_a_kubeconfig(guarded: FakeAPI, tmp_path: Any) -> None:
    path = guarded.kubeconfig(tmp_path, token="good")
    async with kopf.connect_api(str(path)) as api:
        await api.resource("configmaps").create(configmap("via-kubeconfig"))
    assert guarded.has_object("configmaps", "via-kubeconfig", "default")


async def test_a_watch_logs_in_again_on_401(autojump_clock: Any, guarded: FakeAPI) -> None:
    vault = kopf.Vault({"login": info(guarded, "stale")})
    logins: list[float] = []
    guarded.create_object("configmaps", configmap("watched"))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(relogin, vault, info(guarded, "good"), logins)
        api = kopf.AsyncAPI(vault, matcher=match_resources)
        async with api, api.resource("configmaps").watch(namespace="default") as events:
            kind, obj = await events.__anext__()
        nursery.cancel_scope.cancel()
    assert (kind, obj["metadata"]["name"]) == ("ADDED", "watched")
    assert len(logins) == 1
