"""The settings groups that the API client itself consumes.

They live here (not in the engine) because the client is a lower layer than the engine;
``trioperator._engine.settings.OperatorSettings`` composes them under Kopf's names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

# Kopf's defaults: a Fibonacci-ish ramp, 8 retries (so 9 attempts) before escalating.
DEFAULT_ERROR_BACKOFFS: tuple[float, ...] = (1, 1, 2, 3, 5, 8, 13, 21)


@dataclasses.dataclass
class NetworkingSettings:
    """How requests to the API server are timed and retried."""

    request_timeout: float | None = 5 * 60
    """Total time for one regular (non-watch) request, in seconds."""

    connect_timeout: float | None = None
    """Time to establish a connection; ``None`` means only ``request_timeout`` bounds it."""

    error_backoffs: float | Iterable[float] = DEFAULT_ERROR_BACKOFFS
    """Delays between retries of retriable errors (TCP/TLS, 5xx, 429): a number or a sequence.

    The number of attempts is the number of backoffs plus one.
    """

    enforce_retry_after: bool = False
    """If true, the server's ``Retry-After`` replaces every backoff; else only the shorter ones."""

    trust_env: bool = False
    """Honour ``HTTP(S)_PROXY``, ``ALL_PROXY``, ``NO_PROXY`` and, for the proxy's credentials,
    ``.netrc`` from the environment."""


@dataclasses.dataclass
class WatchingSettings:
    """How the list+watch streams behave."""

    server_timeout: float | None = None
    """``timeoutSeconds`` asked from the server for one watch request."""

    client_timeout: float | None = None
    """Total time the client lets one watch request live before reconnecting."""

    connect_timeout: float | None = None
    """Time to establish a watch connection (falls back to the networking settings)."""

    reconnect_backoff: float = 0.1
    """Pause between the end of one watch stream and the next list/watch."""

    inactivity_timeout: float | None = 70.0
    """If no event (bookmarks included) arrives for this long, reconnect from the last version.

    The silence is noticed after this many seconds, or up to 1% later (never earlier)."""
