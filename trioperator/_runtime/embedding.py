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
) -> None:
    """Run an operator in the current trio run until ``stop_flag`` is set or it is cancelled."""
    op = Operator(
        registry=registry,
        settings=settings,
        memo=memo,
        vault=vault,
        namespaces=namespaces,
        clusterwide=clusterwide,
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
) -> None:
    """Run an operator in a trio run of its own; SIGINT/SIGTERM stop it gracefully."""
    op = Operator(
        registry=registry,
        settings=settings,
        memo=memo,
        vault=vault,
        namespaces=namespaces,
        clusterwide=clusterwide,
        handle_signals=handle_signals,
    )
    trio.run(op.main)
