"""The CLI follows a redirect only to the node it was pointed at or to an admin URL that node
lists in GET /cluster/nodes: a node (or anything answering on its port) cannot make it send
the bearer token or a Basic password to another host."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.api.helpers import run_cli


@dataclass
class FakeNode:
    """An HTTP server that redirects every /groups/... call to `redirect_to` (when set) and
    lists `listed` admin URLs in /cluster/nodes; it records each request's Authorization."""

    redirect_to: str | None = None
    listed: list[str] = field(default_factory=list)
    seen: list[tuple[str, str, str | None, str | None]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"


def handler(node: FakeNode) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def answer(self) -> None:
            node.seen.append(
                (
                    self.command,
                    self.path,
                    self.headers.get("Authorization"),
                    self.headers.get("Content-Type"),
                )
            )
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            if self.path == "/cluster/nodes":
                body = [{"node_id": i, "admin_url": u} for i, u in enumerate(node.listed)]
                self.reply(200, body)
            elif node.redirect_to and self.path.startswith("/groups"):
                self.send_response(307)
                self.send_header("Location", node.redirect_to + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                self.reply(200, {"group_id": "g", "result": "ok"})

        def reply(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = answer

    return Handler


@pytest.fixture
def fake_nodes() -> Iterator[tuple[FakeNode, FakeNode]]:
    """(the node the CLI is pointed at, another server)."""
    nodes = (FakeNode(), FakeNode())
    threads = []
    for n in nodes:
        n.server = ThreadingHTTPServer(("127.0.0.1", 0), handler(n))
        t = threading.Thread(target=n.server.serve_forever, daemon=True)
        t.start()
        threads.append(t)
    try:
        yield nodes
    finally:
        for n in nodes:
            assert n.server is not None
            n.server.shutdown()
            n.server.server_close()


async def test_the_cli_never_sends_credentials_to_an_unlisted_host(
    fake_nodes: tuple[FakeNode, FakeNode],
) -> None:
    first, other = fake_nodes
    first.redirect_to = other.url
    first.listed = [first.url]  # the other server is not a node of this cluster
    basic = {"COORD_ADMIN_USER": "alice", "COORD_ADMIN_PASSWORD": "alice-secret"}
    for args, env, token in [
        (("groups", "describe", "g", "--json"), {}, "tok-1"),
        (("groups", "rebalance", "g"), {}, "tok-1"),
        (("groups", "delete", "g"), basic, None),
    ]:
        res = await run_cli(*args, url=first.url, token=token, extra_env=env)
        assert res.code == 1, (res.stdout, res.stderr)
        assert "refusing to follow the redirect" in res.stderr, res.stderr
        assert other.url.split("//")[1] in res.stderr
        assert "alice-secret" not in res.stderr + res.stdout
        assert other.seen == []  # not a single request reached it
    # the first node got the credentials, and was asked for its nodes
    auths = {a for _, _, a, _ in first.seen}
    assert auths == {"Bearer tok-1", "Basic YWxpY2U6YWxpY2Utc2VjcmV0"}
    assert any(p == "/cluster/nodes" for _, p, _, _ in first.seen)
    # every mutation said application/json, a GET said nothing
    for method, path, _, ctype in first.seen:
        assert ctype == ("application/json" if method != "GET" else None), (method, path)


async def test_the_cli_follows_a_redirect_to_a_listed_admin_url(
    fake_nodes: tuple[FakeNode, FakeNode],
) -> None:
    first, other = fake_nodes
    first.redirect_to = other.url
    first.listed = [first.url, other.url + "/"]
    res = await run_cli("groups", "rebalance", "g", url=first.url, token="tok-2")
    assert res.code == 0, res.stderr
    assert [(m, p, a) for m, p, a, _ in other.seen] == [
        ("POST", "/groups/g/rebalance", "Bearer tok-2")
    ]


async def test_a_url_with_a_password_is_not_printed(fake_nodes: tuple[FakeNode, FakeNode]) -> None:
    first, other = fake_nodes
    first.redirect_to = other.url
    first.listed = [first.url]
    url = first.url.replace("http://", "http://ops:Pa55word@")
    res = await run_cli("groups", "describe", "g", url=url)
    assert res.code == 1 and "refusing" in res.stderr, res.stderr
    assert "Pa55word" not in res.stderr
