"""The API client for operator code (trioperator's own addition; Kopf has none).

Users' handlers and scripts call the Kubernetes API through it, with bodies as dicts. It is
built on httpx (``transport.py`` is the only module that imports it, lazily: an operator whose
handlers never call the API never imports httpx); the operator's own hot path keeps its h11
transport (``trioperator._client.http``). The pieces:

- ``calls.py``: what is sent for each operation and how answers are read (no I/O);
- ``conflicts.py``: server-side apply's field conflicts, parsed from the Status;
- ``credentials.py``: where the credentials come from (the operator's vault, or fixed ones);
- ``settings.py``: the bounds (timeouts, sizes, retries);
- ``transport.py``: httpx clients per credentials, bounded reads, errors mapped to ours;
- ``asyncapi.py`` / ``syncapi.py``: the async and the sync clients.
"""
