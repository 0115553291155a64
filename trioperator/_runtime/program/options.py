"""The options of one operator's run, in one record from the entry point down to the operator.

The CLI (``trioperator run``), the embedding entry points (``run()``, ``operator()``,
``spawn_tasks()``), ``Operator(...)`` and the test kit's harness each build one
:class:`OperatorOptions` from what they were given and hand it down: the operator reads its
options from this record only, so an option is added here (and to the public signatures that
take it), never threaded through each layer by hand.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import Any

from trioperator._client.credentials import Vault
from trioperator._engine.flavors import FlavorSetting
from trioperator._engine.registry import OperatorRegistry
from trioperator._engine.settings import OperatorSettings

__all__ = ["OperatorOptions"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class OperatorOptions:
    """What an operator runs with; ``None`` (or the empty default): the operator's default."""

    registry: OperatorRegistry | None = None
    """The handlers; by default the default registry (what the decorators registered into)."""
    settings: OperatorSettings | None = None
    """The settings; by default new ``OperatorSettings()``. The peering options and
    ``async_flavor`` below are written into them when the operator is made (as in Kopf)."""
    memo: Any = None
    """The operator-wide memo handlers get; by default a new ``Memo()``."""
    vault: Vault | None = None
    """Where the credentials come from; by default a new ``Vault()``, filled by login handlers."""
    namespaces: Collection[str] = ()
    """Serve the namespaces matching these patterns; none: the whole cluster."""
    clusterwide: bool = False
    """Serve the whole cluster (also when no namespaces are given)."""
    handle_signals: bool = False
    """Stop gracefully on SIGINT/SIGTERM (only in the main thread of a trio program)."""
    liveness_endpoint: str | None = None
    """``http://host:port/path`` to serve the liveness probe on; ``None``: not served."""
    metrics_endpoint: str | None = None
    """``http://host:port/path`` to serve the Prometheus metrics on; ``None``: not served."""
    standalone: bool | None = None
    """``True``: no peering at all; ``None``: as ``settings.peering.standalone`` says."""
    priority: int | None = None
    """This operator's priority among its peers; ``None``: as ``settings.peering`` says."""
    peering_name: str | None = None
    """The peering object to use, which makes peering mandatory; ``None``: as the settings say."""
    identity: str | None = None
    """This operator's key in the peering objects and its Lease; ``None``: ``POD_ID``, else
    user@host/time/random."""
    async_flavor: FlavorSetting | None = None
    """``"auto"``, ``"trio"`` or ``"asyncio"`` into ``settings.execution.async_flavor``."""
