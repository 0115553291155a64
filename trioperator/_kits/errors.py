"""The kits' own errors, apart from the kits that raise them (so that any kit can raise them)."""

from __future__ import annotations

__all__ = ["MissingDependencyError", "WebhookCAError"]


class MissingDependencyError(ImportError):
    """A server or tunnel needs an optional dependency that is not installed."""


class WebhookCAError(RuntimeError):
    """The CA shared by the webhook servers of several replicas cannot be read or created."""
