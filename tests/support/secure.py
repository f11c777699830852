"""A node with every kind of listener, the certificates its clients need, and its users.

`SecureSetup` makes a CA, a server certificate for 127.0.0.1/localhost and client
certificates (trustme), writes them to files, creates SCRAM users through the real
`coordinator users set` command (password on stdin), and starts `coordinator serve` with
SASL_SSL, SSL, SASL_PLAINTEXT and PLAINTEXT listeners and the ACL authorizer.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import trustme

from tests.support.nodes import ROOT, CoordinatorProcess
from tests.support.ports import free_port

ADMIN = ("admin", "admin-secret")
PROTOCOLS = ("SASL_SSL", "SSL", "SASL_PLAINTEXT", "PLAINTEXT")


@dataclass
class Certificates:
    ca: trustme.CA
    dir: Path
    cafile: Path = field(init=False)
    certfile: Path = field(init=False)
    keyfile: Path = field(init=False)

    def __post_init__(self) -> None:
        self.cafile = self.dir / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.cafile))
        server = self.ca.issue_cert("127.0.0.1", "localhost")
        self.certfile = self.dir / "server.pem"
        self.keyfile = self.dir / "server-key.pem"
        server.cert_chain_pems[0].write_to_path(str(self.certfile))
        server.private_key_pem.write_to_path(str(self.keyfile))

    def client(self, name: str) -> tuple[Path, Path]:
        """(certificate, key) files of a client certificate whose subject is
        CN=name,OU=clients,O=coordinator (the principal Kafka's default mapping makes of it)."""
        cert = self.ca.issue_cert(
            f"{name}.clients.test",
            common_name=name,
            organization_name="coordinator",
            organization_unit_name="clients",
        )
        certfile = self.dir / f"client-{name}.pem"
        keyfile = self.dir / f"client-{name}-key.pem"
        cert.cert_chain_pems[0].write_to_path(str(certfile))
        cert.private_key_pem.write_to_path(str(keyfile))
        return certfile, keyfile


def make_certificates(directory: Path) -> Certificates:
    directory.mkdir(parents=True, exist_ok=True)
    return Certificates(trustme.CA(organization_name="coordinator tests"), directory)


def cli(db_url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The real `coordinator` command against the database."""
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=ROOT,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={"COORD_DATABASE_URL": db_url, "PATH": "/usr/bin:/bin"},
    )


def set_user(db_url: str, name: str, password: str, *mechanisms: str) -> None:
    flags = [f"--mechanism={m}" for m in mechanisms]
    done = cli(db_url, "users", "set", name, *flags, stdin=password + "\n")
    assert done.returncode == 0, done.stderr + done.stdout


def add_acl(db_url: str, *args: str) -> None:
    done = cli(db_url, "acls", "add", *args)
    assert done.returncode == 0, done.stderr + done.stdout


class SecureNode(CoordinatorProcess):
    """`coordinator serve` with one listener per security protocol (ports in `ports`)."""

    def __init__(
        self,
        db_url: str,
        workdir: Path,
        certs: Certificates,
        env_overrides: dict[str, str] | None = None,
        *,
        node_id: int | None = None,
    ) -> None:
        super().__init__(db_url, workdir, env_overrides, node_id=node_id)
        self.certs = certs
        self.ports = {p: free_port() for p in PROTOCOLS if p != "PLAINTEXT"}
        self.ports["PLAINTEXT"] = self.kafka_port
        listeners = ",".join(f"{p}://127.0.0.1:{port}" for p, port in self.ports.items())
        secure = {
            "COORD_LISTENERS": listeners,
            "COORD_SSL_CERTFILE": str(certs.certfile),
            "COORD_SSL_KEYFILE": str(certs.keyfile),
            "COORD_SSL_CAFILE": str(certs.cafile),
            "COORD_SSL_CLIENT_AUTH": "requested",
            "COORD_SASL_ENABLED_MECHANISMS": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "COORD_AUTHORIZER": "acl",
            "COORD_SUPER_USERS": f"User:{ADMIN[0]}",
        }
        secure.update(env_overrides or {})
        self.env_overrides = secure

    def bootstrap_of(self, protocol: str) -> str:
        return f"127.0.0.1:{self.ports[protocol]}"
