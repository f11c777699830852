"""franz-go's own pkg/kgo integration tests through a gateway node in front of Apache Kafka's
broker: they create topics, produce, consume in groups (TestGroupETL chains eager,
cooperative and static groups and fails on any record lost, doubled or out of order) and
commit, all with the gateway as the only address they know.

They ship in the franz-go module pinned by tests/go/go.mod and run with `go test -count=1
-json -run '^(...)$' github.com/twmb/franz-go/pkg/kgo` from tests/go, configured by their
KGO_* variables (pkg/kgo/helpers_test.go): KGO_SEEDS at the gateway, KGO_TEST_RF=1 (one
upstream broker), KGO_TEST_RECORDS, and KGO_TEST_SCRAM(_SEEDS) at a second gateway whose
listener is SASL_PLAINTEXT with a SCRAM user of ours. tests/go/kgo_tests.txt lists every
test with what it must do (pass, or skip itself) or why it is left out; a fixed fast subset
runs in make test, the whole list in make verify. KGO_LOG_LEVEL=none keeps the output small:
rerun a failure by hand with KGO_LOG_LEVEL=info (or debug) to see the client's side.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.gateway.conftest import gateway_process
from tests.support.go import GO_DIR, go_binary, go_env, run_go
from tests.support.kafka_broker import KafkaBroker
from tests.support.nodes import CoordinatorProcess
from tests.support.secure import set_user

PACKAGE = "github.com/twmb/franz-go/pkg/kgo"
ALLOWLIST = GO_DIR / "kgo_tests.txt"
STATUSES = {"fast": "pass", "pass": "pass", "unit": "pass", "skip": "skip", "out": None}
SCRAM_USER, SCRAM_PASSWORD = "kgo", "kgo-scram-secret"


@dataclass(frozen=True)
class Entry:
    name: str
    status: str  # a key of STATUSES
    why: str


def allowlist() -> list[Entry]:
    entries = []
    for n, line in enumerate(ALLOWLIST.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        name, status, *why = line.split(maxsplit=2)
        assert status in STATUSES, f"{ALLOWLIST.name}:{n}: unknown status {status!r}"
        assert why or status not in ("skip", "out"), f"{ALLOWLIST.name}:{n}: {status} needs a why"
        entries.append(Entry(name, status, why[0] if why else ""))
    names = [e.name for e in entries]
    assert len(names) == len(set(names)), f"{ALLOWLIST.name} names a test twice"
    return entries


def run_kgo(
    names: list[str], env: dict[str, str], go_timeout_s: int
) -> tuple[dict[str, str], dict[str, list[str]], str]:
    """`go test` of `names`: each top-level test's outcome (pass, fail, skip), its output
    (its subtests' too), and the output of the package (a build failure, a panic)."""
    cmd = [
        go_binary(), "test", "-count=1", "-json", f"-timeout={go_timeout_s}s",
        "-run", f"^({'|'.join(names)})$", PACKAGE,
    ]  # fmt: skip
    try:
        done = subprocess.run(
            cmd,
            cwd=GO_DIR,
            env={**go_env(), **env},
            capture_output=True,
            text=True,
            timeout=go_timeout_s + 300,  # the build, then go test's own deadline
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{' '.join(cmd)} did not end:\n{str(e.stdout)[-20000:]}", pytrace=False)
    outcomes: dict[str, str] = {}
    output: dict[str, list[str]] = {}
    package: list[str] = []
    for line in done.stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            package.append(line)
            continue
        test = event.get("Test")
        if test is None:
            if event.get("Action") == "output":
                package.append(event["Output"].rstrip("\n"))
            continue
        top = test.split("/", 1)[0]
        if event["Action"] == "output":
            output.setdefault(top, []).append(event["Output"].rstrip("\n"))
        elif event["Action"] in ("pass", "fail", "skip") and "/" not in test:
            outcomes[test] = event["Action"]
    return outcomes, output, "\n".join(package) + "\n" + done.stderr


def check(entries: list[Entry], env: dict[str, str], go_timeout_s: int) -> None:
    run = [e for e in entries if STATUSES[e.status] is not None]
    started = time.monotonic()
    outcomes, output, package = run_kgo([e.name for e in run], env, go_timeout_s)
    took = time.monotonic() - started
    wrong = []
    for e in run:
        got = outcomes.get(e.name, "no result")
        if got != STATUSES[e.status]:
            tail = "\n".join(output.get(e.name, [])[-60:])
            wrong.append(f"{e.name}: {got}, the list says {e.status}\n{tail}")
    counts = {a: sum(1 for v in outcomes.values() if v == a) for a in ("pass", "skip", "fail")}
    print(f"kgo: {counts} of {len(run)} tests in {took:.0f} s")
    assert not wrong, "\n\n".join(wrong) + f"\n--- the package's output\n{package[-8000:]}"


@pytest.fixture
def kgo_env(
    gateway_factory: Callable[..., CoordinatorProcess],
    apache_kafka_broker: KafkaBroker,
    tmp_path: Path,
) -> Iterator[dict[str, str]]:
    """The KGO_* variables for a gateway node, and a second one with a SCRAM user."""
    node = gateway_factory()
    scram = gateway_process(
        tmp_path / "gw-scram", apache_kafka_broker, COORD_SASL_ENABLED_MECHANISMS="SCRAM-SHA-256"
    )
    scram.env_overrides["COORD_LISTENERS"] = f"SASL_PLAINTEXT://{scram.bootstrap}"
    scram.start()
    try:
        set_user(scram.db_url, SCRAM_USER, SCRAM_PASSWORD, "SCRAM-SHA-256")
        yield {
            "KGO_SEEDS": node.bootstrap,
            "KGO_TEST_RF": "1",
            "KGO_TEST_SCRAM": f"{SCRAM_USER}:{SCRAM_PASSWORD}:256",
            "KGO_TEST_SCRAM_SEEDS": scram.bootstrap,
            "KGO_LOG_LEVEL": "none",
        }
    finally:
        scram.kill()


def test_the_allowlist_names_every_test_of_the_pinned_franz_go() -> None:
    listed = {
        name
        for name in run_go("test", "-list", "^Test", PACKAGE, timeout=600).split()
        if name.startswith("Test")
    }
    named = {e.name for e in allowlist()}
    assert listed - named == set(), f"tests missing from {ALLOWLIST.name}"
    assert named - listed == set(), f"tests {ALLOWLIST.name} names that the module lacks"


@pytest.mark.timeout(1200)
def test_kgo_fast_subset_through_the_gateway(kgo_env: dict[str, str]) -> None:
    fast = [e for e in allowlist() if e.status == "fast"]
    assert any(e.name == "TestGroupETL" for e in fast)
    check(fast, {**kgo_env, "KGO_TEST_RECORDS": "10000"}, go_timeout_s=600)


@pytest.mark.verify
@pytest.mark.timeout(3000)
def test_kgo_allowlist_through_the_gateway(kgo_env: dict[str, str]) -> None:
    # franz-go's own default (helpers_test.go): 500,000 records through each ETL chain
    check(allowlist(), {**kgo_env, "KGO_TEST_RECORDS": "500000"}, go_timeout_s=2400)
