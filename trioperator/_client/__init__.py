"""The Kubernetes API client.

This is the only layer that talks HTTP, and only ``_client/http.py`` imports the HTTP library,
so the measured best implementation of the httpx API can be swapped in one place.
"""
