"""`coordinator certs generate`: a CA, a server certificate for the given names plus
localhost and 127.0.0.1, client certificates; private keys 0600; idempotent unless --force."""

from __future__ import annotations

import socket
import ssl
import stat
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store

from cli.certs import generate

ROOT = Path(__file__).resolve().parents[2]


def certs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "certs", "generate", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def handshake(d: Path, server_name: str, client: str | None = None) -> str | None:
    """One TLS handshake over loopback: the server presents server.pem (and requires a
    client certificate when `client` is given), the client trusts ca.pem only and checks the
    name. Answers the client certificate's subject CN as the server saw it."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(d / "server.pem", d / "server-key.pem")
    client_ctx = ssl.create_default_context(cafile=str(d / "ca.pem"))
    if client:
        server_ctx.verify_mode = ssl.CERT_REQUIRED
        server_ctx.load_verify_locations(d / "ca.pem")
        client_ctx.load_cert_chain(d / f"client-{client}.pem", d / f"client-{client}-key.pem")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    seen: list[str | None] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with server_ctx.wrap_socket(conn, server_side=True) as tls:
            peer = tls.getpeercert()
            cn = None
            for rdn in (peer or {}).get("subject", ()):
                for k, v in rdn:
                    if k == "commonName":
                        cn = v
            seen.append(cn)
            tls.recv(1)

    t = threading.Thread(target=serve)
    t.start()
    try:
        with (
            socket.create_connection(("127.0.0.1", port)) as raw,
            client_ctx.wrap_socket(raw, server_hostname=server_name) as tls,
        ):
            tls.sendall(b"x")
    finally:
        t.join(10)
        listener.close()
    return seen[0] if seen else None


def test_generate_writes_a_ca_a_server_and_client_certificates(tmp_path: Path) -> None:
    d = tmp_path / "certs"
    res = certs(
        "--dir", str(d), "--hostname", "node1", "--hostname", "10.1.2.3", "--client", "alice"
    )
    assert res.returncode == 0, res.stderr
    names = {p.name for p in d.iterdir() if not p.name.startswith(".")}
    assert names == {
        "ca.pem",
        "ca-key.pem",
        "server.pem",
        "server-key.pem",
        "client-alice.pem",
        "client-alice-key.pem",
    }
    for key in ("ca-key.pem", "server-key.pem", "client-alice-key.pem"):
        assert stat.S_IMODE((d / key).stat().st_mode) == 0o600, key
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert "BEGIN" not in res.stdout  # no key material printed
    # the chains load as ssl does it
    for stem in ("server", "client-alice"):
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(
            d / f"{stem}.pem", d / f"{stem}-key.pem"
        )
    # the server certificate verifies against the CA for each of its names
    ca = x509.load_pem_x509_certificate((d / "ca.pem").read_bytes())
    leaf = x509.load_pem_x509_certificate((d / "server.pem").read_bytes())
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.DNSName)) == {"node1", "localhost"}
    assert {str(a) for a in san.get_values_for_type(x509.IPAddress)} == {"10.1.2.3", "127.0.0.1"}
    verifier = PolicyBuilder().store(Store([ca])).build_server_verifier(x509.DNSName("node1"))
    chain = verifier.verify(leaf, [])
    assert chain[-1] == ca
    # and real handshakes: by name, by address, and with the client certificate (mutual TLS)
    assert handshake(d, "localhost") is None
    assert handshake(d, "127.0.0.1") is None
    assert handshake(d, "localhost", client="alice") == "alice"


def test_generate_is_idempotent_and_force_replaces(tmp_path: Path) -> None:
    d = tmp_path / "c"
    assert certs("--dir", str(d)).returncode == 0
    before = {p.name: p.read_bytes() for p in d.glob("*.pem")}
    again = certs("--dir", str(d), "--client", "bob")
    assert again.returncode == 0, again.stderr
    assert "kept" in again.stdout and "client-bob.pem" in again.stdout
    after = {p.name: p.read_bytes() for p in d.glob("*.pem")}
    assert {k: after[k] for k in before} == before  # nothing replaced, bob added
    assert handshake(d, "localhost", client="bob") == "bob"
    forced = certs("--dir", str(d), "--force")
    assert forced.returncode == 0, forced.stderr
    assert (d / "ca.pem").read_bytes() != before["ca.pem"]
    assert (d / "server.pem").read_bytes() != before["server.pem"]
    # a kept client certificate the new CA did not sign is refused, not silently kept
    (d / "ca.pem").unlink()
    res = certs("--dir", str(d))
    assert res.returncode == 1 and "--force" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_concurrent_generators_agree(tmp_path: Path) -> None:
    """Three containers on one shared volume: one CA, one server certificate."""
    d = tmp_path / "shared"
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda _: generate(d, ["node1"], []), range(3)))
    assert sum(len(r.written) for r in results) == 4  # ca, ca-key, server, server-key once
    assert handshake(d, "node1") is None


def test_bad_client_name(tmp_path: Path) -> None:
    res = certs("--dir", str(tmp_path / "x"), "--client", "../evil")
    assert res.returncode == 2 and "client name" in res.stderr
