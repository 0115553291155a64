"""Building blocks the other parts share, with no knowledge of handlers or objects.

Waiting for the first of several things (``waiting.py``), the operator-wide gates
(``gates.py``), a small HTTP server (``httpserver.py``) and the metrics served on it
(``metrics.py``), observing a whole resource (``observing.py``), discovering the served
resources (``discovering.py``), and handing free memory back to the system
(``memory_trim.py``). The bottom of ``_runtime``: it imports none of the other parts.
"""
