"""Certificate authorities that outlive a process, and the serving certificates they issue.

trustme's CAs (the development certificates of ``_kits.webhooks``) live and die with the
process that made them. A CA shared by several replicas of an operator is different: one replica
makes it, it is kept (in a Secret, see ``_kits.webhook_ca``) and every replica loads it back to
issue its own serving certificate. That needs a real key pair written out as PEM and read in
again, which is what ``cryptography`` does (trustme is built on it; both come with the
``webhooks`` extra). This is the only module of the package that imports ``cryptography``, and
it is itself imported only when a server needs it, so an operator without webhooks never loads
either.

Keys are ECDSA P-256 (quick to make, accepted by the API server's Go TLS stack); signatures
SHA-256. Nothing here does I/O but the short-lived file through which ``ssl`` loads a chain.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import os
import ssl
import tempfile
from collections.abc import Sequence
from typing import TypeAlias

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "CA_VALIDITY",
    "CertificateAuthority",
    "CertificateError",
    "encrypt_private_key",
    "load_server_certificate",
]

CA_VALIDITY = datetime.timedelta(days=3650)
"""How long a generated CA is valid: it is kept, so it must last for the operator's lifetime."""

CLOCK_SKEW = datetime.timedelta(hours=1)
"""How far back certificates are dated, so that a client whose clock lags accepts them."""


class CertificateError(ValueError):
    """A stored CA cannot be used: not PEM, not a CA, a key of another certificate, expired."""


@dataclasses.dataclass(frozen=True)
class CertificateAuthority:
    """A CA (its certificate chain and private key, PEM) that issues serving certificates."""

    cert_pem: bytes
    """The signing CA's certificate first, then the certificates above it (if any)."""
    key_pem: bytes
    """The signing CA's private key (unencrypted PKCS#8)."""
    bundle: bytes
    """What clients are told to trust (``caBundle``): a given bundle, else ``cert_pem``."""

    @classmethod
    def generate(
        cls, common_name: str, *, now: datetime.datetime | None = None
    ) -> CertificateAuthority:
        """A new self-signed CA named ``common_name``, valid for :data:`CA_VALIDITY`."""
        now = now or datetime.datetime.now(datetime.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "trioperator"),
                x509.NameAttribute(NameOID.COMMON_NAME, common_name),
            ]
        )
        public = key.public_key()
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - CLOCK_SKEW)
            .not_valid_after(now + CA_VALIDITY)
            # It signs serving certificates only, never other CAs.
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(cert_sign=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(key, hashes.SHA256())
        )
        cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        return cls(cert_pem=cert_pem, key_pem=_private_pem(key), bundle=cert_pem)

    @classmethod
    def load(
        cls,
        cert_pem: bytes,
        key_pem: bytes,
        bundle: bytes | None = None,
        *,
        now: datetime.datetime | None = None,
    ) -> CertificateAuthority:
        """A stored CA, checked: a CA certificate, its own key, valid at ``now``.

        Raises :class:`CertificateError` saying what is wrong.
        """
        ca = cls(cert_pem=cert_pem, key_pem=key_pem, bundle=bundle or cert_pem)
        signer, key = ca._signer()
        if bundle is not None:
            try:
                x509.load_pem_x509_certificates(bundle)
            except ValueError as exc:
                raise CertificateError(f"The CA bundle is not PEM: {exc}") from None
        try:
            constraints = signer.extensions.get_extension_for_class(x509.BasicConstraints)
        except x509.ExtensionNotFound:
            constraints = None
        if constraints is None or not constraints.value.ca:
            raise CertificateError("The certificate is not a CA's (no basicConstraints CA:TRUE).")
        if _public_der(signer.public_key()) != _public_der(key.public_key()):
            raise CertificateError("The private key is not the key of the CA's certificate.")
        now = now or datetime.datetime.now(datetime.UTC)
        if not signer.not_valid_before_utc <= now < signer.not_valid_after_utc:
            raise CertificateError(
                f"The CA is not valid now: from {signer.not_valid_before_utc:%Y-%m-%d %H:%M} "
                f"to {signer.not_valid_after_utc:%Y-%m-%d %H:%M} UTC."
            )
        return ca

    @property
    def not_after(self) -> datetime.datetime:
        """When the signing certificate expires (UTC); the certificates it issues expire then."""
        return self._signer()[0].not_valid_after_utc

    def issue(
        self,
        hostnames: Sequence[str],
        *,
        common_name: str | None = None,
        now: datetime.datetime | None = None,
    ) -> tuple[bytes, bytes]:
        """A serving certificate for ``hostnames`` (DNS names or IPs): its chain and key, PEM.

        The chain is the new certificate followed by the CA's, so clients that trust the
        bundle can verify it. It is valid until the CA expires: the replica that holds it also
        holds the CA's key, so a shorter life would protect nothing more, and the certificate
        is re-issued from the CA at every start anyway.
        """
        if not hostnames:
            raise ValueError("A serving certificate needs at least one host name.")
        signer, signing_key = self._signer()
        now = now or datetime.datetime.now(datetime.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "trioperator")]
        if common_name:
            attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        try:
            authority = x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(
                signer.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
            )
        except x509.ExtensionNotFound:  # a CA of the user's own, made without one
            authority = x509.AuthorityKeyIdentifier.from_issuer_public_key(signing_key.public_key())
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attributes))
            .issuer_name(signer.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(max(now - CLOCK_SKEW, signer.not_valid_before_utc))
            .not_valid_after(signer.not_valid_after_utc)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName(_general_names(hostnames)), critical=False)
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .add_extension(authority, critical=False)
            .sign(signing_key, hashes.SHA256())
        )
        chain = cert.public_bytes(serialization.Encoding.PEM) + self.cert_pem
        return chain, _private_pem(key)

    def _signer(self) -> tuple[x509.Certificate, SigningKey]:
        try:
            certs = x509.load_pem_x509_certificates(self.cert_pem)
        except ValueError as exc:
            raise CertificateError(f"The CA's certificate is not PEM: {exc}") from None
        try:
            key = serialization.load_pem_private_key(self.key_pem, password=None)
        except (ValueError, TypeError) as exc:
            raise CertificateError(f"The CA's private key cannot be loaded: {exc}") from None
        if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
            raise CertificateError(f"The CA's key cannot sign with SHA-256: {type(key).__name__}.")
        return certs[0], key


def load_server_certificate(context: ssl.SSLContext, chain: bytes, key: bytes) -> None:
    """Load a chain and its key (PEM) into a server's ``context``.

    ``ssl`` loads certificates from files only: they pass through a file in a fresh private
    directory (mode 0700), removed at once. In the manifests, that is the memory-backed /tmp.
    """
    with tempfile.TemporaryDirectory(prefix="trioperator-tls-") as directory:
        path = os.path.join(directory, "server.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(key + chain)
        context.load_cert_chain(path)


def encrypt_private_key(key_pem: bytes, password: str) -> bytes:
    """An unencrypted PEM private key, encrypted with ``password`` (PKCS#8)."""
    key = serialization.load_pem_private_key(key_pem, password=None)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(password.encode("utf-8")),
    )


SigningKey: TypeAlias = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
"""The keys a CA of ours (ECDSA) or of the user's own (also RSA) signs certificates with."""


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    # A CA signs certificates; a serving certificate signs the TLS handshake (ECDHE), no more.
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _general_names(hostnames: Sequence[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for hostname in hostnames:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(hostname)))
        except ValueError:
            names.append(x509.DNSName(hostname))
    return names


def _private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _public_der(key: object) -> bytes:
    if not isinstance(key, ec.EllipticCurvePublicKey | rsa.RSAPublicKey):
        return b""  # no match with any key we can sign with
    return key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
