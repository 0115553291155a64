"""The watch-to-handler pipeline: one watcher per (resource, namespace), one worker per object.

The path of an event, in order: ``watcher.py`` (the stream and its router: indexing,
backpressure, the mailboxes) -> ``workers.py`` (one object's cycles) -> ``processing.py`` (one
cycle: the engine's decisions, the handlers) -> the patch (``handling/applying.py``).
``reconciling.py`` does the same for ``on.reconcile`` handlers, ``indexing.py`` for ``@index``
handlers, ``daemon_spawning.py`` keeps each object's daemons in line with it event after event.
``contexts.py`` holds what these tasks share (the hub of the state records below).
"""
