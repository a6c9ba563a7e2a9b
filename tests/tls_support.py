"""Certificates for the tests that talk TLS to a server of their own (RabbitMQ, MariaDB): a
CA made here, a server certificate for 127.0.0.1 and localhost, and a client certificate."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CLIENT_NAME = "clock-tls-test-client"


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None = None,
    server: bool = False,
) -> x509.Certificate:
    """A certificate of `subject` for `key`, signed by `issuer` (a CA of its own if None)."""
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer[0].subject if issuer else _name(subject))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
    )
    if issuer is None:
        usage = dict.fromkeys(("key_cert_sign", "crl_sign"), True)
    else:
        usage = {"digital_signature": True, "key_agreement": True}
        purpose = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([purpose]), critical=False)
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer[1].public_key()), False
        )
    flags = dict.fromkeys(
        (
            "digital_signature",
            "content_commitment",
            "key_encipherment",
            "data_encipherment",
            "key_agreement",
            "key_cert_sign",
            "crl_sign",
            "encipher_only",
            "decipher_only",
        ),
        False,
    )
    builder = builder.add_extension(x509.KeyUsage(**(flags | usage)), critical=True)
    if server:
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256())


def _write(
    directory: Path, stem: str, certificate: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> None:
    (directory / f"{stem}.pem").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (directory / f"{stem}.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )


def make_certificates(directory: Path) -> Path:
    """ca.pem, server.pem and .key (for 127.0.0.1 and localhost), client.pem and .key, in
    `directory` (made here), which is returned. Each call makes a CA of its own."""
    directory.mkdir()
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("clock test CA", ca_key)
    _write(directory, "ca", ca, ca_key)
    for stem, server in (("server", True), ("client", False)):
        key = ec.generate_private_key(ec.SECP256R1())
        subject = "127.0.0.1" if server else CLIENT_NAME
        _write(directory, stem, _certificate(subject, key, (ca, ca_key), server), key)
    return directory
