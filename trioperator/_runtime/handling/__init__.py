"""Running user code and writing back what it produced.

``invocation.py`` calls a user function in its flavour (``asyncio_bridge.py`` for asyncio code,
``threads.py`` for sync code), with the API client of ``apiclients.py``; ``execution.py`` runs
handlers once each and turns what happened into outcomes; ``typed_calls.py`` decodes typed
arguments. What the handlers produce goes out through ``applying.py`` (the patch),
``posting.py`` (Kubernetes Events) and ``loggers.py`` (per-object loggers).
"""
