"""The CA that an operator's replicas share for their webhook servers, kept in a Secret.

Every replica behind one Service must present a certificate that the single ``caBundle`` of the
shared webhook configurations vouches for, so they need one CA between them. The first replica
to start makes a CA and creates the Secret; a replica that finds the Secret reads it. Replicas
that start at the same moment all find nothing and all try to create it: the API server lets
exactly one creation win, the others get 409 Conflict and read the winner's CA instead of their
own. Each replica then issues its own serving certificate from that CA, in memory.

The Secret is of type ``kubernetes.io/tls`` in cert-manager's layout: ``tls.crt`` and
``tls.key`` are the CA's certificate and key, ``ca.crt`` the bundle to advertise. So a CA of the
user's own can be put there beforehand (it is used as it is), and the Secret can back a
cert-manager CA Issuer. The operator never changes or deletes it: deleting it (then restarting
the replicas) makes a new CA.

RBAC: ``get`` on this Secret and ``create`` on secrets in its namespace (``trioperator rbac
--webhook-ca-secret NAME`` prints the Role).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import logging
from collections.abc import Mapping
from functools import partial
from typing import Any, Final

import trio

from trioperator._client.api import APIClient
from trioperator._client.errors import APIConflictError, APIForbiddenError, APINotFoundError
from trioperator._client.resources import ALL_VERBS, Resource
from trioperator._kits.certificates import CertificateAuthority, CertificateError
from trioperator._kits.errors import WebhookCAError

__all__ = ["SECRETS", "obtain_shared_ca"]

logger = logging.getLogger("trioperator.webhooks")

SECRETS: Final = Resource(
    group="",
    version="v1",
    plural="secrets",
    kind="Secret",
    singular="secret",
    namespaced=True,
    verbs=ALL_VERBS,
)

EXPIRY_WARNING: Final = datetime.timedelta(days=30)
"""A CA that expires sooner than this is used, with a warning to replace it."""

_ATTEMPTS: Final = 3
"""Rounds of read-or-create: a Secret deleted between a lost race and the reading repeats one."""


async def obtain_shared_ca(api: APIClient, *, name: str, namespace: str) -> CertificateAuthority:
    """The CA in the Secret ``namespace/name``, created with a new CA if there is none.

    Raises :class:`WebhookCAError` when the Secret holds no usable CA or cannot be read or
    created (with the RBAC that is needed).
    """
    where = f"{namespace}/{name}"
    for _ in range(_ATTEMPTS):
        secret = await _read(api, name=name, namespace=namespace)
        if secret is not None:
            ca = _ca_from_secret(secret, where)
            logger.info(f"The webhook servers' CA comes from the Secret {where}.")
            _warn_if_expiring(ca, where)
            return ca
        generate = partial(CertificateAuthority.generate, f"{where} webhook CA")
        ca = await trio.to_thread.run_sync(generate)
        try:
            await api.create(
                SECRETS, namespace=namespace, body=_secret_body(ca, name), logger=logger
            )
        except APIConflictError:
            # Another replica created it meanwhile: its CA is the one, read it next round.
            logger.info(f"Another replica created the Secret {where} first: using its CA.")
            continue
        except APIForbiddenError:
            raise WebhookCAError(_rbac_message(where, "create")) from None
        logger.info(
            f"Created the Secret {where} with a new CA for the webhook servers "
            f"(valid until {ca.not_after:%Y-%m-%d})."
        )
        return ca
    raise WebhookCAError(
        f"The Secret {where} with the webhook servers' CA was created by another replica but "
        f"gone when read, {_ATTEMPTS} times: is something deleting it?"
    )


async def _read(api: APIClient, *, name: str, namespace: str) -> dict[str, Any] | None:
    try:
        return await api.get(SECRETS, namespace=namespace, name=name, logger=logger)
    except APINotFoundError:
        return None
    except APIForbiddenError:
        raise WebhookCAError(_rbac_message(f"{namespace}/{name}", "get")) from None


def _ca_from_secret(secret: Mapping[str, Any], where: str) -> CertificateAuthority:
    data = secret.get("data") or {}
    try:
        cert = _decoded(data, "tls.crt")
        key = _decoded(data, "tls.key")
        bundle = _decoded(data, "ca.crt") if data.get("ca.crt") else None
        return CertificateAuthority.load(cert, key, bundle)
    except (CertificateError, KeyError, binascii.Error) as exc:
        raise WebhookCAError(
            f"The Secret {where} holds no usable CA for the webhook servers ({exc}). It needs "
            f"tls.crt and tls.key of a CA (ca.crt optional); delete it to have one made."
        ) from None


def _decoded(data: Mapping[str, str], key: str) -> bytes:
    if not data.get(key):
        raise KeyError(f"no {key}")
    return base64.b64decode(data[key], validate=True)


def _secret_body(ca: CertificateAuthority, name: str) -> dict[str, Any]:
    def encoded(blob: bytes) -> str:
        return base64.b64encode(blob).decode("ascii")

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "trioperator"}},
        "type": "kubernetes.io/tls",
        "data": {
            "tls.crt": encoded(ca.cert_pem),
            "tls.key": encoded(ca.key_pem),
            "ca.crt": encoded(ca.bundle),
        },
    }


def _warn_if_expiring(ca: CertificateAuthority, where: str) -> None:
    left = ca.not_after - datetime.datetime.now(datetime.UTC)
    if left < EXPIRY_WARNING:
        logger.warning(
            f"The webhook servers' CA in the Secret {where} expires on "
            f"{ca.not_after:%Y-%m-%d %H:%M} UTC: delete the Secret and restart the replicas "
            f"to have a new one made (or put a renewed CA there)."
        )


def _rbac_message(where: str, verb: str) -> str:
    namespace, _, name = where.partition("/")
    return (
        f"Not allowed to {verb} the Secret {where} that keeps the webhook servers' CA. Grant "
        f"`get` on secrets/{name} and `create` on secrets in the namespace {namespace} "
        f"(`trioperator rbac --webhook-ca-secret {name} --webhook-ca-namespace {namespace}` "
        f"prints the Role), or give the server certificate files (certfile=...), or "
        f"shared_ca=False for a CA of its own (one replica only)."
    )
