"""The real `coordinator users|acls` console commands (subprocesses) against a fresh SQLite
database and no node: the password only ever on stdin or a hidden prompt, never printed;
bad values are refused with exit code 2; ACLs round-trip; each change is an audit line."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.security.sasl import ScramCredential, verify_password
from storage.log import EventLog

ROOT = Path(__file__).resolve().parents[2]
COORDINATOR = (sys.executable, "-m", "cli.main")
PASSWORD = "Pässw0rd with spaces "  # the trailing space is part of it


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def env_for(db: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COORD_")}
    env.update(COLUMNS="200", NO_COLOR="1", TERM="dumb", COORD_DATABASE_URL=db)
    return env


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A database that does not exist yet: the commands migrate it themselves."""
    return f"sqlite:///{tmp_path / 'data' / 'coordinator.db'}"


def run(db: str, *args: str, stdin: str = "") -> Run:
    p = subprocess.run(
        [*COORDINATOR, *args],
        cwd=ROOT,
        env=env_for(db),
        input=stdin.encode(),
        capture_output=True,
        timeout=120,
    )
    return Run(p.returncode, p.stdout.decode(), p.stderr.decode())


def ok(r: Run) -> Run:
    assert r.code == 0, f"exit {r.code}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert "Traceback" not in r.stderr, r.stderr
    return r


def failed(r: Run, code: int, *needles: str) -> Run:
    assert r.code == code, f"exit {r.code}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    assert "Traceback" not in r.stderr, r.stderr
    for n in needles:
        assert n in r.stderr, (n, r.stderr)
    return r


def table_rows(text: str) -> list[list[str]]:
    """The body rows of a rich table (│-separated)."""
    return [
        [c.strip() for c in line.strip().strip("│").split("│")]
        for line in text.splitlines()
        if line.strip().startswith("│")
    ]


def audit_lines(text: str) -> list[dict[str, object]]:
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def stored_credentials(db: str) -> dict[tuple[str, str], ScramCredential]:
    async def load() -> dict[tuple[str, str], ScramCredential]:
        log = await EventLog.open(db)
        try:
            return {(c.user, c.mechanism): c for c in await log.scram_credentials()}
        finally:
            await log.close()

    return asyncio.run(load())


def test_users_set_list_delete_and_the_password_is_never_shown(db: str) -> None:
    runs = [ok(run(db, "users", "set", "alice", stdin=PASSWORD + "\n"))]
    assert "SCRAM-SHA-256 and SCRAM-SHA-512" in runs[0].stdout
    audits = audit_lines(runs[0].stderr)
    assert [(a["action"], a["principal"], a["source"], a["resource"]) for a in audits] == [
        ("AlterUserScramCredentials", "cli", "local", "USER:alice")
    ] * 2
    assert {a["mechanism"] for a in audits} == {"SCRAM-SHA-256", "SCRAM-SHA-512"}

    # what was stored verifies the password read from stdin, newline stripped, space kept
    creds = stored_credentials(db)
    assert sorted(creds) == [("alice", "SCRAM-SHA-256"), ("alice", "SCRAM-SHA-512")]
    for c in creds.values():
        assert verify_password(c, PASSWORD)
        assert not verify_password(c, PASSWORD.strip())

    runs.append(
        ok(
            run(
                db,
                *("users", "set", "bob", "--mechanism", "SCRAM-SHA-512", "--iterations", "8192"),
                stdin="bob-secret",  # no newline at all: fine too
            )
        )
    )
    listed = ok(run(db, "users", "list"))
    runs.append(listed)
    assert table_rows(listed.stdout) == [
        ["alice", "SCRAM-SHA-256", "4096"],
        ["alice", "SCRAM-SHA-512", "4096"],
        ["bob", "SCRAM-SHA-512", "8192"],
    ]
    as_json = ok(run(db, "users", "list", "--json"))
    runs.append(as_json)
    assert json.loads(as_json.stdout) == [
        {"user": "alice", "mechanism": "SCRAM-SHA-256", "iterations": 4096},
        {"user": "alice", "mechanism": "SCRAM-SHA-512", "iterations": 4096},
        {"user": "bob", "mechanism": "SCRAM-SHA-512", "iterations": 8192},
    ]

    # a second set replaces the credential (a new salt, the new iterations)
    before = stored_credentials(db)[("alice", "SCRAM-SHA-256")]
    runs.append(
        ok(
            run(
                db,
                "users",
                "set",
                "alice",
                "-m",
                "scram-sha-256",
                "--iterations",
                "5000",
                stdin="new password\n",
            )
        )
    )
    after = stored_credentials(db)[("alice", "SCRAM-SHA-256")]
    assert after != before and after.iterations == 5000
    assert verify_password(after, "new password")

    deleted = ok(run(db, "users", "delete", "alice", "--mechanism", "SCRAM-SHA-256"))
    runs.append(deleted)
    assert "deleted 1 credential" in deleted.stdout
    assert audit_lines(deleted.stderr)[0]["resource"] == "USER:alice"
    runs.append(failed(run(db, "users", "delete", "nobody"), 1, "nobody"))
    runs.append(ok(run(db, "users", "delete", "bob")))
    listed = ok(run(db, "users", "list", "--json"))
    assert json.loads(listed.stdout) == [
        {"user": "alice", "mechanism": "SCRAM-SHA-512", "iterations": 4096}
    ]

    for r in runs:
        for secret in (PASSWORD.strip(), "bob-secret", "new password"):
            assert secret not in r.output, (secret, r.output)
        for c in creds.values():  # nor a salt or key, in any spelling
            assert c.salt.hex() not in r.output
            assert c.stored_key.hex() not in r.output


def test_bad_iterations_mechanisms_and_passwords_exit_2_and_store_nothing(db: str) -> None:
    failed(
        run(db, "users", "set", "carol", "--iterations", "100", stdin="pw\n"), 2, "4096", "16384"
    )
    failed(run(db, "users", "set", "carol", "--iterations", "16385", stdin="pw\n"), 2, "16384")
    failed(run(db, "users", "set", "carol", "--mechanism", "PLAIN", stdin="pw\n"), 2, "SCRAM-SHA")
    failed(run(db, "users", "set", "carol", stdin="\n"), 2, "empty")
    failed(run(db, "users", "set", "carol", stdin=""), 2, "empty")
    assert json.loads(ok(run(db, "users", "list", "--json")).stdout) == []
    # the bounds themselves are accepted
    ok(run(db, "users", "set", "carol", "-m", "SCRAM-SHA-256", "--iterations", "16384", stdin="x"))


def test_the_password_is_no_option_of_the_command(db: str) -> None:
    """So it can never be in a process's command line (/proc/<pid>/cmdline, `ps`)."""
    help_text = ok(run(db, "users", "set", "--help")).stdout
    assert "--mechanism" in help_text and "--iterations" in help_text
    options = [w for w in help_text.replace("│", " ").split() if w.startswith("-")]
    assert not [o for o in options if "pass" in o.lower()], options
    failed(run(db, "users", "set", "carol", "--password", "x"), 2)


def test_a_terminal_gets_a_hidden_prompt_asked_twice(db: str) -> None:
    argv, env = [*COORDINATOR, "users", "set", "dave"], env_for(db)
    pid, fd = pty.fork()
    if pid == 0:  # the child: the pty is its controlling terminal
        try:
            os.chdir(ROOT)
            os.execve(sys.executable, argv, env)
        finally:
            os._exit(127)
    seen = b""

    def read_until(needle: bytes, timeout: float = 60) -> None:
        nonlocal seen
        deadline = time.monotonic() + timeout
        while needle not in seen:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"no {needle!r} in {seen!r}"
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the child is gone
                chunk = b""
            assert chunk, f"no {needle!r} in {seen!r}"
            seen += chunk

    status = None
    try:
        # click prints "Password:", then getpass turns echo off (discarding what was typed
        # before) and prints the " ": type only after it
        read_until(b"Password: ")
        os.write(fd, b"typed-secret\n")
        read_until(b"confirmation: ")
        os.write(fd, b"typed-secret\n")
        read_until(b"credentials of user")
        _, status = os.waitpid(pid, 0)
    finally:
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, seen
    assert b"typed-secret" not in seen  # never echoed
    creds = stored_credentials(db)
    assert sorted(creds) == [("dave", "SCRAM-SHA-256"), ("dave", "SCRAM-SHA-512")]
    assert all(verify_password(c, "typed-secret") for c in creds.values())


def test_acls_add_list_remove_round_trip(db: str) -> None:
    add = ("acls", "add", "--principal", "User:alice", "--operation", "READ")
    team = (*add, "--resource-type", "GROUP", "--resource-name", "team-", "--pattern", "PREFIXED")
    added = ok(run(db, *team))
    assert table_rows(added.stdout) == [
        ["User:alice", "*", "READ", "ALLOW", "GROUP", "team-", "PREFIXED"]
    ]
    (line,) = audit_lines(added.stderr)
    assert line["action"] == "CreateAcls" and line["resource"] == "GROUP:PREFIXED:team-"
    assert line["principal"] == "cli" and line["source"] == "local"
    ok(run(db, *team))  # again: no error, no duplicate
    ok(
        run(
            db,
            *("acls", "add", "--principal", "User:[bold]mallory", "--operation", "describe"),
            *("--resource-type", "topic", "--resource-name", "[red]orders", "--deny"),
            *("--host", "10.0.0.9"),
        )
    )
    ok(
        run(
            db,
            "acls",
            "add",
            "--principal",
            "User:ops",
            "--operation",
            "DESCRIBE",
            "--resource-type",
            "CLUSTER",
        )
    )

    listed = ok(run(db, "acls", "list"))
    # markup in stored names is printed as it is, not interpreted
    assert sorted(table_rows(listed.stdout)) == sorted(
        [
            [
                "User:[bold]mallory",
                "10.0.0.9",
                "DESCRIBE",
                "DENY",
                "TOPIC",
                "[red]orders",
                "LITERAL",
            ],
            ["User:alice", "*", "READ", "ALLOW", "GROUP", "team-", "PREFIXED"],
            ["User:ops", "*", "DESCRIBE", "ALLOW", "CLUSTER", "kafka-cluster", "LITERAL"],
        ]
    )
    matching = ok(
        run(
            db,
            "acls",
            "list",
            "--json",
            "--resource-type",
            "GROUP",
            "--pattern",
            "MATCH",
            "--resource-name",
            "team-billing",
        )
    )
    assert [b["principal"] for b in json.loads(matching.stdout)] == ["User:alice"]
    assert (
        json.loads(ok(run(db, "acls", "list", "--json", "--permission", "DENY")).stdout)[0][
            "resource_name"
        ]
        == "[red]orders"
    )

    failed(run(db, "acls", "remove"), 2, "--all")
    removed = ok(run(db, "acls", "remove", "--principal", "User:alice"))
    assert table_rows(removed.stdout) == [
        ["User:alice", "*", "READ", "ALLOW", "GROUP", "team-", "PREFIXED"]
    ]
    assert [a["action"] for a in audit_lines(removed.stderr)] == ["DeleteAcls"]
    left = json.loads(ok(run(db, "acls", "list", "--json")).stdout)
    assert sorted(b["principal"] for b in left) == ["User:[bold]mallory", "User:ops"]
    removed = ok(run(db, "acls", "remove", "--all", "--json"))
    assert len(json.loads(removed.stdout)) == 2
    assert json.loads(ok(run(db, "acls", "list", "--json")).stdout) == []


def test_bad_acl_values_exit_2(db: str) -> None:
    base = ("acls", "add", "--resource-type", "GROUP", "--resource-name", "g")
    failed(run(db, *base, "--principal", "alice", "--operation", "READ"), 2, "User:alice")
    failed(run(db, *base, "--principal", "User:a", "--operation", "WRITE"), 2, "WRITE")
    failed(run(db, *base, "--principal", "User:a", "--operation", "FLY"), 2, "FLY")
    failed(
        run(db, *base, "--principal", "User:a", "--operation", "READ", "--pattern", "MATCH"),
        2,
        "MATCH",
    )
    failed(
        run(
            db,
            "acls",
            "add",
            "--principal",
            "User:a",
            "--operation",
            "READ",
            "--resource-type",
            "USER",
            "--resource-name",
            "x",
        ),
        2,
        "USER",
    )
    failed(run(db, "acls", "list", "--operation", "nope"), 2, "nope")
    assert json.loads(ok(run(db, "acls", "list", "--json")).stdout) == []
