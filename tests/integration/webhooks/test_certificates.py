"""Certificates of the webhook server: provided files, client-certificate verification, and
rotation when the files change on disk."""

from __future__ import annotations

import base64
import dataclasses
import logging
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h11
import pytest
import trio
import trio.testing
import trustme
from trioperator._kits.webhooks import WebhookServer
from trioperator._runtime.admission.webhook_serving import RETIRED_GRACE

from .conftest import Recorder, Running, post, running, trusting, write_server_files


def bundle(srv: Running) -> bytes:
    return base64.b64decode(srv.config["caBundle"])


async def test_provided_certificate_and_ca_are_served_and_advertised(
    recorder: Recorder, tmp_path: Path
) -> None:
    ca = trustme.CA()
    certfile, pkeyfile, cafile = write_server_files(tmp_path, ca)
    server = WebhookServer(addr="127.0.0.1", certfile=certfile, pkeyfile=pkeyfile, cafile=cafile)
    async with running(server, recorder) as srv:
        assert bundle(srv) == ca.cert_pem.bytes()
        assert (await post(srv.port, "/x", context=trusting(ca))).status == 200


async def test_without_a_ca_the_certificate_itself_is_advertised(
    recorder: Recorder, tmp_path: Path
) -> None:
    certfile, pkeyfile, _ = write_server_files(tmp_path, trustme.CA())
    server = WebhookServer(addr="127.0.0.1", certfile=certfile, pkeyfile=pkeyfile)
    async with running(server, recorder) as srv:
        assert bundle(srv) == certfile.read_bytes()


async def test_a_key_that_does_not_match_fails_at_start(recorder: Recorder, tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("localhost")
    certfile, pkeyfile = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.cert_chain_pems[0].write_to_path(str(certfile))
    cert.private_key_pem.write_to_path(str(pkeyfile))
    other = trustme.CA().issue_cert("localhost")
    other.private_key_pem.write_to_path(str(pkeyfile))  # not the certificate's key
    server = WebhookServer(addr="127.0.0.1", certfile=certfile, pkeyfile=pkeyfile)
    with pytest.raises(ExceptionGroup) as err:
        async with running(server, recorder):
            pass  # pragma: no cover
    assert err.group_contains(ssl.SSLError, match="KEY_VALUES_MISMATCH")


async def test_required_client_certificates_are_verified_and_passed_as_sslpeer(
    recorder: Recorder, client_ca: trustme.CA, tmp_path: Path
) -> None:
    client_ca.cert_pem.write_to_path(str(tmp_path / "clients.pem"))
    server = WebhookServer(
        addr="127.0.0.1",
        verify_mode=ssl.CERT_REQUIRED,
        verify_cafile=tmp_path / "clients.pem",
    )
    async with running(server, recorder) as srv:
        anonymous = srv.trusting_context()
        with pytest.raises(trio.BrokenResourceError):
            await post(srv.port, "/x", context=anonymous)

        stranger = srv.trusting_context()
        trustme.CA().issue_cert("apiserver.example", common_name="stranger").configure_cert(
            stranger
        )
        with pytest.raises(trio.BrokenResourceError):
            await post(srv.port, "/x", context=stranger)

        known = srv.trusting_context()
        client_ca.issue_cert("apiserver.example", common_name="apiserver").configure_cert(known)
        reply = await post(srv.port, "/x", context=known)
    assert reply.status == 200
    assert len(recorder.calls) == 1
    sslpeer = recorder.calls[0].sslpeer
    assert sslpeer is not None
    assert (("commonName", "apiserver"),) in sslpeer["subject"]
    assert ("DNS", "apiserver.example") in sslpeer["subjectAltName"]


async def test_client_certificates_are_optional_when_only_a_ca_is_given(
    recorder: Recorder, client_ca: trustme.CA
) -> None:
    # PEM as bytes (ssl itself would take bytes as DER only).
    server = WebhookServer(addr="127.0.0.1", verify_cadata=client_ca.cert_pem.bytes())
    async with running(server, recorder) as srv:
        anonymous = await post(srv.port, "/x", context=srv.trusting_context())
        known = srv.trusting_context()
        client_ca.issue_cert("apiserver.example", common_name="apiserver").configure_cert(known)
        verified = await post(srv.port, "/x", context=known)
        stranger = srv.trusting_context()
        trustme.CA().issue_cert("apiserver.example").configure_cert(stranger)
        with pytest.raises(trio.BrokenResourceError):
            await post(srv.port, "/x", context=stranger)
    assert (anonymous.status, verified.status) == (200, 200)
    assert recorder.calls[0].sslpeer == {}
    assert recorder.calls[1].sslpeer
    assert (("commonName", "apiserver"),) in recorder.calls[1].sslpeer["subject"]
    assert len(recorder.calls) == 2


async def test_renewed_files_restart_the_server_and_advertise_the_new_ca(
    recorder: Recorder, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    old_ca, new_ca = trustme.CA(), trustme.CA()
    certfile, pkeyfile, cafile = write_server_files(tmp_path, old_ca)
    server = WebhookServer(
        addr="127.0.0.1",
        certfile=certfile,
        pkeyfile=pkeyfile,
        cafile=cafile,
        file_check_interval=5,
    )
    async with running(server, recorder) as srv:
        assert (await post(srv.port, "/x", context=trusting(old_ca))).status == 200
        write_server_files(tmp_path, new_ca)
        mock_clock.jump(4.9)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(trio.WouldBlock):
            srv.configs.receive_nowait()  # not checked yet
        mock_clock.jump(0.1)
        renewed = await srv.configs.receive()
        assert renewed["url"] == srv.config["url"]
        assert base64.b64decode(renewed["caBundle"]) == new_ca.cert_pem.bytes()
        assert (await post(srv.port, "/x", context=trusting(new_ca))).status == 200
        with pytest.raises(trio.BrokenResourceError):
            await post(srv.port, "/x", context=trusting(old_ca))
    assert len(recorder.calls) == 2


async def test_unchanged_files_do_not_restart_the_server(
    recorder: Recorder, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    certfile, pkeyfile, _ = write_server_files(tmp_path, trustme.CA())
    server = WebhookServer(
        addr="127.0.0.1", certfile=certfile, pkeyfile=pkeyfile, file_check_interval=5
    )
    async with running(server, recorder) as srv:
        certfile.write_bytes(certfile.read_bytes())  # touched, same content
        await trio.sleep(60)
        with pytest.raises(trio.WouldBlock):
            srv.configs.receive_nowait()


class ErrorSignal(logging.Handler):
    """Wakes a test up when the server logs an error (logged in trio's thread)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.logged = trio.Event()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        self.logged.set()


@pytest.fixture
def error_signal() -> Iterator[ErrorSignal]:
    handler = ErrorSignal()
    logger = logging.getLogger("trioperator.webhooks")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


async def test_a_half_renewed_pair_is_not_used_until_complete(
    recorder: Recorder,
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    error_signal: ErrorSignal,
) -> None:
    old_ca, new_ca = trustme.CA(), trustme.CA()
    certfile, pkeyfile, _ = write_server_files(tmp_path, old_ca)
    server = WebhookServer(
        addr="127.0.0.1", certfile=certfile, pkeyfile=pkeyfile, file_check_interval=5
    )
    async with running(server, recorder) as srv:
        fresh = tmp_path / "fresh"
        fresh.mkdir()
        new_cert, new_key, _ = write_server_files(fresh, new_ca)
        certfile.write_bytes(new_cert.read_bytes())  # the key is not renewed yet
        await error_signal.logged.wait()
        assert "previous ones" in error_signal.messages[0]
        await trio.sleep(60)  # more checks of the same files
        with pytest.raises(trio.WouldBlock):
            srv.configs.receive_nowait()
        assert (await post(srv.port, "/x", context=trusting(old_ca))).status == 200

        pkeyfile.write_bytes(new_key.read_bytes())
        renewed = await srv.configs.receive()
        assert base64.b64decode(renewed["caBundle"]) == new_cert.read_bytes()
        assert (await post(srv.port, "/x", context=trusting(new_ca))).status == 200
    assert len(error_signal.messages) == 1  # once per inconsistent state, not per check


@pytest.mark.parametrize("password", [None, "s3cret"])
async def test_kopf_build_certificate_makes_a_servable_and_trustable_pair(
    recorder: Recorder, tmp_path: Path, password: str | None
) -> None:
    cert, key = WebhookServer.build_certificate(["localhost", "0.0.0.0", "127.0.0.1"], password)
    certfile, pkeyfile = tmp_path / "cert.pem", tmp_path / "key.pem"
    certfile.write_bytes(cert)
    pkeyfile.write_bytes(key)
    assert (b"ENCRYPTED" in key) == (password is not None)
    server = WebhookServer(
        addr="127.0.0.1", certfile=certfile, pkeyfile=pkeyfile, password=password
    )
    async with running(server, recorder) as srv:
        assert bundle(srv) == cert  # no cafile: the certificate file is the bundle
        client = ssl.create_default_context(cadata=cert.decode())
        for hostname in ["localhost", "127.0.0.1"]:
            reply = await post(srv.port, "/x", context=client, server_hostname=hostname)
            assert reply.status == 200


@dataclasses.dataclass
class Gated(Recorder):
    """Reviews of the webhook ``slow`` wait for the gate (a review in flight)."""

    entered: trio.Event = dataclasses.field(default_factory=trio.Event)
    gate: trio.Event = dataclasses.field(default_factory=trio.Event)

    async def __call__(self, request: Any, *, webhook: str | None = None, **kwargs: Any) -> Any:
        if webhook == "slow":
            self.entered.set()
            await self.gate.wait()
        return await super().__call__(request, webhook=webhook, **kwargs)


async def start_slow_review(
    nursery: trio.Nursery, port: int, context: ssl.SSLContext
) -> dict[str, Any]:
    outcome: dict[str, Any] = {}

    async def review() -> None:
        try:
            outcome["reply"] = await post(port, "/slow", context=context)
        except (trio.BrokenResourceError, h11.RemoteProtocolError) as exc:
            outcome["error"] = exc

    nursery.start_soon(review)
    return outcome


async def test_a_review_in_flight_is_answered_across_a_restart(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    old_ca, new_ca = trustme.CA(), trustme.CA()
    certfile, pkeyfile, cafile = write_server_files(tmp_path, old_ca)
    fn = Gated()
    server = WebhookServer(
        addr="127.0.0.1", certfile=certfile, pkeyfile=pkeyfile, cafile=cafile, file_check_interval=5
    )
    async with running(server, fn) as srv, trio.open_nursery() as nursery:
        slow = await start_slow_review(nursery, srv.port, trusting(old_ca))
        await fn.entered.wait()
        write_server_files(tmp_path, new_ca)
        mock_clock.jump(5)
        await srv.configs.receive()
        fast = await post(srv.port, "/fast", context=trusting(new_ca))
        assert fast.status == 200
        assert "reply" not in slow
        fn.gate.set()
    assert slow["reply"].status == 200
    assert [call.webhook for call in fn.calls] == ["fast", "slow"]


async def test_a_review_in_flight_is_cut_after_the_grace_period(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    old_ca = trustme.CA()
    certfile, pkeyfile, cafile = write_server_files(tmp_path, old_ca)
    fn = Gated()
    server = WebhookServer(
        addr="127.0.0.1", certfile=certfile, pkeyfile=pkeyfile, cafile=cafile, file_check_interval=5
    )
    async with running(server, fn) as srv, trio.open_nursery() as nursery:
        slow = await start_slow_review(nursery, srv.port, trusting(old_ca))
        await fn.entered.wait()
        write_server_files(tmp_path, trustme.CA())
        mock_clock.jump(5)
        await srv.configs.receive()
        mock_clock.jump(RETIRED_GRACE - 1)
        await trio.testing.wait_all_tasks_blocked()
        assert slow == {}
        mock_clock.jump(1)
    assert "error" in slow
    assert fn.calls == []  # never answered


async def test_a_renewed_client_ca_is_used_after_the_check(
    recorder: Recorder, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    old_clients, new_clients = trustme.CA(), trustme.CA()
    clients = tmp_path / "clients.pem"
    clients.write_bytes(old_clients.cert_pem.bytes())
    server = WebhookServer(
        addr="127.0.0.1",
        verify_mode=ssl.CERT_REQUIRED,
        verify_cafile=clients,
        file_check_interval=5,
    )
    async with running(server, recorder) as srv:
        old_client = srv.trusting_context()
        old_clients.issue_cert("apiserver.example").configure_cert(old_client)
        assert (await post(srv.port, "/x", context=old_client)).status == 200

        clients.write_bytes(new_clients.cert_pem.bytes())
        mock_clock.jump(5)
        renewed = await srv.configs.receive()
        new_client = srv.trusting_context(renewed)
        new_clients.issue_cert("apiserver.example").configure_cert(new_client)
        assert (await post(srv.port, "/x", context=new_client)).status == 200
        stale_client = srv.trusting_context(renewed)
        old_clients.issue_cert("apiserver.example").configure_cert(stale_client)
        with pytest.raises(trio.BrokenResourceError):
            await post(srv.port, "/x", context=stale_client)
    assert len(recorder.calls) == 2
