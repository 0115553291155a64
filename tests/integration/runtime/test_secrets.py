"""Credentials never leak: not in logs (DEBUG), posted events, exceptions, nor the liveness output.

Also: TLS verification is never off silently, only by an explicit option, with a warning.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from typing import Any

import httpx2 as httpx
import pytest
import trio
import trioperator as kopf
import trustme
from trioperator._client.credentials import ConnectionInfo, Vault
from trioperator._client.tls import build_ssl_context
from trioperator._runtime.program.operator import Operator
from trioperator.testing import FakeAPI

TOKEN = "s3cr3t-bearer-token-4f9a1c"


def key_markers(pem: bytes) -> list[str]:
    """Distinctive pieces of a PEM private key: any of them in any output is a leak."""
    lines = pem.decode().splitlines()[1:-1]
    return [line for line in lines if len(line) >= 32][:3]


async def test_no_credential_appears_in_any_output_at_debug(
    fake_api: FakeAPI,
    registry: kopf.OperatorRegistry,
    settings: kopf.OperatorSettings,
    logs: Any,
) -> None:
    ca = trustme.CA()
    client_cert = ca.issue_cert("operator@example")
    client_key = client_cert.private_key_pem.bytes()
    server_cert = ca.issue_cert("127.0.0.1")
    webhook_key = server_cert.private_key_pem.bytes()
    secrets = [TOKEN, *key_markers(client_key), *key_markers(webhook_key)]
    fake_api.tokens = {TOKEN}
    settings.posting.loggers = True
    settings.posting.level = logging.DEBUG
    # The webhook server serves TLS with its private key (an admission handler makes it run).
    files = contextlib.ExitStack()
    cafile = files.enter_context(ca.cert_pem.tempfile())
    certfile = files.enter_context(server_cert.cert_chain_pems[0].tempfile())
    pkeyfile = files.enter_context(server_cert.private_key_pem.tempfile())
    settings.admission.server = kopf.WebhookServer(
        host="127.0.0.1", port=0, certfile=certfile, pkeyfile=pkeyfile, cafile=cafile
    )
    exceptions: list[str] = []

    @kopf.on.validate("kopfexamples", id="validate_fn", registry=registry)
    async def validate_fn(**_: Any) -> None:
        pass

    @kopf.on.probe(id="info", registry=registry)
    async def info_probe(**_: Any) -> str:
        return "fine"

    @kopf.on.create("kopfexamples", id="create_fn", registry=registry)
    async def create_fn(logger: Any, retry: int, **_: Any) -> None:
        logger.debug("A debug line from the handler.")
        if retry == 0:
            raise kopf.TemporaryError("Failing once, on purpose.", delay=1)

    info = ConnectionInfo(
        server=fake_api.url,
        token=TOKEN,
        certificate_data=client_cert.cert_chain_pems[0].bytes(),
        private_key_data=client_key,
    )
    operator = Operator(
        registry=registry,
        settings=settings,
        vault=Vault({"fake": info}),
        liveness_endpoint="http://127.0.0.1:0/healthz",
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(files_closed_after, operator, files)
        with trio.fail_after(60):
            await operator.ready_flag.wait()
        fake_api.create_object(
            "kopfexamples",
            {
                "apiVersion": "kopf.dev/v1",
                "kind": "KopfExample",
                "metadata": {"name": "kopf-example-1", "namespace": "default"},
                "spec": {"field": "value"},
            },
        )
        with trio.fail_after(60):
            while logs.count("Handler 'create_fn' succeeded") == 0:  # noqa: ASYNC110
                await trio.sleep(0.1)
            # Waited for, not assumed after a fixed real-time sleep: the k8s Events are posted
            # from a queue of their own (on real time here).
            while not any(  # noqa: ASYNC110
                "Failing once" in event["message"]
                for event in fake_api.objects("events", "default")
            ):
                await trio.sleep(0.1)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{operator.liveness_port}") as c:
            liveness = (await c.get("/healthz")).text
        exceptions.append(repr(info))
        exceptions.append(str(operator.vault))
        operator.stop()

    events = fake_api.objects("events", "default")
    assert logs.count("A debug line from the handler.") >= 1  # DEBUG was really on
    assert logs.count("webhook") + logs.count("Webhook") >= 1  # the webhook server ran
    assert any("Failing once" in e["message"] for e in events)  # and posted as events
    outputs = {
        "logs": "\n".join(line.message for line in logs.lines),
        "events": repr(events),
        "exceptions": "\n".join(exceptions),
        "liveness": liveness,
    }
    for where, text in outputs.items():
        for secret in secrets:
            assert secret not in text, f"a secret in the {where}"


async def files_closed_after(operator: Operator, files: contextlib.ExitStack) -> None:
    with files:
        await operator.main()


def test_tls_verification_is_off_only_when_asked_and_then_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="trioperator")
    context = build_ssl_context(ConnectionInfo(server="https://example:6443"))
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]

    context = build_ssl_context(ConnectionInfo(server="https://example:6443", insecure=True))
    assert context.verify_mode == ssl.CERT_NONE
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "TLS verification of the API server https://example:6443 is OFF" in warnings[0]
