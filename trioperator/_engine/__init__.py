"""Decisions without I/O: registry, causes, filters, diffs, storages, finalizers, patches.

Nothing here talks to the network or owns a task; the runtime calls into it.
"""
