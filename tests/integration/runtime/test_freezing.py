"""``freeze``/``resume`` on the fake API: the records they write, and operators obeying them."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
import trio
import trioperator as kopf
from trioperator._client.api import APIClient
from trioperator._client.settings import NetworkingSettings
from trioperator._runtime.program.freezing import PeeringCommandError, touch_peerings
from trioperator._runtime.program.operator import Operator
from trioperator.cli import CLIControls, main
from trioperator.testing import FakeAPI

# The same fixtures as the peering tests: the peering CRDs in the fake, a create handler.
from .test_peering import (
    CLUSTER,
    PEERING_CRDS,
    _create_peering,
    _records,
    _until,
    _vault,
    created,
    fake_api,
)

__all__ = ["created", "fake_api"]  # fixtures, used by name

ADMIN = "admin@laptop"


async def _touch(api: FakeAPI, now: Any, **kwargs: Any) -> list[Any]:
    if now is not None:
        kwargs["now"] = now
    async with APIClient(_vault(api), NetworkingSettings()) as client:
        return await touch_peerings(client, identity=ADMIN, **kwargs)


async def test_a_freeze_pauses_the_operator_and_resume_lets_it_continue(
    autojump_clock: Any,
    run_operator: Any,
    created: list[str],
    fake_api: FakeAPI,
    logs: Any,
) -> None:
    _create_peering(fake_api)
    running = await run_operator()
    now = running.operator.context.now
    running.create(name="before")
    await running.wait_for(lambda: created == ["before"])

    touched = await _touch(
        fake_api, now, name="default", priority=100, lifetime=3600, clusterwide=True
    )
    assert [(item.resource.plural, item.namespace, item.found) for item in touched] == [
        (CLUSTER, None, True)
    ]
    record = _records(fake_api)[ADMIN]
    assert (record["priority"], record["lifetime"]) == (100, 3600)
    assert datetime.datetime.fromisoformat(record["lastseen"]) == now()
    await running.wait_for(lambda: logs.count("Pausing operations in favour of") == 1)

    running.create(name="while-frozen")
    await trio.sleep(600)
    assert created == ["before"]
    assert ADMIN in _records(fake_api)  # nobody cleans a live freeze away

    await _touch(fake_api, now, name="default", priority=0, lifetime=0, clusterwide=True)
    assert ADMIN not in _records(fake_api)
    await running.wait_for(lambda: created == ["before", "while-frozen"])
    assert logs.count("Resuming operations after the pause.") == 1


async def test_a_freeze_expires_by_itself_after_its_lifetime(
    autojump_clock: Any, run_operator: Any, created: list[str], fake_api: FakeAPI, logs: Any
) -> None:
    _create_peering(fake_api)
    running = await run_operator()
    started = trio.current_time()
    await _touch(
        fake_api,
        running.operator.context.now,
        name="default",
        priority=100,
        lifetime=120,
        clusterwide=True,
    )
    await running.wait_for(lambda: logs.count("Pausing operations in favour of") == 1)
    running.create(name="while-frozen")
    await running.wait_for(lambda: created == ["while-frozen"])
    assert trio.current_time() - started >= 120
    await running.wait_for(lambda: ADMIN not in _records(fake_api))  # cleaned as a dead peer


async def test_a_freeze_below_the_operators_priority_does_not_pause_it(
    autojump_clock: Any,
    run_operator: Any,
    created: list[str],
    settings: kopf.OperatorSettings,
    fake_api: FakeAPI,
) -> None:
    settings.peering.priority = 200
    _create_peering(fake_api)
    running = await run_operator()
    await _touch(
        fake_api,
        running.operator.context.now,
        name="default",
        priority=100,
        lifetime=3600,
        clusterwide=True,
    )
    running.create(name="served")
    await running.wait_for(lambda: created == ["served"])


async def test_namespaced_freezes_go_to_every_matching_namespace(
    autojump_clock: Any,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
    created: list[str],
    fake_api: FakeAPI,
    obj: dict[str, Any],
) -> None:
    for namespace in ("team-a", "team-b", "other"):
        fake_api.create_namespace(namespace)
        body = {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering"}
        fake_api.create_object(
            "kopfpeerings", {**body, "metadata": {"name": "team", "namespace": namespace}}
        )
    operator = Operator(
        registry=registry,
        settings=settings,
        vault=_vault(fake_api),
        namespaces=["team-a"],
        peering_name="team",
    )

    def records(namespace: str) -> dict[str, Any]:
        return dict(fake_api.get_object("kopfpeerings", "team", namespace).get("status") or {})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(operator.main)
        await _until(lambda: operator.identity in records("team-a"))
        assert operator.context is not None
        now = operator.context.now
        touched = await _touch(
            fake_api,
            now,
            name="team",
            priority=100,
            lifetime=3600,
            clusterwide=False,
            namespaces=["team-*"],
        )
        assert sorted(item.namespace for item in touched) == ["team-a", "team-b"]
        assert ADMIN in records("team-b")
        assert ADMIN not in records("other")
        fake_api.create_object(
            "kopfexamples", {**obj, "metadata": {"name": "a", "namespace": "team-a"}}
        )
        await trio.sleep(300)
        assert created == []

        await _touch(
            fake_api, now, name="team", priority=0, lifetime=0, clusterwide=False,
            namespaces=["team-a", "team-b"],
        )  # fmt: skip
        assert ADMIN not in records("team-a")
        assert ADMIN not in records("team-b")
        await _until(lambda: created == ["a"])
        operator.stop()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "nonexistent", "clusterwide": True}, "'nonexistent' does not exist"),
        ({"name": "default", "clusterwide": False, "namespaces": ["nope-*"]}, "No namespace"),
    ],
)
async def test_nothing_to_freeze_is_a_clear_error(
    autojump_clock: Any, fake_api: FakeAPI, kwargs: dict[str, Any], message: str
) -> None:
    _create_peering(fake_api)
    with pytest.raises(PeeringCommandError, match=message):
        await _touch(fake_api, None, priority=100, lifetime=60, **kwargs)
    assert _records(fake_api) == {}


async def test_a_cluster_without_peering_crds_is_a_clear_error(
    autojump_clock: Any, fake_api: FakeAPI
) -> None:
    for crd in PEERING_CRDS:
        fake_api.delete_object("customresourcedefinitions", crd["metadata"]["name"])
    with pytest.raises(PeeringCommandError, match="no clusterkopfpeerings"):
        await _touch(fake_api, None, name="default", priority=100, lifetime=60, clusterwide=True)


# ----------------------------------------------------------------------- the commands


def _cli(api: FakeAPI, argv: list[str]) -> int:
    """The command as a user types it (``trio.run`` in a thread of its own)."""
    return main(argv, controls=CLIControls(vault=_vault(api), handle_signals=False))


async def test_the_freeze_and_resume_commands_write_and_remove_the_record(
    fake_api: FakeAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    _create_peering(fake_api, "prod")
    argv = ["freeze", "-P", "prod", "-t", "90", "-i", ADMIN, "-m", "upgrading Kopf"]
    assert await trio.to_thread.run_sync(_cli, fake_api, argv) == 0
    record = _records(fake_api, "prod")[ADMIN]
    assert (record["priority"], record["lifetime"]) == (100, 90)  # Kopf's default priority
    output = capsys.readouterr().err
    assert "Frozen 'prod' cluster-wide for 90s with priority 100" in output
    assert "upgrading Kopf" in output

    argv = ["freeze", "--peering", "prod", "--lifetime", "90", "--id", ADMIN, "--dev"]
    assert await trio.to_thread.run_sync(_cli, fake_api, argv) == 0
    assert _records(fake_api, "prod")[ADMIN]["priority"] == 666

    argv = ["resume", "-P", "prod", "-i", ADMIN]
    assert await trio.to_thread.run_sync(_cli, fake_api, argv) == 0
    assert ADMIN not in _records(fake_api, "prod")
    assert "Resumed 'prod' cluster-wide" in capsys.readouterr().err


async def test_a_freeze_of_a_missing_peering_fails_and_says_why(
    fake_api: FakeAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["freeze", "-P", "nonexistent", "-t", "60"]
    assert await trio.to_thread.run_sync(_cli, fake_api, argv) == 1
    error = "Cannot freeze: The peering object 'nonexistent' does not exist cluster-wide."
    assert error in capsys.readouterr().err


async def test_a_namespaced_freeze_warns_about_namespaces_without_the_peering(
    fake_api: FakeAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    for namespace in ("team-a", "team-b"):
        fake_api.create_namespace(namespace)
    body = {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering"}
    fake_api.create_object(
        "kopfpeerings", {**body, "metadata": {"name": "team", "namespace": "team-a"}}
    )
    argv = ["freeze", "-P", "team", "-n", "team-*", "-t", "60", "-i", ADMIN]
    assert await trio.to_thread.run_sync(_cli, fake_api, argv) == 0
    output = capsys.readouterr().err
    assert output.count("Frozen 'team' in 'team-a' for 60s with priority 100") == 1
    assert "The peering object 'team' does not exist in 'team-b': skipped." in output
