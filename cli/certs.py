"""`coordinator certs generate`: a private CA and the certificates a node and its clients need.

Writes into DIR: ca.pem, ca-key.pem (the CA), server.pem, server-key.pem (for the Kafka
listeners' COORD_SSL_CERTFILE/KEYFILE and the admin API's COORD_ADMIN_SSL_CERTFILE/KEYFILE;
its names: every --hostname, localhost and 127.0.0.1), and for each --client NAME
client-NAME.pem, client-NAME-key.pem (CN=NAME: the principal `User:CN=NAME` on an SSL
listener with client authentication). Keys are written with mode 0600, the directory is made
0700. Idempotent: an existing file is kept unless --force; several processes may run it on one
directory at once (containers starting together on a shared volume): a lock serializes them.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import ipaddress
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

certs_cli = typer.Typer(
    no_args_is_help=True, help="Certificates for TLS listeners: a private CA, server, clients."
)

DEFAULT_DAYS = 825  # what browsers and most TLS stacks accept for a leaf certificate
CA_DAYS = 3650


@dataclass
class Issued:
    written: list[Path]
    kept: list[Path]


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    with open(directory / ".lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _write(path: Path, data: bytes, private: bool) -> None:
    """Atomically (a temporary file renamed): a reader never sees half a key."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(tmp, 0o600 if private else 0o644)
    os.replace(tmp, path)


def _key() -> ec.EllipticCurvePrivateKey:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def _name(cn: str) -> x509.Name:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "coordinator"),
            x509.NameAttribute(NameOID.COMMON_NAME, cn),
        ]
    )


def _make_ca(days: int) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    name = _name("coordinator CA")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    cn: str,
    days: int,
    *,
    server_names: list[str] | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID

    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server_names else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.public_key()),  # type: ignore[arg-type]
            critical=False,
        )
    )
    if server_names:
        alt: list[x509.GeneralName] = []
        for n in server_names:
            try:
                alt.append(x509.IPAddress(ipaddress.ip_address(n)))
            except ValueError:
                alt.append(x509.DNSName(n))
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def server_names(hostnames: list[str]) -> list[str]:
    """The server certificate's names: the given ones, then localhost and 127.0.0.1."""
    out: list[str] = []
    for n in [*hostnames, "localhost", "127.0.0.1"]:
        n = n.strip().lower()
        if n and n not in out:
            out.append(n)
    return out


def generate(
    directory: Path,
    hostnames: list[str],
    clients: list[str],
    *,
    force: bool = False,
    days: int = DEFAULT_DAYS,
) -> Issued:
    """Make what is missing (everything with `force`). Raises ValueError when a certificate
    would be kept that the CA in the directory did not sign (the CA was replaced)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    created = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    if created:
        directory.chmod(0o700)
    done = Issued([], [])
    with _locked(directory):
        ca_file, ca_key_file = directory / "ca.pem", directory / "ca-key.pem"
        leaves = [("server", None)] + [(f"client-{c}", c) for c in clients]
        if ca_file.exists() and ca_key_file.exists() and not force:
            ca = x509.load_pem_x509_certificate(ca_file.read_bytes())
            loaded = serialization.load_pem_private_key(ca_key_file.read_bytes(), None)
            if not isinstance(loaded, ec.EllipticCurvePrivateKey):
                raise ValueError(f"{ca_key_file} is not an EC key made by this command")
            ca_key = loaded
            done.kept += [ca_file, ca_key_file]
            new_ca = False
        else:
            ca, ca_key = _make_ca(CA_DAYS)
            _write(ca_key_file, _key_pem(ca_key), private=True)
            _write(ca_file, _cert_pem(ca), private=False)
            done.written += [ca_file, ca_key_file]
            new_ca = True
        for stem, client in leaves:
            cert_file, key_file = directory / f"{stem}.pem", directory / f"{stem}-key.pem"
            if cert_file.exists() and key_file.exists() and not force:
                if new_ca:
                    raise ValueError(
                        f"{cert_file} exists but was not signed by the new CA in {directory}; "
                        "use --force to issue every certificate again"
                    )
                done.kept += [cert_file, key_file]
                continue
            if client is None:
                cert, key = _leaf(
                    ca,
                    ca_key,
                    server_names(hostnames)[0],
                    days,
                    server_names=server_names(hostnames),
                )
            else:
                cert, key = _leaf(ca, ca_key, client, days)
            _write(key_file, _key_pem(key), private=True)
            _write(cert_file, _cert_pem(cert), private=False)
            done.written += [cert_file, key_file]
    return done


@certs_cli.command("generate")
def generate_command(
    directory: Annotated[Path, typer.Option("--dir", help="where to write the files")],
    hostname: Annotated[
        list[str] | None,
        typer.Option(
            "--hostname",
            help="a name or address clients use for the node (repeat; "
            "localhost and 127.0.0.1 are always added)",
        ),
    ] = None,
    client: Annotated[
        list[str] | None,
        typer.Option("--client", help="also a client certificate with CN=NAME (repeat)"),
    ] = None,
    force: Annotated[bool, typer.Option(help="replace existing files")] = False,
    days: Annotated[
        int, typer.Option(min=1, max=3650, help="validity of the leaves")
    ] = DEFAULT_DAYS,
) -> None:
    """Make a private CA, a server certificate and optional client certificates (kept when
    they exist, unless --force)."""
    for name in client or []:
        if not name or "/" in name or name.startswith("."):
            typer.echo(f"--client {name!r}: a client name is a plain file-name part", err=True)
            raise typer.Exit(2)
    try:
        done = generate(directory, list(hostname or []), list(client or []), force=force, days=days)
    except (OSError, ValueError) as e:
        typer.echo(f"certs: {e}", err=True)
        raise typer.Exit(1) from e
    for p in done.written:
        typer.echo(f"wrote {p}")
    for p in done.kept:
        typer.echo(f"kept  {p} (exists; --force replaces it)")
    if any(p.name == "server.pem" for p in done.written):
        names = ", ".join(server_names(list(hostname or [])))
        typer.echo(f"server certificate for: {names}")
