"""Admission and conversion webhooks: answering reviews, and serving them.

``admission.py`` decodes a review, runs the matching handlers and answers; it also runs the
operator's webhook server and keeps the cluster's webhook configurations and CRD conversions in
line. ``webhook_serving.py`` is the listening loop behind the server kits of
``trioperator._kits.webhooks``. Independent of the watch pipeline: neither imports the other.
"""
