"""User-facing helpers that the runtime never imports (hierarchies, webhook servers, runners)."""
