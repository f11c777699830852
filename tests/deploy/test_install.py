"""A node's install, as an operator makes it: `pip install .` into a fresh venv (no system
site-packages, dependencies from the package index) holds no PySpark, pandas or matplotlib, and
`coordinator serve` from it serves a group; `coordinator audit` there names the extra it needs.

The install downloads and builds: a few minutes, most of it waiting on the index."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from membership import WorkDistributor
from tests.support.nodes import die_with_parent
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
AUDIT_ONLY = ("pyspark", "pandas", "matplotlib")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]


def project_sources(dest: Path) -> None:
    """What `pip install .` reads: pyproject.toml, the README and the packages it lists."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, dest / name)
    for pattern in project["tool"]["setuptools"]["packages"]["find"]["include"]:
        package = pattern.removesuffix("*")
        shutil.copytree(
            ROOT / package, dest / package, ignore=shutil.ignore_patterns("__pycache__")
        )


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without its venv, path or COORD_* settings."""
    drop = {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("COORD_")}
    return {**env, **extra}


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("install")
    project_sources(work / "src")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    config = (venv / "pyvenv.cfg").read_text()
    assert "include-system-site-packages = false" in config
    r = subprocess.run(
        [str(venv / "bin/python"), "-m", "pip", "install", "-q", str(work / "src")],
        cwd=work, env=clean_env(), capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-4000:]
    return venv


def test_the_node_install_holds_none_of_the_audit_packages(venv: Path) -> None:
    probe = (
        "import importlib.util, sys\n"
        f"for name in {AUDIT_ONLY!r} + ('kio', 'fastapi', 'pyarrow', 'app', 'membership'):\n"
        "    print(name, importlib.util.find_spec(name) is not None)\n"
        "import app; print('from', app.__file__)"
    )
    r = subprocess.run(
        [str(venv / "bin/python"), "-c", probe],
        cwd=venv.parent, env=clean_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    *found, origin = r.stdout.splitlines()
    assert dict(line.split() for line in found) == {
        **dict.fromkeys(AUDIT_ONLY, "False"),
        **dict.fromkeys(("kio", "fastapi", "pyarrow", "app", "membership"), "True"),
    }
    assert origin.startswith(f"from {venv}/lib/")  # the installed package, not this checkout


@pytest.fixture(scope="module")
def node(venv: Path) -> Iterator[tuple[str, str]]:
    kafka, admin = free_port(), free_port()
    env = clean_env(
        COORD_DATABASE_URL=f"sqlite+aiosqlite:///{venv.parent}/node.db",
        COORD_KAFKA_LISTEN=f"127.0.0.1:{kafka}",
        COORD_ADMIN_LISTEN=f"127.0.0.1:{admin}",
        COORD_INITIAL_REBALANCE_DELAY_MS="300",
        PYTHONUNBUFFERED="1",
    )
    log = venv.parent / "node.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(venv / "bin/coordinator"), "serve"],
            cwd=venv.parent, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=die_with_parent,
        )  # fmt: skip
    admin_url = f"http://127.0.0.1:{admin}"
    try:
        wait_ready(proc, admin_url, log)
        yield f"127.0.0.1:{kafka}", admin_url
    finally:
        proc.kill()
        proc.wait(10)


def wait_ready(proc: subprocess.Popen[bytes], admin_url: str, log: Path) -> None:
    for _ in range(1200):
        if proc.poll() is not None:
            pytest.fail(f"coordinator serve exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(admin_url + "/readyz", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:  # refused, or 503 while loading
            pass
        time.sleep(0.1)
    pytest.fail(f"coordinator serve not ready after 120 s:\n{log.read_text()}")


async def test_a_node_installed_without_the_audit_serves_a_group(node: tuple[str, str]) -> None:
    bootstrap, admin_url = node
    with urllib.request.urlopen(admin_url + "/healthz", timeout=5) as r:
        assert r.status == 200
    # package data, read beside its module: the console's assets
    with urllib.request.urlopen(admin_url + "/ui/static/console.css", timeout=5) as r:
        assert r.status == 200 and r.read()
    async with WorkDistributor(bootstrap, "installed", ["a", "b", "c"]) as work:
        await work.member.wait_assigned(30)
        assert work.items == {"a", "b", "c"}


def test_audit_without_the_extra_names_it(venv: Path, tmp_path: Path) -> None:
    r = subprocess.run(
        [str(venv / "bin/coordinator"), "audit", "--input", str(tmp_path), "--out",
         str(tmp_path / "out")],
        cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "pip install 'coordinator[audit]'" in r.stderr
    assert "pyspark, pandas, matplotlib not installed" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()
