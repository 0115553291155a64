"""The Kubernetes API client.

This is the only layer that talks HTTP: the HTTP/1.1 client of ``_client/transport/`` (trio
streams, h11 writing requests, httptools parsing responses, its own TLS stream) behind the small
interface of ``_client/http.py``.
"""
