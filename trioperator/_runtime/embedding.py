"""Entry points for running an operator inside your own program.

``await operator(...)`` runs in an existing trio run (e.g. in a nursery of yours);
``run(...)`` starts a trio run of its own and blocks until the operator stops.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import trio

from trioperator._client.credentials import Vault
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.settings import OperatorSettings
from trioperator._runtime.operator import Operator


async def operator(
    *,
    registry: OperatorRegistry | None = None,
    settings: OperatorSettings | None = None,
    memo: Any = None,
    vault: Vault | None = None,
    namespaces: Collection[str] = (),
    clusterwide: bool = False,
    ready_flag: trio.Event | None = None,
    stop_flag: trio.Event | None = None,
    standalone: bool | None = None,
    priority: int | None = None,
    peering_name: str | None = None,
    identity: str | None = None,
    liveness_endpoint: str | None = None,
    handle_signals: bool = False,
) -> None:
    """Run an operator in the current trio run until ``stop_flag`` is set or it is cancelled.

    Peering as in Kopf: ``peering_name`` makes the peering mandatory (paused until that peering
    object exists), ``standalone=True`` disables it, ``priority`` ranks this operator among its
    peers; unset, they keep what ``settings.peering`` says. ``liveness_endpoint`` serves the
    probe (``http://host:port/path``). ``handle_signals`` makes SIGINT/SIGTERM stop it (only
    in the main thread).
    """
    op = Operator(
        registry=registry,
        settings=settings,
        memo=memo,
        vault=vault,
        namespaces=namespaces,
        clusterwide=clusterwide,
        standalone=standalone,
        priority=priority,
        peering_name=peering_name,
        identity=identity,
        liveness_endpoint=liveness_endpoint,
        handle_signals=handle_signals,
    )
    if ready_flag is not None:
        op.ready_flag = ready_flag
    if stop_flag is not None:
        op.stop_flag = stop_flag
    await op.main()


def run(
    *,
    registry: OperatorRegistry | None = None,
    settings: OperatorSettings | None = None,
    memo: Any = None,
    vault: Vault | None = None,
    namespaces: Collection[str] = (),
    clusterwide: bool = False,
    handle_signals: bool = True,
    standalone: bool | None = None,
    priority: int | None = None,
    peering_name: str | None = None,
    identity: str | None = None,
    liveness_endpoint: str | None = None,
) -> None:
    """Run an operator in a trio run of its own; SIGINT/SIGTERM stop it gracefully.

    The options are those of :func:`operator`.
    """
    op = Operator(
        registry=registry,
        settings=settings,
        memo=memo,
        vault=vault,
        namespaces=namespaces,
        clusterwide=clusterwide,
        handle_signals=handle_signals,
        standalone=standalone,
        priority=priority,
        peering_name=peering_name,
        identity=identity,
        liveness_endpoint=liveness_endpoint,
    )
    trio.run(op.main)
