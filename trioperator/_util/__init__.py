"""Helpers with no Kubernetes knowledge (time, small HTTP server primitives)."""
