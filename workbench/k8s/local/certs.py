"""Certificates and keys for the local control plane: a CA, the apiserver's serving
certificate for 127.0.0.1, and the service-account signing key pair.

Uses the `cryptography` package when it is installed, otherwise the `openssl` command.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import shutil
import subprocess
from pathlib import Path

from ...errors import WorkbenchError

SERVING_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                 "kubernetes.default.svc.cluster.local")
SERVING_IPS = ("127.0.0.1", "10.0.0.1")  # loopback and the first service IP


def write_pki(directory: Path) -> dict[str, Path]:
    """Write ca.crt/ca.key, apiserver.crt/.key, sa.key/sa.pub into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    try:
        import cryptography  # noqa: F401
    except ImportError:
        _write_with_openssl(directory)
    else:
        _write_with_cryptography(directory)
    for key in directory.glob("*.key"):
        key.chmod(0o600)
    return {name: directory / name for name in
            ("ca.crt", "ca.key", "apiserver.crt", "apiserver.key", "sa.key", "sa.pub")}


def _write_with_cryptography(directory: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def pem_key(key) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM,
                                 serialization.PrivateFormat.TraditionalOpenSSL,
                                 serialization.NoEncryption())

    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "workbench-local-ca")])
    ca_cert = (x509.CertificateBuilder()
               .subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now).not_valid_after(now + dt.timedelta(days=3650))
               .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                            crl_sign=True, content_commitment=False,
                                            key_encipherment=False, data_encipherment=False,
                                            key_agreement=False, encipher_only=False,
                                            decipher_only=False), critical=True)
               .sign(ca_key, hashes.SHA256()))

    key = ec.generate_private_key(ec.SECP256R1())
    sans = [x509.DNSName(n) for n in SERVING_NAMES]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in SERVING_IPS]
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + dt.timedelta(days=3650))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (directory / "ca.key").write_bytes(pem_key(ca_key))
    (directory / "ca.crt").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    (directory / "apiserver.key").write_bytes(pem_key(key))
    (directory / "apiserver.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "sa.key").write_bytes(pem_key(sa_key))
    (directory / "sa.pub").write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


def _write_with_openssl(directory: Path) -> None:
    if shutil.which("openssl") is None:
        raise WorkbenchError("cannot make certificates: need the Python package `cryptography`"
                             " or the `openssl` command (pip install cryptography)")
    san = ",".join([f"DNS:{n}" for n in SERVING_NAMES] + [f"IP:{i}" for i in SERVING_IPS])
    d = str(directory)

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    run("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ca.key")
    run("req", "-x509", "-new", "-key", "ca.key", "-days", "3650", "-subj",
        "/CN=workbench-local-ca", "-out", "ca.crt")
    run("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "apiserver.key")
    run("req", "-new", "-key", "apiserver.key", "-subj", "/CN=kube-apiserver",
        "-out", "apiserver.csr")
    (directory / "ext.cnf").write_text(f"subjectAltName={san}\nextendedKeyUsage=serverAuth\n")
    run("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "3650", "-extfile", "ext.cnf", "-out", "apiserver.crt")
    run("genrsa", "-out", "sa.key", "2048")
    run("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
