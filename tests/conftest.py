"""Shared fixtures. Tests run in trio mode (pyproject: ``trio_mode = true``)."""
