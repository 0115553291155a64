"""Kubernetes Events about the handled objects: what `kubectl describe` shows under "Events".

The events are queued and posted in the background, so posting never slows a handler down, and
a failure to post is only logged. They work the same from sync handlers (run in threads) and
from async ones.
"""

import trioperator as kopf


@kopf.on.create("kopfexamples")
def create_fn(body, **kwargs):
    # Any type and reason: both are free-form words (no spaces), the message is free text.
    kopf.event(body, type="SomeType", reason="SomeReason", message="Some message")

    # Shortcuts in the manner of logging: Normal, Warning, Error events.
    kopf.info(body, reason="SomeReason", message="Some message")
    kopf.warn(body, reason="SomeReason", message="Some message")
    try:
        raise RuntimeError("Exception text.")
    except RuntimeError:
        # The reason defaults to the exception's class name; the text follows the message.
        kopf.exception(body, message="Some exception:")


@kopf.on.create("kopfexamples")
async def create_async_fn(body, **kwargs):
    kopf.info(body, reason="AsyncReason", message="Posted from an async handler")
