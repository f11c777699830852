"""No Docker engine runs here, so the deployment files are checked statically: services, ports
and setting names must match what the code reads."""

from __future__ import annotations

from pathlib import Path

import yaml

from app.config import Settings

ROOT = Path(__file__).resolve().parents[2]


def load() -> dict:  # type: ignore[type-arg]
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())  # type: ignore[no-any-return]


def test_compose_runs_postgres_and_three_nodes_on_distinct_ports() -> None:
    services = load()["services"]
    assert set(services) == {"postgres", "node1", "node2", "node3"}
    host_ports = [p.split(":")[0] for s in services.values() for p in s.get("ports", [])]
    assert len(host_ports) == len(set(host_ports))
    ids = {services[n]["environment"]["COORD_NODE_ID"] for n in ("node1", "node2", "node3")}
    assert ids == {"1", "2", "3"}
    for name in ("node1", "node2", "node3"):
        env = services[name]["environment"]
        advertised_port = env["COORD_ADVERTISED_LISTENER"].rsplit(":", 1)[1]
        assert f"{advertised_port}:9092" in services[name]["ports"]
        assert env["COORD_DATABASE_URL"].startswith("postgresql+asyncpg://")
        assert "@postgres:5432/" in env["COORD_DATABASE_URL"]


def test_every_compose_setting_is_one_the_node_reads_and_parses() -> None:
    known = {f"COORD_{name.upper()}" for name in Settings.model_fields}
    for name in ("node1", "node2", "node3"):
        env = load()["services"][name]["environment"]
        assert set(env) <= known, set(env) - known
        settings = Settings(**{k.removeprefix("COORD_").lower(): v for k, v in env.items()})
        assert settings.kafka_address == ("0.0.0.0", 9092)


def test_dockerfile_installs_the_package_and_serves() -> None:
    text = (ROOT / "Dockerfile").read_text()
    for path in ("app", "storage", "api", "migrations", "cli", "pyproject.toml"):
        assert f"COPY {path}" in text
    assert 'ENTRYPOINT ["coordinator"]' in text and 'CMD ["serve"]' in text
