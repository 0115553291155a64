"""ConnectionInfo and the credentials Vault: selection, expiry, invalidation, login rounds."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import pathlib
import ssl

import pytest
import trio
import trio.testing
import trustme
from trio.testing import MockClock
from trioperator._client.credentials import (
    AiohttpSession,
    ConnectionInfo,
    LoginError,
    Vault,
    VaultKey,
)

UTC = datetime.UTC
T0 = datetime.datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)


class FakeWallClock:
    """A wall clock the test moves by hand (expiration is wall-clock time, not trio time)."""

    def __init__(self, now: datetime.datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime.datetime:
        return self.now


def info(token: str, **kwargs: object) -> ConnectionInfo:
    return ConnectionInfo(server="https://k8s", token=token, **kwargs)  # type: ignore[arg-type]


# ------------------------------------------------------------------ ConnectionInfo


def test_connection_info_is_frozen_hashable_and_keyword_only() -> None:
    a = info("t")
    assert a == info("t")
    assert hash(a) == hash(info("t"))
    assert {a, info("t"), info("u")} == {info("t"), info("u")}
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.token = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        ConnectionInfo("https://k8s")  # type: ignore[call-arg]


def test_connection_info_defaults() -> None:
    ci = ConnectionInfo(server="https://k8s")
    values = {f.name: getattr(ci, f.name) for f in dataclasses.fields(ci)}
    assert values.pop("server") == "https://k8s"
    assert values.pop("priority") == 0
    assert values.pop("trust_env") is False
    assert set(values.values()) == {None}


def test_connection_info_normalises_expiration_to_aware_utc() -> None:
    naive = ConnectionInfo(server="s", expiration=datetime.datetime(2030, 1, 1, 12))
    assert naive.expiration == T0
    assert naive.expiration is not None
    assert naive.expiration.tzinfo is UTC

    plus_two = datetime.timezone(datetime.timedelta(hours=2))
    local = datetime.datetime(2030, 1, 1, 14, tzinfo=plus_two)
    aware = ConnectionInfo(server="s", expiration=local)
    assert aware.expiration == T0
    assert aware.expiration is not None
    assert aware.expiration.tzinfo is UTC


def test_connection_info_coerces_text_data_and_path_objects() -> None:
    ci = ConnectionInfo(
        server="s",
        ca_data="PEM",  # type: ignore[arg-type]
        ca_path=pathlib.Path("/etc/ca.crt"),  # type: ignore[arg-type]
    )
    assert ci.ca_data == b"PEM"
    assert ci.ca_path == "/etc/ca.crt"


def test_connection_info_repr_hides_secrets() -> None:
    ci = ConnectionInfo(
        server="https://k8s",
        token="TOKEN123",
        password="PASS123",
        username="admin",
        private_key_data=b"KEY123",
        ca_data=b"12345",
    )
    text = repr(ci)
    assert "TOKEN123" not in text
    assert "PASS123" not in text
    assert "KEY123" not in text
    assert "username='admin'" in text
    assert "ca_data=<5 bytes>" in text
    assert "token=<hidden>" in text


@pytest.mark.parametrize(
    ("scheme", "token", "headers"),
    [
        (None, None, {}),
        (None, "t", {"Authorization": "Bearer t"}),
        ("Bearer", "t", {"Authorization": "Bearer t"}),
        ("Digest", "t", {"Authorization": "Digest t"}),
        ("Negotiate", None, {"Authorization": "Negotiate"}),
    ],
)
def test_connection_info_http_headers(
    scheme: str | None, token: str | None, headers: dict[str, str]
) -> None:
    assert ConnectionInfo(server="s", scheme=scheme, token=token).as_http_headers() == headers


# ------------------------------------------------------------------ selection and expiry


async def test_select_prefers_the_highest_priority() -> None:
    vault = Vault(
        {"low": info("low", priority=-5), "high": info("high", priority=10), "mid": info("mid")}
    )
    assert await vault.select() == (VaultKey("high"), info("high", priority=10))
    assert [key for key, _ in vault.items()] == ["high", "mid", "low"]
    assert [key async for key, _ in vault] == ["high", "mid", "low"]


async def test_select_ties_are_stable() -> None:
    vault = Vault({"a": info("a"), "b": info("b")})
    for _ in range(3):
        key, _ = await vault.select()
        assert key == "a"


async def test_expired_items_are_ignored_on_populate() -> None:
    clock = FakeWallClock()
    past = T0 - datetime.timedelta(seconds=1)
    vault = Vault(now=clock)
    await vault.populate({"old": info("old", expiration=past), "now": info("now", expiration=T0)})
    assert vault.is_empty()
    assert vault.items() == []


async def test_items_expire_lazily_and_lower_priority_takes_over() -> None:
    clock = FakeWallClock()
    soon = T0 + datetime.timedelta(minutes=5)
    vault = Vault(
        {"short": info("short", priority=1, expiration=soon), "long": info("long")},
        now=clock,
    )
    assert (await vault.select())[0] == "short"
    clock.now = soon
    assert (await vault.select())[0] == "long"
    assert [key for key, _ in vault.items()] == ["long"]


async def test_expiry_of_everything_requests_a_login_on_select() -> None:
    clock = FakeWallClock()
    vault = Vault({"a": info("a", expiration=T0 + datetime.timedelta(hours=1))}, now=clock)
    assert not vault.is_empty()
    clock.now = T0 + datetime.timedelta(hours=1)
    assert vault.is_empty()

    async with trio.open_nursery() as nursery:
        results: list[tuple[VaultKey, ConnectionInfo]] = []

        async def selector() -> None:
            results.append(await vault.select())

        nursery.start_soon(selector)
        with trio.fail_after(1):
            await vault.wait_for_emptiness()  # the select() asked for a login
        # Same credentials, but with a new expiration: a different ConnectionInfo, accepted.
        await vault.populate({"a": info("a", expiration=T0 + datetime.timedelta(hours=2))})

    assert results == [(VaultKey("a"), info("a", expiration=T0 + datetime.timedelta(hours=2)))]


async def test_populate_rejects_non_connection_info() -> None:
    vault = Vault()
    with pytest.raises(TypeError, match="ConnectionInfo"):
        await vault.populate({"x": "https://k8s"})  # type: ignore[dict-item]


# ------------------------------------------------------------------ invalidation


async def test_invalidated_info_is_never_reaccepted() -> None:
    vault = Vault({"a": info("a"), "b": info("b")})
    await vault.invalidate(VaultKey("a"), info("a"))
    assert [key for key, _ in vault.items()] == ["b"]

    await vault.populate({"a": info("a")})  # the same stale token again: ignored
    assert [key for key, _ in vault.items()] == ["b"]

    await vault.populate({"again": info("a")})  # even under another key
    assert [key for key, _ in vault.items()] == ["b"]

    await vault.populate({"a": info("a2")})  # something new is welcome
    assert vault.items() == [(VaultKey("b"), info("b")), (VaultKey("a"), info("a2"))]


async def test_invalidation_of_an_already_replaced_item_keeps_the_new_one() -> None:
    vault = Vault({"k": info("old")})
    old_key, old_info = await vault.select()

    # Two requests failed with the same old credentials. The first one's invalidation triggers
    # a re-login that puts new credentials under the same key ...
    async with trio.open_nursery() as nursery:
        nursery.start_soon(vault.invalidate, old_key, old_info)
        await vault.wait_for_emptiness()
        await vault.populate({"k": info("new")})

    # ... and the second, late invalidation must not remove them.
    with trio.fail_after(1):
        await vault.invalidate(old_key, old_info)
    assert await vault.select() == (VaultKey("k"), info("new"))
    assert not vault.is_empty()


async def test_invalidate_with_other_items_left_returns_at_once() -> None:
    vault = Vault({"a": info("a", priority=1), "b": info("b")})
    with trio.fail_after(1):
        await vault.invalidate(VaultKey("a"), info("a", priority=1))
    assert await vault.select() == (VaultKey("b"), info("b"))


async def test_invalidate_last_item_waits_for_relogin() -> None:
    vault = Vault({"a": info("a")})
    done: list[str] = []

    async def request() -> None:
        await vault.invalidate(VaultKey("a"), info("a"), exc=RuntimeError("401"))
        done.append("invalidated")
        done.append((await vault.select())[1].token or "")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(request)
        await trio.testing.wait_all_tasks_blocked()
        assert done == []  # blocked until a login round ends
        with trio.fail_after(1):
            await vault.wait_for_emptiness()
        await vault.populate({"a": info("b")})

    assert done == ["invalidated", "b"]


async def test_concurrent_invalidations_share_one_login_round() -> None:
    vault = Vault({"a": info("a")})
    logins = 0

    async def authenticator() -> None:
        nonlocal logins
        while True:
            await vault.wait_for_emptiness()
            logins += 1
            await vault.populate({"a": info(f"new-{logins}")})

    async with trio.open_nursery() as nursery:
        await vault.wait_for_readiness()
        nursery.start_soon(authenticator)
        async with trio.open_nursery() as requests:
            for _ in range(10):
                requests.start_soon(vault.invalidate, VaultKey("a"), info("a"))
        nursery.cancel_scope.cancel()

    assert logins == 1
    assert vault.items() == [(VaultKey("a"), info("new-1"))]


async def test_invalidate_raises_when_the_relogin_gives_nothing_new() -> None:
    vault = Vault({"a": info("a")})
    cause = RuntimeError("401 Unauthorized")

    async def authenticator() -> None:
        await vault.wait_for_emptiness()
        await vault.populate({"a": info("a")})  # the login handler returns the same stale token

    async with trio.open_nursery() as nursery:
        nursery.start_soon(authenticator)
        with pytest.raises(LoginError, match="Ran out of valid credentials") as e:
            await vault.invalidate(VaultKey("a"), info("a"), exc=cause)
    assert e.value.__cause__ is cause
    assert vault.is_empty()


async def test_invalidate_last_item_raises_when_the_login_fails() -> None:
    vault = Vault({"a": info("a")})
    cause = RuntimeError("401")
    failure = ValueError("login handler exploded")
    outcome: list[BaseException] = []

    async def request() -> None:
        try:
            await vault.invalidate(VaultKey("a"), info("a"), exc=cause)
        except LoginError as exc:
            outcome.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(request)
        await vault.wait_for_emptiness()
        await trio.testing.wait_all_tasks_blocked()
        assert outcome == []
        vault.fail(failure)

    assert len(outcome) == 1
    assert isinstance(outcome[0], LoginError)
    assert outcome[0].__cause__ is failure


# ------------------------------------------------------------------ waiting for a login


async def test_select_waits_when_empty_and_wakes_on_populate() -> None:
    vault = Vault()
    results: list[tuple[VaultKey, ConnectionInfo]] = []

    async def selector() -> None:
        results.append(await vault.select())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(selector)
        nursery.start_soon(selector)
        await trio.testing.wait_all_tasks_blocked()
        assert results == []
        await vault.populate({"x": info("x")})

    assert results == [(VaultKey("x"), info("x"))] * 2


async def test_select_after_fail_raises_until_new_credentials_arrive() -> None:
    vault = Vault()
    failure = RuntimeError("no way in")
    vault.fail(failure)

    with pytest.raises(LoginError) as e:
        await vault.select()
    assert e.value.__cause__ is failure
    with pytest.raises(LoginError) as e:
        await vault.invalidate(VaultKey("x"), info("stale"))
    assert e.value.__cause__ is failure

    await vault.populate({"x": info("x")})  # new credentials clear the failure
    assert await vault.select() == (VaultKey("x"), info("x"))


async def test_fail_wakes_waiting_selectors() -> None:
    vault = Vault()
    errors: list[BaseException] = []

    async def selector() -> None:
        try:
            await vault.select()
        except LoginError as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(selector)
        nursery.start_soon(selector)
        await trio.testing.wait_all_tasks_blocked()
        vault.fail(KeyError("boom"))

    assert len(errors) == 2
    assert all(isinstance(exc.__cause__, KeyError) for exc in errors)


async def test_empty_login_round_ends_select_with_login_error() -> None:
    vault = Vault()

    async def authenticator() -> None:
        await vault.wait_for_emptiness()
        await vault.populate({})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(authenticator)
        with pytest.raises(LoginError, match="Ran out of valid credentials"):
            await vault.select()


async def test_wait_for_emptiness_does_not_loop_after_an_empty_round(
    autojump_clock: MockClock,
) -> None:
    vault = Vault()
    with trio.fail_after(1):
        await vault.wait_for_emptiness()  # an empty new vault needs the initial login
    await vault.populate({})  # the login gave nothing: no new login until someone asks

    with trio.move_on_after(1) as scope:
        await vault.wait_for_emptiness()
    assert scope.cancelled_caught


async def test_wait_for_emptiness_blocks_while_credentials_are_there(
    autojump_clock: MockClock,
) -> None:
    vault = Vault({"a": info("a")})
    with trio.move_on_after(1) as scope:
        await vault.wait_for_emptiness()
    assert scope.cancelled_caught


async def test_wait_for_readiness() -> None:
    vault = Vault()
    ready = trio.Event()

    async def waiter() -> None:
        await vault.wait_for_readiness()
        ready.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert not ready.is_set()
        await vault.populate({"a": info("a")})
    assert ready.is_set()


async def test_waits_are_cancellable(autojump_clock: MockClock) -> None:
    vault = Vault()
    with trio.move_on_after(1) as scope:
        await vault.select()
    assert scope.cancelled_caught
    with trio.move_on_after(1) as scope:
        await vault.wait_for_readiness()
    assert scope.cancelled_caught
    # A cancelled waiter leaves the vault usable.
    await vault.populate({"a": info("a")})
    assert await vault.select() == (VaultKey("a"), info("a"))


async def test_cancelled_invalidation_still_rejects_the_credentials() -> None:
    vault = Vault({"a": info("a")})
    with trio.CancelScope() as scope:
        scope.cancel()
        await vault.invalidate(VaultKey("a"), info("a"))
    assert vault.is_empty()
    await vault.populate({"a": info("a")})
    assert vault.is_empty()


async def test_close_fails_waiters_but_keeps_current_items(autojump_clock: MockClock) -> None:
    vault = Vault()
    errors: list[BaseException] = []

    async def selector() -> None:
        try:
            await vault.select()
        except LoginError as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(selector)
        await trio.testing.wait_all_tasks_blocked()
        vault.close()
    assert len(errors) == 1
    assert "closed" in str(errors[0])

    with pytest.raises(LoginError, match="closed"):
        await vault.wait_for_readiness()
    with trio.move_on_after(1) as scope:
        await vault.wait_for_emptiness()  # no logins after close
    assert scope.cancelled_caught

    closed_with_items = Vault({"a": info("a")})
    closed_with_items.close()
    assert await closed_with_items.select() == (VaultKey("a"), info("a"))


# ------------------------------------------------------------------ Kopf's helpers and fields


def test_connection_info_basic_auth_header_comes_first() -> None:
    creds = ConnectionInfo(server="s", username="me", password="secret", token="t")
    assert creds.as_http_headers() == {"Authorization": "Basic bWU6c2VjcmV0"}


def test_base64_data_as_in_kubeconfigs_is_decoded_to_pem() -> None:
    pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    encoded = base64.b64encode(pem)
    assert ConnectionInfo(server="s", ca_data=encoded.decode()).ca_data == pem
    assert ConnectionInfo(server="s", certificate_data=encoded).certificate_data == pem
    assert ConnectionInfo(server="s", private_key_data=pem.decode()).private_key_data == pem
    der = b"\x30\x82\x01\x0a"  # DER stays as it is
    assert ConnectionInfo(server="s", ca_data=der).ca_data == der


def test_connection_info_as_ssl_context() -> None:
    ca = trustme.CA()
    client = ca.issue_cert("client@example")
    creds = ConnectionInfo(
        server="https://k8s",
        ca_data=ca.cert_pem.bytes(),
        certificate_data=client.cert_chain_pems[0].bytes(),
        private_key_data=client.private_key_pem.bytes(),
    )
    context = creds.as_ssl_context()
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert len(context.get_ca_certs()) == 1

    insecure = dataclasses.replace(creds, insecure=True).as_ssl_context()
    assert insecure.verify_mode == ssl.CERT_NONE
    assert not insecure.check_hostname


def test_kopfs_deprecated_aiohttp_basic_auth_warns() -> None:
    with pytest.warns(DeprecationWarning, match="as_http_headers"):
        assert ConnectionInfo(server="s").as_aiohttp_basic_auth() is None  # type: ignore[func-returns-value]


def test_aiohttp_sessions_are_refused_with_what_to_do_instead() -> None:
    with pytest.raises(TypeError, match="Return a ConnectionInfo"):
        AiohttpSession(aiohttp_session=object(), server="https://k8s")
