"""The webhook server over real sockets: TLS with generated certificates, plain HTTP, routing,
and how the operator's answers and failures reach the API server."""

from __future__ import annotations

import base64
import json
import logging
import ssl
from pathlib import Path

import pytest
import trio
from trioperator._engine.webhooks import WebhookRejected
from trioperator._kits.webhooks import WebhookServer, WebhookServiceServer

from .conftest import Recorder, free_port, post, running

REVIEW = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode()


async def test_self_signed_https_is_verifiable_with_the_advertised_ca(recorder: Recorder) -> None:
    server = WebhookServer(addr="127.0.0.1", path="/hooks/")
    async with running(server, recorder) as srv:
        assert srv.config["url"] == f"https://127.0.0.1:{srv.port}/hooks"
        for hostname in ["127.0.0.1", "localhost"]:
            reply = await post(
                srv.port,
                "/hooks/validate-x",
                REVIEW,
                context=srv.trusting_context(),
                server_hostname=hostname,
            )
            assert reply.status == 200
            assert reply.headers["content-type"] == "application/json"
            assert reply.json()["response"]["warnings"] == ["seen by validate-x"]
    assert [call.body for call in recorder.calls] == [REVIEW, REVIEW]
    assert recorder.calls[0].webhook == "validate-x"
    assert recorder.calls[0].headers is not None
    assert recorder.calls[0].headers["content-type"] == "application/json"
    assert recorder.calls[0].sslpeer == {}


async def test_generated_certificate_is_not_trusted_by_default(recorder: Recorder) -> None:
    async with running(WebhookServer(addr="127.0.0.1"), recorder) as srv:
        with pytest.raises(trio.BrokenResourceError) as err:
            await post(srv.port, "/x", context=ssl.create_default_context())
        assert isinstance(err.value.__cause__, ssl.SSLCertVerificationError)
    assert recorder.calls == []


async def test_extra_sans_and_host_are_in_the_certificate(recorder: Recorder) -> None:
    server = WebhookServer(addr="127.0.0.1", host="webhooks.example", extra_sans=["alt.example"])
    async with running(server, recorder) as srv:
        assert srv.config["url"] == f"https://webhooks.example:{srv.port}"
        for hostname in ["webhooks.example", "alt.example"]:
            reply = await post(
                srv.port, "/x", context=srv.trusting_context(), server_hostname=hostname
            )
            assert reply.status == 200
        with pytest.raises(trio.BrokenResourceError):
            await post(
                srv.port, "/x", context=srv.trusting_context(), server_hostname="other.example"
            )


async def test_cadump_holds_the_advertised_bundle(recorder: Recorder, tmp_path: Path) -> None:
    dump = tmp_path / "ca.pem"
    async with running(WebhookServer(addr="127.0.0.1", cadump=dump), recorder) as srv:
        assert base64.b64decode(srv.config["caBundle"]) == dump.read_bytes()
        context = ssl.create_default_context(cafile=str(dump))
        reply = await post(srv.port, "/x", context=context)
        assert reply.status == 200


async def test_insecure_serves_plain_http_without_a_bundle(recorder: Recorder) -> None:
    async with running(WebhookServer(addr="127.0.0.1", insecure=True, path="p"), recorder) as srv:
        assert srv.config == {"url": f"http://127.0.0.1:{srv.port}/p"}
        reply = await post(srv.port, "/p/mutate-y", REVIEW)
        assert reply.status == 200
    assert [(c.webhook, c.sslpeer) for c in recorder.calls] == [("mutate-y", {})]


@pytest.mark.parametrize(
    ("path", "webhook"),
    [
        ("/root/handler", "handler"),
        ("/root/parent/child", "parent/child"),
        ("/root/with%20space", "with space"),
        ("/root", None),
        ("/root/", None),
    ],
)
async def test_the_url_path_below_the_root_is_the_webhook_id(
    recorder: Recorder, path: str, webhook: str | None
) -> None:
    async with running(
        WebhookServer(addr="127.0.0.1", insecure=True, path="/root"), recorder
    ) as srv:
        reply = await post(srv.port, path, REVIEW)
    assert reply.status == 200
    assert [call.webhook for call in recorder.calls] == [webhook]


async def test_other_paths_and_methods_are_refused(recorder: Recorder) -> None:
    async with running(
        WebhookServer(addr="127.0.0.1", insecure=True, path="/root"), recorder
    ) as srv:
        outside = await post(srv.port, "/rootless/x", REVIEW)
        wrong_method = await post(srv.port, "/root/x", b"", method="GET")
    assert outside.status == 404
    assert b"/rootless/x" in outside.body
    assert wrong_method.status == 405
    assert wrong_method.headers["allow"] == "POST"
    assert recorder.calls == []


async def test_a_rejected_request_gets_its_status_and_message(recorder: Recorder) -> None:
    recorder.error = WebhookRejected("No webhook 'nope' is served here.", status=404)
    async with running(WebhookServer(addr="127.0.0.1", insecure=True), recorder) as srv:
        reply = await post(srv.port, "/nope", REVIEW)
    assert reply.status == 404
    assert reply.body == b"No webhook 'nope' is served here."
    assert reply.headers["content-type"].startswith("text/plain")


async def test_a_failing_review_is_a_500_and_the_server_keeps_serving(
    recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    async with running(WebhookServer(addr="127.0.0.1", insecure=True), recorder) as srv:
        recorder.error = ZeroDivisionError("boom")
        failed = await post(srv.port, "/x", REVIEW)
        recorder.error = None
        served = await post(srv.port, "/x", REVIEW)
    assert failed.status == 500
    assert served.status == 200
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert errors[0].exc_info is not None
    assert "ZeroDivisionError: boom" in caplog.text


async def test_a_fixed_port_is_used_and_advertised(recorder: Recorder) -> None:
    port = await free_port()
    async with running(WebhookServer(addr="127.0.0.1", port=port, insecure=True), recorder) as srv:
        assert srv.config["url"] == f"http://127.0.0.1:{port}"
        assert (await post(port, "/x")).status == 200


async def test_a_service_server_is_verifiable_by_the_service_names(recorder: Recorder) -> None:
    # A CA of its own here; the CA shared through a Secret is tested in test_shared_ca.py.
    port = await free_port()
    server = WebhookServiceServer(
        name="hooks", namespace="ops", addr="127.0.0.1", port=port, path="/p", shared_ca=False
    )
    async with running(server, recorder) as srv:
        assert srv.config["service"] == {
            "namespace": "ops",
            "name": "hooks",
            "port": 443,
            "path": "/p",
        }
        assert "url" not in srv.config
        for hostname in ["hooks.ops.svc", "hooks.ops.svc.cluster.local", "hooks.ops", "hooks"]:
            reply = await post(
                port, "/p/x", context=srv.trusting_context(), server_hostname=hostname
            )
            assert reply.status == 200
