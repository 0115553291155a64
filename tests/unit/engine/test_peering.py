"""Peering records (Kopf's on-cluster format), expiry, and the pause decision."""

from __future__ import annotations

import datetime
import random
import socket
from typing import Any

import pytest
from trioperator._client.resources import Resource
from trioperator._engine.peering import (
    Peer,
    cleanup_patch,
    decide,
    descriptive_hostname,
    detect_own_id,
    keepalive_interval,
    keepalive_patch,
    parse_peers,
    select_peering_resources,
)
from trioperator._engine.settings import PeeringSettings

NOW = datetime.datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=datetime.UTC)


def _ago(seconds: float) -> str:
    return (NOW - datetime.timedelta(seconds=seconds)).isoformat()


def test_our_record_is_written_exactly_in_kopfs_format() -> None:
    patch = keepalive_patch("me@host/20260301120000/abc", priority=10, lifetime=60, now=NOW)
    assert patch == {
        "status": {
            "me@host/20260301120000/abc": {
                "priority": 10,
                "lifetime": 60,
                "lastseen": "2026-03-01T12:00:00.123456+00:00",
            }
        }
    }


@pytest.mark.parametrize("lifetime", [0, -1])
def test_a_zero_lifetime_removes_our_record(lifetime: int) -> None:
    assert keepalive_patch("me", priority=0, lifetime=lifetime, now=NOW) == {"status": {"me": None}}


def test_dead_peers_are_removed_by_null_records() -> None:
    peers = parse_peers({"a": {"lastseen": _ago(100)}, "b": {"lastseen": _ago(200)}}, now=NOW)
    assert cleanup_patch(peers) == {"status": {"a": None, "b": None}}


def test_records_are_parsed_with_kopfs_defaults_and_extra_keys_ignored() -> None:
    status = {
        "full": {"priority": 5, "lifetime": 30, "lastseen": _ago(10), "future": "field"},
        "bare": {},
        "leftover": None,
        "garbage": "text",
        "zulu": {"lastseen": "2026-03-01T11:59:50Z"},
    }
    peers = {peer.identity: peer for peer in parse_peers(status, now=NOW)}
    assert sorted(peers) == ["bare", "full", "zulu"]
    assert peers["full"] == Peer(
        identity="full",
        priority=5,
        lifetime=30,
        lastseen=NOW - datetime.timedelta(seconds=10),
    )
    # Without a lifetime, 60 s (whatever our own lifetime is); without lastseen, now.
    assert (peers["bare"].priority, peers["bare"].lifetime, peers["bare"].lastseen) == (0, 60, NOW)
    assert peers["zulu"].lastseen == datetime.datetime(2026, 3, 1, 11, 59, 50, tzinfo=datetime.UTC)


def test_malformed_fields_fall_back_to_defaults_instead_of_failing() -> None:
    status = {"x": {"priority": "high", "lifetime": [1], "lastseen": "yesterday"}}
    (peer,) = parse_peers(status, now=NOW)
    assert (peer.priority, peer.lifetime, peer.lastseen) == (0, 60, NOW)


@pytest.mark.parametrize("status", [None, "text", [1, 2], 42])
def test_a_status_that_is_not_a_mapping_has_no_peers(status: Any) -> None:
    assert parse_peers(status, now=NOW) == []


@pytest.mark.parametrize(
    ("age", "lifetime", "dead"),
    [(59.999, 60, False), (60, 60, True), (61, 60, True), (0, 0, True), (5, 10, False)],
)
def test_a_peer_is_dead_once_lastseen_plus_lifetime_has_passed(
    age: float, lifetime: int, dead: bool
) -> None:
    (peer,) = parse_peers({"p": {"lifetime": lifetime, "lastseen": _ago(age)}}, now=NOW)
    assert peer.is_dead(NOW) is dead


def test_a_higher_live_peer_pauses_us_and_we_look_again_when_it_would_expire() -> None:
    status = {
        "me": {"priority": 10, "lastseen": _ago(1)},
        "high": {"priority": 20, "lifetime": 60, "lastseen": _ago(15)},
        "low": {"priority": 5, "lastseen": _ago(1)},
        "dead-higher": {"priority": 99, "lifetime": 60, "lastseen": _ago(61)},
    }
    decision = decide(status, identity="me", priority=10, now=NOW)
    assert decision.pause
    assert [peer.identity for peer in decision.higher] == ["high"]
    assert decision.same == []
    assert [peer.identity for peer in decision.dead] == ["dead-higher"]
    assert decision.wake_up_at() == NOW + datetime.timedelta(seconds=45)


def test_a_live_peer_with_the_same_priority_pauses_everyone() -> None:
    status = {"me": {"priority": 0, "lastseen": _ago(1)}, "twin": {"lastseen": _ago(30)}}
    decision = decide(status, identity="me", priority=0, now=NOW)
    assert decision.pause
    assert [peer.identity for peer in decision.same] == ["twin"]
    assert sorted(peer.identity for peer in decision.peers) == ["me", "twin"]
    assert decision.wake_up_at() == NOW + datetime.timedelta(seconds=30)


def test_only_lower_or_dead_peers_and_ourselves_do_not_pause() -> None:
    status = {
        "me": {"priority": 10, "lastseen": _ago(1)},
        "low": {"priority": 9, "lastseen": _ago(1)},
        "gone-twin": {"priority": 10, "lifetime": 5, "lastseen": _ago(5)},
    }
    decision = decide(status, identity="me", priority=10, now=NOW)
    assert not decision.pause
    assert decision.wake_up_at() is None
    assert [peer.identity for peer in decision.dead] == ["gone-twin"]


def test_our_own_record_never_counts_even_with_a_higher_priority_written_earlier() -> None:
    # E.g. we restarted with a lower priority under the same POD_ID.
    status = {"me": {"priority": 100, "lastseen": _ago(1)}}
    assert not decide(status, identity="me", priority=0, now=NOW).pause


def test_peers_are_shown_in_logs_like_kopf_shows_them() -> None:
    status = {"op@host": {"priority": 1, "lifetime": 60, "lastseen": _ago(0)}}
    (peer,) = parse_peers(status, now=NOW)
    assert repr(peer) == (
        "<Peer op@host: priority=1, lifetime=60, lastseen='2026-03-01T12:00:00.123456+00:00'>"
    )


@pytest.mark.parametrize(
    ("lifetime", "low", "high"),
    [(60, 50, 55), (10, 1, 5), (7, 1, 2), (3, 1, 1), (1, 1, 1), (0, 1, 1)],
)
def test_keepalives_come_5_to_10_seconds_before_expiry_but_at_most_once_a_second(
    lifetime: int, low: int, high: int
) -> None:
    rng = random.Random(1)
    intervals = {keepalive_interval(lifetime, rng=rng) for _ in range(200)}
    assert min(intervals) == low
    assert max(intervals) == high


def test_the_identity_is_the_pod_id_when_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_ID", "my-operator-7d9f-abcde")
    assert detect_own_id() == "my-operator-7d9f-abcde"


def test_the_identity_without_a_pod_id_is_user_host_time_random(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("POD_ID", raising=False)
    automatic = detect_own_id()
    userhost, stamp, suffix = automatic.split("/")
    assert "@" in userhost
    assert len(stamp) == 14
    assert stamp.isdigit()
    assert len(suffix) == 3
    assert detect_own_id(manual=True) == userhost


@pytest.mark.parametrize(
    ("hostname", "resolved", "expected"),
    [
        # The resolver's names: (primary, aliases, addresses); None: the lookup fails.
        ("vm", ("localhost", [], ["127.0.0.1"]), "vm"),
        ("vm", None, "vm"),
        ("vm.local", None, "vm"),
        ("vm", ("vm", ["vm.example.com"], ["10.0.0.5"]), "vm.example.com"),
        ("vm", ("5.0.0.10.in-addr.arpa", ["vm"], ["10.0.0.5"]), "vm"),
        ("vm", ("1.0.ip6.arpa", [], ["::1"]), "vm"),
        ("vm", ("box.localdomain", [], []), "box"),
        ("vm", ("box.lan.local.localdomain", [], []), "box.lan"),
    ],
)
def test_the_host_in_identities_is_chosen_as_kopf_chooses_it(
    monkeypatch: pytest.MonkeyPatch, hostname: str, resolved: Any, expected: str
) -> None:
    def gethostbyaddr(name: str) -> Any:
        assert name == hostname
        if resolved is None:
            raise OSError("no such host")
        return resolved

    monkeypatch.setattr(socket, "gethostname", lambda: hostname)
    monkeypatch.setattr(socket, "gethostbyaddr", gethostbyaddr)
    monkeypatch.delenv("POD_ID", raising=False)
    assert descriptive_hostname() == expected
    assert detect_own_id(manual=True).endswith(f"@{expected}")


def _resource(group: str, plural: str, *, namespaced: bool, version: str = "v1") -> Resource:
    return Resource(
        group=group, version=version, plural=plural, kind=plural.title(), namespaced=namespaced
    )


CLUSTER = _resource("kopf.dev", "clusterkopfpeerings", namespaced=False)
NAMESPACED = _resource("kopf.dev", "kopfpeerings", namespaced=True)
LEGACY_NAMESPACED = _resource("zalando.org", "kopfpeerings", namespaced=True)
UNRELATED = _resource("example.com", "kopfpeerings", namespaced=True)
DISCOVERED = [UNRELATED, LEGACY_NAMESPACED, NAMESPACED, CLUSTER]


def test_cluster_wide_operators_use_clusterkopfpeerings() -> None:
    settings = PeeringSettings(clusterwide=True)
    assert select_peering_resources(DISCOVERED, settings) == [CLUSTER]


def test_namespaced_operators_use_kopfpeerings_of_either_api_group() -> None:
    settings = PeeringSettings(clusterwide=False)
    assert select_peering_resources(DISCOVERED, settings) == [NAMESPACED, LEGACY_NAMESPACED]


def test_standalone_operators_use_no_peering_resources() -> None:
    settings = PeeringSettings(standalone=True, mandatory=True)
    assert select_peering_resources(DISCOVERED, settings) == []


def test_without_the_crds_there_is_nothing_to_peer_via() -> None:
    assert select_peering_resources([UNRELATED], PeeringSettings()) == []


def test_the_peering_settings_have_kopfs_names_and_defaults() -> None:
    settings = PeeringSettings()
    assert (settings.name, settings.priority, settings.lifetime) == ("default", 0, 60)
    assert (settings.mandatory, settings.standalone, settings.stealth) == (False, False, False)
    assert (settings.clusterwide, settings.namespaced) == (False, True)
    settings.namespaced = False
    assert settings.clusterwide
