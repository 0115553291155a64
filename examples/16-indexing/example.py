"""In-memory indices: an overview of other objects, kept up to date from their watch-streams.

An `@kopf.index` function is called for every object of its resource (and again on every
change); what it returns is collected into an index named after the function, which every
handler gets as a keyword argument. Resource handlers run only once all the indexed resources
have been listed and indexed, so even the first handler call sees a complete index.
"""

import trioperator as kopf


@kopf.index("configmaps")
def configmaps_by_namespace(namespace, name, **kwargs):
    # A dict is merged into the index by its keys: {namespace: [name, name, ...]}.
    return {namespace: name}


@kopf.index("configmaps", labels={"kopf-example": kopf.PRESENT})
def labelled_configmaps(name, labels, **kwargs):
    # Anything else is collected under the key None: {None: [(name, label), ...]}.
    return name, labels["kopf-example"]


@kopf.timer("kopfexamples", interval=1.0)
def count_configmaps(namespace, configmaps_by_namespace, labelled_configmaps, logger, **kwargs):
    names = sorted(configmaps_by_namespace.get(namespace, []))
    labelled = sorted(labelled_configmaps.get(None, []))
    logger.info(f"INDEX: {len(names)} configmaps in {namespace}; labelled: {labelled}")
    return {"configmaps": len(names), "labelled": [name for name, _ in labelled]}
