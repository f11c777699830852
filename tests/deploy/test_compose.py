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

from app.config import Settings, advertised_admin_url, upstream_addresses
from app.gateway.addresses import BrokerPorts
from app.security.listeners import SecurityProtocol, listeners_of
from cli.main import AUDIT_MODULES
from cli.serve import admin_exposure_problem
from tests.support.kafka_broker import KAFKA_VERSION

ROOT = Path(__file__).resolve().parents[2]
# read by the image's entrypoint (Dockerfile), not by the node
ENTRYPOINT_VARIABLES = {"CERT_HOSTNAMES"}
NODES = ("node1", "node2", "node3")


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


def published(service: dict) -> dict[int, tuple[str, int]]:  # type: ignore[type-arg]
    """Container port -> (host address, host port) of a service's `ports`, ranges
    ("19093-19094:9093-9094") expanded; the host address is "" when it is not given."""
    out: dict[int, tuple[str, int]] = {}
    for spec in service.get("ports", []):
        *host_part, container = spec.split(":")
        address = host_part[0] if len(host_part) == 2 else ""
        hosts, containers = _span(host_part[-1]), _span(container)
        assert len(hosts) == len(containers), spec
        for c, h in zip(containers, hosts, strict=True):
            assert c not in out, f"container port {c} published twice"
            out[c] = (address, h)
    return out


def _span(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def test_compose_runs_postgres_kafka_and_three_nodes_on_distinct_ports() -> None:
    services = load()["services"]
    assert set(services) == {"postgres", "kafka", "kafka-topics", *NODES}
    host_ports = [
        (address or "0.0.0.0", port)
        for s in services.values()
        for address, port in published(s).values()
    ]
    assert len(host_ports) == len(set(host_ports))
    assert len({port for _, port in host_ports}) == len(host_ports)
    ids = {services[n]["environment"]["COORD_NODE_ID"] for n in NODES}
    assert ids == {"1", "2", "3"}
    for name in NODES:
        env = services[name]["environment"]
        s = settings_of(env)
        sasl_ssl = next(li for li in listeners_of(s) if li.protocol is SecurityProtocol.SASL_SSL)
        assert (sasl_ssl.host, sasl_ssl.port) == ("0.0.0.0", 9093)
        assert sasl_ssl.advertised_host == "localhost"
        assert published(services[name])[9093] == ("", sasl_ssl.advertised_port)
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
    for name, service in load()["services"].items():
        env = service.get("environment", {})
        coord = {k for k in env if k.startswith("COORD_")}
        assert coord <= known, (name, coord - known)
        if name in NODES:
            assert set(env) <= known, set(env) - known
            settings_of(env)
        else:
            assert not coord, f"{name} sets the node's settings {coord}"


def test_compose_is_secure_by_default() -> None:
    services = load()["services"]
    for name in NODES:
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


def kafka_env() -> dict[str, str]:
    return {k: str(v) for k, v in load()["services"]["kafka"]["environment"].items()}


def test_compose_runs_apache_kafka_as_one_kraft_node_reached_only_through_the_gateways() -> None:
    services = load()["services"]
    kafka = services["kafka"]
    # the official image, at the version the gateway's tests and benchmark run against
    assert kafka["image"] == f"apache/kafka:{KAFKA_VERSION}"
    assert services["kafka-topics"]["image"] == kafka["image"]
    env = kafka_env()
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft, one node, no ZooKeeper
    assert not any(k.startswith("KAFKA_ZOOKEEPER") for k in env)
    listeners = dict(
        (li.split("://")[0], int(li.rsplit(":", 1)[1])) for li in env["KAFKA_LISTENERS"].split(",")
    )
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] == "CONTROLLER"
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == (
        f"{env['KAFKA_NODE_ID']}@kafka:{listeners['CONTROLLER']}"
    )
    protocols = dict(p.split(":") for p in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert set(protocols) == set(listeners)
    # one broker: every internal topic with one replica, or Kafka never creates them
    for key in (
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
    ):
        assert env[key] == "1", key
    # the data on a volume; no port on the host: clients go through the gateways
    assert kafka["volumes"] == [f"kafkadata:{env['KAFKA_LOG_DIRS']}"]
    assert "kafkadata" in load()["volumes"]
    assert "ports" not in kafka and "ports" not in services["kafka-topics"]
    assert "localhost:9092" in " ".join(kafka["healthcheck"]["test"])
    # the topics the clients use exist on Kafka (gateway mode does not read COORD_TOPICS)
    create = " ".join(services["kafka-topics"]["command"])
    assert create.count("--create --if-not-exists") == 2
    assert "--topic orders --partitions 6" in create and "--topic payments --partitions 3" in create
    assert "--bootstrap-server kafka:9092" in create
    assert "$" not in create  # nothing for compose to interpolate
    assert services["kafka-topics"]["depends_on"]["kafka"]["condition"] == "service_healthy"


def test_the_three_nodes_are_gateways_in_front_of_kafka_with_their_broker_ports_published() -> None:
    services = load()["services"]
    env = kafka_env()
    advertised = env["KAFKA_ADVERTISED_LISTENERS"].split(",")
    plaintext = next(a.split("://")[1] for a in advertised if a.startswith("PLAINTEXT://"))
    broker_id = int(env["KAFKA_NODE_ID"])
    for name in NODES:
        service = services[name]
        s = settings_of(service["environment"])
        assert s.gateway and "COORD_TOPICS" not in service["environment"]
        # the upstream is Kafka's advertised PLAINTEXT address, inside the compose network
        assert upstream_addresses(s.upstream_bootstrap) == (("kafka", 9092),)
        assert s.upstream_bootstrap == plaintext
        assert s.upstream_security_protocol == "PLAINTEXT"
        assert service["depends_on"]["kafka"]["condition"] == "service_healthy"
        assert service["depends_on"]["kafka-topics"]["condition"] == (
            "service_completed_successfully"
        )
        ports = BrokerPorts(
            s.gateway_broker_id_base, s.gateway_broker_ports, s.gateway_coordinator_id_base
        )
        assert ports.placeable(broker_id)  # Kafka's broker has a port on every gateway
        listeners = listeners_of(s)
        ports.check(listeners)  # the node's own start check: no listener's block overlaps another
        pub = published(service)
        for li in listeners:
            block = [
                li.port + ports.offset(b) for b in range(ports.id_base, ports.id_base + ports.count)
            ]
            if li.protocol is SecurityProtocol.PLAINTEXT:
                assert li.host == "127.0.0.1"  # the container's loopback: never published
                assert not {li.port, *block} & set(pub)
                continue
            # the bootstrap port and every broker port, published where they are advertised:
            # the Metadata a gateway hands out sends host clients to advertised + 1 + offset
            for b in range(ports.id_base, ports.id_base + ports.count):
                bound, adv = ports.bound_port(li, b), li.advertised_port + ports.offset(b)
                assert pub[bound] == ("", adv), (name, b, bound, pub.get(bound))
            assert pub[li.port] == ("", li.advertised_port)
            assert li.advertised_host == "localhost"  # works from the host, as the certificate says


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
