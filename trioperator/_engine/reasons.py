"""Why a processing cycle runs handlers: the causes of changing handlers."""

from __future__ import annotations

import enum


class Reason(enum.StrEnum):
    """Values are the strings stored as ``purpose`` in progress records (Kopf-compatible)."""

    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"
    RESUME = "resume"
    NOOP = "noop"
    FREE = "free"
    GONE = "gone"

    def __str__(self) -> str:
        return self.value


HANDLER_REASONS = (Reason.CREATE, Reason.UPDATE, Reason.DELETE, Reason.RESUME)
"""The reasons for which handlers exist (the others are informational)."""

TITLES = {
    Reason.CREATE: "creation",
    Reason.UPDATE: "updating",
    Reason.DELETE: "deletion",
    Reason.RESUME: "resuming",
    Reason.NOOP: "no-op",
    Reason.FREE: "freeing",
    Reason.GONE: "disappearance",
}
"""The words used in log lines such as ``Creation is in progress: ...``."""
