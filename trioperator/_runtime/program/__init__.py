"""The program: the operator's root task, its start and stop order, and the ways to run it.

``operator.py`` is the root of the nursery tree and shows the whole of it; ``embedding.py`` runs
an operator inside another program (trio or asyncio); ``orchestration.py`` keeps one watcher per
served (resource, namespace). Around them: loading the operator's code, the process's logging,
the operator-level activities (startup, cleanup, login, probes) and the liveness endpoint, and
``freeze``/``resume``, the commands that pause operators through their peering.

The top of ``_runtime``: it may import every other part, and none imports it.
"""
