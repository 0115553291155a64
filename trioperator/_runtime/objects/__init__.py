"""What the operator keeps for each Kubernetes object, and the tasks that live as long as it.

State records: ``memories.py`` (what is remembered about an object between events),
``mailboxes.py`` (the queue from the router to the object's worker), ``reconcile_state.py``
(the state of reconcile handlers), ``daemon_state.py`` (an object's daemons and timers).
Daemons and timers: ``daemon_flags.py`` (their ``stopped`` flags), ``daemon_loops.py`` (calling
a handler over and over), ``daemon_keeper.py`` (their tasks and how they stop), ``alarms.py``
(the clock their sleeps share). The daemons live here, not in a package of their own, because
an object's memory holds its daemons and the keeper works on that memory: one part, not two.
Spawning them as events arrive is a pipeline step (``pipeline/daemon_spawning.py``).
"""
