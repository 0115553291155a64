"""The Kubernetes API client.

This is the only layer that talks HTTP: ``_client/h11_transport.py`` (h11 on trio streams, TLS
from ``_client/tls_stream.py``) behind the small interface of ``_client/http.py``.
"""
