"""Certificates and keys for the local control plane: one CA, the API server's serving
certificate, client certificates per component, and the service-account signing key; and the
admin's API client (infra.kubeapi.KubeApi) built from them.

Where each file lives and the kubeconfigs that name them: localenv/pki_files.py.

Made once per state folder and reused, so a warm `localenv up` does no crypto.
"""

from __future__ import annotations

import datetime as dt
import errno
import ipaddress
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from infra.kubeapi import KubeApi
from localenv.layout import Layout
from localenv.pki_files import CLIENTS, Pki, kubeconfig_yaml

VALID_FOR = dt.timedelta(days=3650)
SERVER_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local")
SERVER_IPS = ("127.0.0.1", "10.96.0.1")


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    path.chmod(0o600)


def _name(common_name: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _issue(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    ca_name: x509.Name,
    ca_key: ec.EllipticCurvePrivateKey,
    usage: x509.ObjectIdentifier,
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def ensure_pki(directory: Path) -> Pki:
    """Everything missing, issued by the existing CA when there is one (so a running cluster
    keeps trusting what it trusted, and a new component only adds its own certificate)."""
    pki = Pki(directory)
    if pki.complete():
        return pki
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    ca_name = _name("atlas-local-ca")
    if pki.ca_cert.exists() and pki.ca_key.exists():
        loaded = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
        if not isinstance(loaded, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{pki.ca_key}: not the EC key Atlas writes; remove {directory} to start over")
        ca_key = loaded
    else:
        ca_key = _new_ca(pki, ca_name)
        for stale in directory.iterdir():
            if stale not in (pki.ca_key, pki.ca_cert):
                stale.unlink()  # issued by a CA that is gone

    if not (pki.server_cert.exists() and pki.server_key.exists()):
        server_key = ec.generate_private_key(ec.SECP256R1())
        sans: list[x509.GeneralName] = [x509.DNSName(n) for n in SERVER_NAMES]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in SERVER_IPS]
        server = _issue(_name("kube-apiserver"), server_key, ca_name, ca_key, ExtendedKeyUsageOID.SERVER_AUTH, sans)
        _write_key(pki.server_key, server_key)
        pki.server_cert.write_bytes(server.public_bytes(serialization.Encoding.PEM))

    for who, cn, org in CLIENTS:
        if pki.client_cert(who).exists() and pki.client_key(who).exists():
            continue
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _issue(_name(cn, org), key, ca_name, ca_key, ExtendedKeyUsageOID.CLIENT_AUTH)
        _write_key(pki.client_key(who), key)
        pki.client_cert(who).write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    if not (pki.sa_key.exists() and pki.sa_pub.exists()):
        # Service-account tokens are signed with RSA, which every client library verifies.
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write_key(pki.sa_key, sa_key)
        pki.sa_pub.write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
    return pki


def issue_client_pair(pki: Pki, common_name: str, org: str | None = None) -> tuple[bytes, bytes]:
    """A client certificate and key (PEM) for a user of that name (and group), issued by the local
    CA: what a cluster's admins hand a user who logs in with a certificate."""
    loaded = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    if not isinstance(loaded, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{pki.ca_key}: not the EC key Atlas writes")
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _issue(_name(common_name, org), key, _name("atlas-local-ca"), loaded, ExtendedKeyUsageOID.CLIENT_AUTH)
    pem_key = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), pem_key


def _new_ca(pki: Pki, ca_name: x509.Name) -> ec.EllipticCurvePrivateKey:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(pki.ca_key, ca_key)
    pki.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return ca_key


def admin_api(layout: Layout, timeout_s: float) -> KubeApi:
    """The local API server as the admin user, with the credentials the admin kubeconfig names.
    Built in memory rather than read from `layout.kubeconfig`: a missing certificate is then the
    OSError it always was, whether or not `up` has written that file yet."""
    pki = Pki(layout.kube_dir / "pki")
    for needed in (pki.ca_cert, pki.client_cert("admin"), pki.client_key("admin")):
        if not needed.is_file():
            raise FileNotFoundError(errno.ENOENT, "no such file (is the local cluster set up?)", str(needed))
    return KubeApi(yaml.safe_load(kubeconfig_yaml(layout.api_url, pki, "admin")), timeout_s=timeout_s)
