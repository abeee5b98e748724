"""The one test PKI: throw-away certificates for the TLS tests (web config, REST and gRPC stand-ins).

Built with ``cryptography``, a declared test dependency (the ``test`` extra). There used to be an
``openssl`` CLI fallback beside each builder; its certificates carried other subject names
(``CN=server`` where this builder writes ``CN=fabricmon``), so a run that took the fallback
failed ``test_reload_switches_users_certificate_and_client_ca`` on the peer's name. One builder,
no fallback: the same certificates on every machine, and a missing dependency is an import
error, not another code path.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

LOOPBACK = "127.0.0.1"
LOOPBACK_SANS = (x509.IPAddress(ipaddress.ip_address(LOOPBACK)), x509.DNSName("localhost"))

KeyCert = tuple[ec.EllipticCurvePrivateKey, x509.Certificate]


def _write(d: Path, name: str, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
    (d / f"{name}.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                      serialization.NoEncryption()))
    (d / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def make_cert(cn: str, issuer: KeyCert | None = None, sans: tuple[x509.GeneralName, ...] = (), ca: bool = False) -> KeyCert:
    """A P-256 key and its certificate, valid from five minutes ago for two days; self-signed
    when ``issuer`` is None."""
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    b = (x509.CertificateBuilder().subject_name(subject).public_key(key.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
         .not_valid_after(now + datetime.timedelta(days=2))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    signer, issuer_name = (key, subject) if issuer is None else (issuer[0], issuer[1].subject)
    return key, b.issuer_name(issuer_name).sign(signer, hashes.SHA256())


@dataclass
class Pki:
    """A folder of ``<name>.crt``/``<name>.key`` files: ``pki["server.crt"]`` is its path."""

    dir: Path

    def __getitem__(self, name: str) -> Path:
        return self.dir / name


def make_pki(d: Path) -> Pki:
    """A server CA with two server certificates for 127.0.0.1 (``server``: CN fabricmon; ``server2``:
    CN fabricmon-rotated), a client CA with a client certificate (``client``: CN prometheus, SAN
    prometheus.example) and one with another SAN (``client-other-san``), and a foreign CA with a
    client certificate it signed (``client-foreign``)."""
    ca = make_cert("test server CA", ca=True)
    _write(d, "ca", *ca)
    _write(d, "server", *make_cert("fabricmon", ca, LOOPBACK_SANS))
    _write(d, "server2", *make_cert("fabricmon-rotated", ca, LOOPBACK_SANS))
    cca = make_cert("test client CA", ca=True)
    _write(d, "client-ca", *cca)
    _write(d, "client", *make_cert("prometheus", cca, (x509.DNSName("prometheus.example"),)))
    _write(d, "client-other-san", *make_cert("intruder", cca, (x509.DNSName("intruder.example"),)))
    other = make_cert("other CA", ca=True)
    _write(d, "other-ca", *other)
    _write(d, "client-foreign", *make_cert("foreign", other, (x509.DNSName("prometheus.example"),)))
    return Pki(d)


def self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """(cert.pem, key.pem) for a stand-in: self-signed, valid for IP 127.0.0.1 and DNS localhost,
    the certificate its own CA file."""
    key, cert = make_cert("fabricmon test stand-in", sans=LOOPBACK_SANS, ca=True)
    _write(directory, "cert", key, cert)
    (directory / "cert.crt").rename(directory / "cert.pem")
    (directory / "cert.key").rename(directory / "key.pem")
    return directory / "cert.pem", directory / "key.pem"
