"""The endpoints the operator serves on (``--liveness``, ``--metrics``): ``http://host:port/path``.

Both the probes and the metrics parse them, and the CLI validates them before anything starts.
"""

from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["parse_endpoint"]


def parse_endpoint(endpoint: str, *, what: str = "liveness") -> tuple[str, int, str]:
    """``http://host:port/path`` -> ``(host, port, path)``; only ``http://`` is supported.

    ``what`` names the endpoint in the errors (liveness, metrics).
    """
    parts = urlsplit(endpoint)
    if parts.scheme != "http":
        raise ValueError(f"Only http:// {what} endpoints are supported, not {endpoint!r}.")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"A wrong port in the {what} endpoint {endpoint!r}: {exc}") from None
    # Reachable by the kubelet (probes) and by Prometheus (metrics) unless told otherwise.
    host = parts.hostname or "0.0.0.0"
    return host, port if port is not None else 80, parts.path or "/"
