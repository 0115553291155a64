"""Labels mode: where a replica places an object, and what its watchers select."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from trioperator._engine.settings import OperatorSettings
from trioperator._engine.sharding import SHARD_LABEL, Ring, bucket_key, bucket_of, lease_name
from trioperator._runtime.coordination.sharding import Shard


def _shard(mode: str, buckets: int = 8) -> Shard:
    settings = OperatorSettings()
    settings.sharding.mode = mode  # type: ignore[assignment]
    settings.sharding.buckets = buckets
    now = datetime.datetime.now(datetime.UTC)
    return Shard(api=None, settings=settings, identity="me", now=lambda: now)  # type: ignore[arg-type]


def _body(uid: str, label: str | None = None) -> dict[str, Any]:
    labels = {SHARD_LABEL: label} if label is not None else {}
    return {"metadata": {"uid": uid, "labels": labels}}


def test_filter_mode_places_objects_by_their_own_key_and_selects_nothing_extra() -> None:
    shard = _shard("filter")
    assert not shard.divides_traffic
    assert shard.placement(_body("u-1", "3")) == "u-1"


def test_labels_mode_places_objects_by_the_bucket_their_label_names() -> None:
    shard = _shard("labels")
    assert shard.placement(_body("u-1", "3")) == bucket_key("3")
    # Not labelled yet, or labelled with what is no bucket: where its label will go.
    expected = bucket_key(bucket_of(_body("u-1"), 8))
    assert shard.placement(_body("u-1")) == expected
    assert shard.placement(_body("u-1", "99")) == expected


def test_the_selector_names_our_buckets_in_the_served_view_and_nothing_when_fenced() -> None:
    shard = _shard("labels")
    assert shard.selector() == f"{SHARD_LABEL}=none"  # serving nothing yet
    other = lease_name("default", "other")
    view = frozenset({shard.name, other})
    shard.fenced = False
    shard.serving = shard.published = shard.target = view
    ring = Ring(view)
    mine = [str(b) for b in range(8) if ring.owner(bucket_key(str(b))) == shard.name]
    assert 0 < len(mine) < 8
    assert shard.selector() == f"{SHARD_LABEL} in ({','.join(mine)})"
    shard.serving = shard.published = shard.target = frozenset({shard.name})
    assert shard.selector() == SHARD_LABEL  # every bucket: any labelled object
    shard.fenced = True
    assert shard.selector() == f"{SHARD_LABEL}=none"


@pytest.mark.parametrize(
    ("name", "value"), [("mode", "buckets"), ("buckets", 0), ("buckets", True)]
)
def test_bad_sharding_settings_fail_when_set(name: str, value: object) -> None:
    settings = OperatorSettings()
    with pytest.raises(ValueError, match=f"sharding.{name} must be"):
        setattr(settings.sharding, name, value)
