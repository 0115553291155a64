"""Operator-level hooks: startup, login, probes and cleanup, around the object handlers.

* ``on.startup`` handlers run before the operator touches the cluster; they may tune
  ``settings`` and prepare ``memo``, which every handler then shares.
* ``on.login`` handlers give the credentials (here: the kubeconfig, as the default would).
* ``on.probe`` handlers feed the liveness endpoint: run with ``-L http://127.0.0.1:8080/healthz``
  and ``curl`` it to see their results as JSON (cached for a few seconds, so that frequent
  probes do not run the handlers every time); it answers HTTP 500 if a probe fails or a watcher
  has died or stalled.
* ``on.cleanup`` handlers run once everything else has stopped, on the way out.

Try it: ``trioperator run -L http://127.0.0.1:8080/healthz examples/13-hooks/example.py``,
apply ../obj.yaml, ``curl http://127.0.0.1:8080/healthz``, then Ctrl-C.
"""

import datetime
import logging

import trioperator as kopf


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, logger, **kwargs):
    # The handlers' log lines at WARNING and above also become k8s Events of their objects.
    settings.posting.loggers = True
    settings.posting.level = logging.WARNING
    # Several workers per object kind at most; more wait in the queue.
    settings.batching.worker_limit = 10
    memo.seen = set()
    logger.info("STARTUP: settings tuned, memo prepared.")


@kopf.on.login()
def login_fn(**kwargs):
    # A custom source of credentials would go here (a vault, a token file...).
    return kopf.login_with_kubeconfig(**kwargs)


@kopf.on.create("kopfexamples")
async def create_fn(name, namespace, memo: kopf.Memo, logger, **kwargs):
    memo.seen.add(f"{namespace}/{name}")
    logger.info("Only in the log: below the posting level.")
    logger.warning("In the log and in `kubectl describe`.")
    return {"message": "seen"}


@kopf.on.probe(id="now")
def get_current_timestamp(**kwargs):
    return datetime.datetime.now(datetime.UTC).isoformat()


@kopf.on.probe(id="objects_seen")
def count_objects(memo: kopf.Memo, **kwargs):
    return len(memo.seen)


@kopf.on.cleanup()
async def cleanup_fn(memo: kopf.Memo, logger, **kwargs):
    logger.info(f"CLEANUP: {len(memo.seen)} object(s) seen in this run; goodbye.")
