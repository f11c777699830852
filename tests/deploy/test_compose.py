"""No Docker engine runs here, so the deployment files are checked statically: services, ports
and setting names must match what the code reads, and the files must be secure by default (a
token from the environment, SASL_SSL with certificates made at first start, admin ports on
the host's loopback)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

from app.config import Settings, advertised_admin_url
from app.security.listeners import SecurityProtocol, listeners_of
from cli.main import AUDIT_MODULES
from cli.serve import admin_exposure_problem

ROOT = Path(__file__).resolve().parents[2]
# read by the image's entrypoint (Dockerfile), not by the node
ENTRYPOINT_VARIABLES = {"CERT_HOSTNAMES"}


def load() -> dict:  # type: ignore[type-arg]
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())  # type: ignore[no-any-return]


def settings_of(env: dict[str, str]) -> Settings:
    return Settings(
        **{
            k.removeprefix("COORD_").lower(): v
            for k, v in env.items()
            if k not in ENTRYPOINT_VARIABLES
        }
    )


def test_compose_runs_postgres_and_three_nodes_on_distinct_ports() -> None:
    services = load()["services"]
    assert set(services) == {"postgres", "node1", "node2", "node3"}
    host_ports = [p.rsplit(":", 1)[0] for s in services.values() for p in s.get("ports", [])]
    assert len(host_ports) == len(set(host_ports))
    ids = {services[n]["environment"]["COORD_NODE_ID"] for n in ("node1", "node2", "node3")}
    assert ids == {"1", "2", "3"}
    for name in ("node1", "node2", "node3"):
        env = services[name]["environment"]
        s = settings_of(env)
        sasl_ssl = next(li for li in listeners_of(s) if li.protocol is SecurityProtocol.SASL_SSL)
        assert (sasl_ssl.host, sasl_ssl.port) == ("0.0.0.0", 9093)
        assert sasl_ssl.advertised_host == "localhost"
        assert f"{sasl_ssl.advertised_port}:9093" in services[name]["ports"]
        # PLAINTEXT only on the container's loopback
        for li in listeners_of(s):
            if li.protocol is SecurityProtocol.PLAINTEXT:
                assert li.host == "127.0.0.1"
        # the admin API: published on the host's loopback, advertised by service name
        assert any(
            p.startswith("127.0.0.1:") and p.endswith(":8080") for p in services[name]["ports"]
        )
        assert advertised_admin_url(s) == f"http://{name}:8080"
        assert env["COORD_DATABASE_URL"].startswith("postgresql+asyncpg://")
        assert "@postgres:5432/" in env["COORD_DATABASE_URL"]


def test_every_compose_setting_is_one_the_node_reads_and_parses() -> None:
    known = {f"COORD_{name.upper()}" for name in Settings.model_fields} | ENTRYPOINT_VARIABLES
    for name in ("node1", "node2", "node3"):
        env = load()["services"][name]["environment"]
        assert set(env) <= known, set(env) - known
        settings_of(env)


def test_compose_is_secure_by_default() -> None:
    services = load()["services"]
    for name in ("node1", "node2", "node3"):
        env = services[name]["environment"]
        # the token comes from the operator's environment; compose refuses to start without
        assert env["COORD_ADMIN_TOKEN"].startswith("${COORD_ADMIN_TOKEN:?")
        assert "COORD_ADMIN_ALLOW_INSECURE" not in env
        s = settings_of(env)
        assert admin_exposure_problem(s) is None  # a token is set: the node starts
        assert admin_exposure_problem(s.model_copy(update={"admin_token": ""})) is not None
        assert s.authorizer == "acl" and s.super_users == "User:admin"
        # the certificates the entrypoint makes, on a volume every node shares
        assert s.ssl_certfile == "/data/certs/server.pem"
        assert s.ssl_keyfile == "/data/certs/server-key.pem"
        assert "certs:/data/certs" in services[name]["volumes"]
        assert set(env["CERT_HOSTNAMES"].split(",")) == {"node1", "node2", "node3"}
    assert "certs" in load()["volumes"]


def test_dockerfile_installs_the_package_and_serves_securely() -> None:
    text = (ROOT / "Dockerfile").read_text()
    for path in ("app", "storage", "api", "migrations", "cli", "pyproject.toml"):
        assert f"COPY {path}" in text
    assert 'ENTRYPOINT ["coordinator-entrypoint"]' in text and 'CMD ["serve"]' in text
    assert "'exec coordinator \"$@\"'" in text
    # first start: certificates where COORD_SSL_CERTFILE points, a token unless one is given
    assert "coordinator certs generate --dir" in text
    assert "COORD_SSL_CERTFILE=/data/certs/server.pem" in text
    assert "COORD_LISTENERS=SASL_SSL://0.0.0.0:9093,PLAINTEXT://127.0.0.1:9092" in text
    assert "/data/admin-token" in text and "umask 077" in text
    assert "ADMIN_TOKEN=" not in text.replace('COORD_ADMIN_TOKEN="$(cat', "")  # no baked token
    assert "COORD_ADMIN_ALLOW_INSECURE" not in text


def entrypoint_script() -> str:
    """The entrypoint the Dockerfile writes with printf, one quoted line each."""
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("RUN printf '%s\\n'"))
    out = []
    for line in lines[start + 1 :]:
        line = line.strip()
        if not line.startswith("'"):
            break
        out.append(line.removesuffix("\\").strip().removeprefix("'").removesuffix("'"))
    return "\n".join(out) + "\n"


def test_the_entrypoint_makes_certificates_and_a_token_once(tmp_path: Path) -> None:
    """Run the entrypoint with sh, `coordinator` being this checkout (serve only prints what
    it was given): the first start writes the certificates and a 0600 token, the second keeps
    them."""
    script = tmp_path / "entrypoint"
    script.write_text(entrypoint_script())
    script.chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "coordinator"
    shim.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = serve ]; then echo "serve token=$COORD_ADMIN_TOKEN"; exit 0; fi\n'
        f'cd {ROOT} && exec {sys.executable} -m cli.main "$@"\n'
    )
    shim.chmod(0o755)
    data = tmp_path / "data"
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "DATA_DIR": str(data),
        "HOSTNAME": "c0ffee",
        "CERT_HOSTNAMES": "node1,node2",
        "COORD_SSL_CERTFILE": str(data / "certs" / "server.pem"),
    }
    first = subprocess.run(
        ["sh", str(script), "serve"], env=env, capture_output=True, text=True, timeout=120
    )
    assert first.returncode == 0, first.stderr
    token = (data / "admin-token").read_text().strip()
    assert len(token) == 64 and first.stdout.strip().endswith(f"serve token={token}")
    assert stat.S_IMODE((data / "admin-token").stat().st_mode) == 0o600
    assert "server certificate for: c0ffee, node1, node2, localhost, 127.0.0.1" in first.stdout
    assert {p.name for p in (data / "certs").glob("*.pem")} == {
        "ca.pem",
        "ca-key.pem",
        "server.pem",
        "server-key.pem",
    }
    ca = (data / "certs" / "ca.pem").read_bytes()
    again = subprocess.run(
        ["sh", str(script), "serve"], env=env, capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == f"serve token={token}"  # nothing made again
    assert (data / "certs" / "ca.pem").read_bytes() == ca
    # a token given in the environment wins, and none is written
    given = subprocess.run(
        ["sh", str(script), "serve"],
        env={**env, "COORD_ADMIN_TOKEN": "from-env", "DATA_DIR": str(tmp_path / "d2")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert given.stdout.strip().endswith("serve token=from-env"), given.stderr
    assert not (tmp_path / "d2" / "admin-token").exists()
    # other commands pass straight through
    res = subprocess.run(
        ["sh", str(script), "certs", "--help"], env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0 and "generate" in res.stdout


def install_step() -> str:
    """The Dockerfile's RUN that installs the package, its continuation lines joined."""
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("RUN set -e;"))
    step = []
    for line in lines[start:]:
        step.append(line.removesuffix("\\"))
        if not line.endswith("\\"):
            break
    return "\n".join(step).removeprefix("RUN ")


def run_install_step(tmp_path: Path, extras: str | None) -> list[str]:
    """The install step under sh with pip, apt-get and rm as shims that log their arguments:
    what the image would install, for EXTRAS as `docker build --build-arg` sets it."""
    step = install_step()
    assert "/bin/" not in step  # every command resolves through PATH, to the shims
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    calls = tmp_path / "calls"
    calls.write_text("")
    for tool in ("pip", "apt-get", "rm"):
        shim = bin_dir / tool
        shim.write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\n')
        shim.chmod(0o755)
    # ARG EXTRAS= : an empty default, as the build gives it without --build-arg
    assert re.search(r"^ARG EXTRAS=$", (ROOT / "Dockerfile").read_text(), re.M)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "EXTRAS": extras or ""}
    r = subprocess.run(["sh", "-c", step], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return calls.read_text().splitlines()


def test_the_image_carries_the_node_only_unless_built_with_the_audit(tmp_path: Path) -> None:
    assert run_install_step(tmp_path, None) == ["pip install --no-cache-dir ."]
    audit = run_install_step(tmp_path, "audit")
    assert audit[-1] == "pip install --no-cache-dir .[audit]"
    assert "apt-get install -y --no-install-recommends default-jre-headless" in audit
    both = run_install_step(tmp_path, "audit,test")
    assert both[-1] == "pip install --no-cache-dir .[audit,test]"
    # the extras it names are pyproject.toml's, and the audit's are the packages the node lacks
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert {re.split(r"[<>=\[]", d)[0] for d in extras["audit"]} == set(AUDIT_MODULES)
    node = {re.split(r"[<>=\[]", d)[0] for d in project["dependencies"]}
    assert not node & set(AUDIT_MODULES)
    assert "coordinator[audit]" in extras["test"]  # make install: the suite runs the audit
    text = (ROOT / "Dockerfile").read_text()
    assert "COPY pipeline ./pipeline" in text  # what `coordinator audit` runs, with the extra
