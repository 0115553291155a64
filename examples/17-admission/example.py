"""Admission webhooks: validating and mutating handlers the API server calls before it stores.

A validating handler rejects a create/update by raising `kopf.AdmissionError` (its message and
code reach the client); a mutating handler edits the `patch`, and the API server applies it to
the object before storing. Both can return `warnings`, which kubectl prints.

The API server reaches the operator through a webhook server: `kopf.WebhookServer` listens on
HTTPS with a self-signed certificate made at start (the `webhooks` extra: trustme). With
`settings.admission.managed`, the operator writes the Validating/MutatingWebhookConfiguration
itself: one webhook per handler, removed again when the operator exits (unless `persistent`).

The namespace selector (a trioperator setting beyond Kopf) limits admission to namespaces
labelled `kopf.dev/admission=enabled`: a broken or stopped operator cannot block the objects
of the whole cluster.

    kubectl label namespace default kopf.dev/admission=enabled
    trioperator run examples/17-admission/example.py --verbose
    kubectl apply -f examples/obj.yaml     # stored with spec.injected, and a warning
"""

import trioperator as kopf


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_):
    # The API server runs on this machine here; a cluster in a VM or a container needs a
    # host name it can resolve (kopf.WebhookAutoServer guesses it), or a tunnel.
    settings.admission.server = kopf.WebhookServer(addr="127.0.0.1")
    settings.admission.managed = "auto.kopf.dev"
    settings.admission.namespace_selector = {"matchLabels": {"kopf.dev/admission": "enabled"}}


@kopf.on.validate("kopfexamples")
def check_field(spec, operation, dryrun, warnings, logger, **_):
    logger.info(f"Reviewing a {operation} (dry run: {dryrun}).")
    if spec.get("field") == "wrong":
        raise kopf.AdmissionError("The field must not be 'wrong'; change it.", code=422)
    if "duration" not in spec:
        warnings.append("No spec.duration given: 1m is assumed.")


@kopf.on.validate("kopfexamples", field="spec.field", value="forbidden")
def forbid_value(**_):
    # Filters work as for any handler: this one only runs for that exact value.
    raise kopf.AdmissionError("The value 'forbidden' is not allowed.", code=403)


@kopf.on.mutate("kopfexamples", operations=["CREATE"], labels={"somelabel": "somevalue"})
def inject_defaults(spec, patch, **_):
    # The label filter becomes the webhook's objectSelector: the API server calls this
    # handler only for labelled objects.
    patch.spec["injected"] = 123
    if "items" not in spec:
        patch.spec["items"] = ["default-item"]
