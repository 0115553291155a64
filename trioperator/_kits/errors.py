"""The kits' own errors, apart from the kits that raise them (so that any kit can raise them)."""

from __future__ import annotations

__all__ = ["MissingDependencyError"]


class MissingDependencyError(ImportError):
    """A server or tunnel needs an optional dependency that is not installed."""
