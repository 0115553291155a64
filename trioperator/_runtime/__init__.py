"""The nursery tree: every long-running activity of an operator, in parts that show its shape.

Only this layer (and the test kit) opens nurseries. The parts, from the top (each imports only
the parts below it; pyproject's import-linter contract keeps the order):

- ``program``: the operator's root task (``program/operator.py`` shows the whole tree), the
  ways to run it, the orchestrator of watchers, the lifecycle around them;
- ``admission`` and ``pipeline``, side by side: the webhooks, and the watch-to-handler path;
- ``coordination``: peering and sharding with other operators;
- ``objects``: what is kept per object (memories, mailboxes, daemons and timers);
- ``handling``: calling user code, and its patches, Events and logs;
- ``support``: building blocks (waiting, gates, the HTTP server, metrics, observing).
"""
