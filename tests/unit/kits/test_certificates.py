"""The CA kept for several replicas (``_kits.certificates``): made, written out, loaded back,
checked, and the serving certificates it issues, verified by TLS handshakes in memory."""

from __future__ import annotations

import datetime
import ssl
from pathlib import Path

import pytest
import trustme
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from trioperator._kits.certificates import (
    CA_VALIDITY,
    CertificateAuthority,
    CertificateError,
    encrypt_private_key,
    load_server_certificate,
)

NAMES = ["hooks.ops.svc", "hooks", "hooks.ops", "hooks.ops.svc.cluster.local", "127.0.0.1"]


def handshake(server: ssl.SSLContext, client: ssl.SSLContext, hostname: str) -> None:
    """A TLS handshake between two contexts through memory buffers; raises if it fails."""
    client_in, client_out, server_in, server_out = (ssl.MemoryBIO() for _ in range(4))
    client_side = client.wrap_bio(client_in, client_out, server_hostname=hostname)
    server_side = server.wrap_bio(server_in, server_out, server_side=True)
    for _ in range(5):
        finished = True
        for side in (client_side, server_side):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                finished = False
        server_in.write(client_out.read())
        client_in.write(server_out.read())
        if finished:
            return
    raise AssertionError("the handshake did not finish")


def serving(ca: CertificateAuthority, names: list[str] = NAMES) -> ssl.SSLContext:
    chain, key = ca.issue(names, common_name=names[0])
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    load_server_certificate(context, chain, key)
    return context


def trusting(bundle: bytes) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=bundle.decode("ascii"))


def test_a_generated_ca_loads_back_and_its_certificates_verify_for_every_name() -> None:
    ca = CertificateAuthority.generate("ops/hooks-ca webhook CA")
    loaded = CertificateAuthority.load(ca.cert_pem, ca.key_pem, ca.bundle)
    assert loaded == ca
    server = serving(loaded)
    for name in NAMES:
        handshake(server, trusting(ca.bundle), name)
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
        handshake(server, trusting(ca.bundle), "other.ops.svc")


def test_certificates_of_another_ca_are_not_trusted() -> None:
    ours, theirs = CertificateAuthority.generate("ours"), CertificateAuthority.generate("theirs")
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(serving(theirs), trusting(ours.bundle), NAMES[0])


def test_the_ca_and_the_serving_certificate_are_what_they_claim() -> None:
    now = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
    ca = CertificateAuthority.generate("the CA", now=now)
    assert ca.not_after == now + CA_VALIDITY
    (ca_cert,) = x509.load_pem_x509_certificates(ca.cert_pem)
    assert ca_cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca_cert.not_valid_before_utc < now  # dated back for lagging clocks

    chain, _ = ca.issue(NAMES, common_name=NAMES[0], now=now)
    leaf, issuer = x509.load_pem_x509_certificates(chain)
    assert issuer == ca_cert
    assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    usages = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.SERVER_AUTH]
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == NAMES[:4]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    # It lives as long as the CA that the same replica holds the key of.
    assert leaf.not_valid_after_utc == ca.not_after


def test_a_ca_of_the_users_own_is_used_as_it_is() -> None:
    users = trustme.CA(key_type=trustme.KeyType.RSA)
    bundle = users.cert_pem.bytes() + trustme.CA().cert_pem.bytes()  # e.g. during a rotation
    ca = CertificateAuthority.load(users.cert_pem.bytes(), users.private_key_pem.bytes(), bundle)
    assert ca.bundle == bundle
    context = ssl.create_default_context()
    users.configure_trust(context)
    handshake(serving(ca), context, NAMES[0])


def test_an_expired_ca_is_refused() -> None:
    long_ago = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
    ca = CertificateAuthority.generate("old", now=long_ago)
    with pytest.raises(CertificateError, match="not valid now"):
        CertificateAuthority.load(ca.cert_pem, ca.key_pem)


@pytest.mark.parametrize(
    ("what", "message"),
    [
        ("leaf", "not a CA"),
        ("other key", "not the key"),
        ("garbage certificate", "not PEM"),
        ("garbage key", "cannot be loaded"),
        ("garbage bundle", "bundle is not PEM"),
    ],
)
def test_unusable_cas_are_refused_with_the_reason(what: str, message: str) -> None:
    ca = CertificateAuthority.generate("ca")
    cert, key, bundle = ca.cert_pem, ca.key_pem, None
    if what == "leaf":
        chain, key = ca.issue(["x.example"])
        cert = chain
    elif what == "other key":
        key = CertificateAuthority.generate("another").key_pem
    elif what == "garbage certificate":
        cert = b"-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n"
    elif what == "garbage key":
        key = b"nope"
    else:
        bundle = b"nope"
    with pytest.raises(CertificateError, match=message):
        CertificateAuthority.load(cert, key, bundle)


def test_a_certificate_needs_names() -> None:
    with pytest.raises(ValueError, match="host name"):
        CertificateAuthority.generate("ca").issue([])


def test_an_encrypted_key_needs_its_password(tmp_path: Path) -> None:
    chain, key = CertificateAuthority.generate("ca").issue(["localhost"])
    path = tmp_path / "server.pem"
    path.write_bytes(chain + encrypt_private_key(key, "s3cret"))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with pytest.raises(ssl.SSLError):
        context.load_cert_chain(path, password="wrong")
    context.load_cert_chain(path, password="s3cret")
