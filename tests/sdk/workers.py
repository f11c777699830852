"""SDK worker processes (tests/sdk/worker.py) seen from a test, on tests/support/consumers.py's
Hub and process plumbing: their JSON events are collected by a reader thread, commands go to
their stdin."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.consumers import ConsumerProcess, Hub, driver_args


class SdkWorker(ConsumerProcess):
    def __init__(
        self,
        hub: Hub,
        workdir: Path,
        bootstrap: str,
        group: str,
        name: str,
        **options: str | int | bool | None,
    ) -> None:
        self.hub = hub
        self.client = "sdk"
        self.group = group
        self.name = name
        self.instance = options.get("instance")  # type: ignore[assignment]
        self.events: list[dict[str, Any]] = []
        self.stderr_path = workdir / f"worker-{name}.stderr"
        args = [sys.executable, "-m", "tests.sdk.worker", bootstrap, group]
        args += driver_args(client_id=name, **options)
        self._spawn(args)

    @property
    def owned(self) -> frozenset[int]:  # consumers own partitions; workers hold items
        return frozenset()

    @property
    def last(self) -> dict[str, Any] | None:
        """The latest assigned/revoked/lost event."""
        evs = self.snapshot("assigned", "revoked", "lost")
        return evs[-1] if evs else None

    @property
    def items(self) -> frozenset[str]:
        last = self.last
        return frozenset(last["items"]) if last and last["event"] == "assigned" else frozenset()

    def failure(self) -> str | None:
        bad = self.snapshot("fatal", "exited")
        if bad or not self.alive:
            return f"worker {self.name} failed: {bad} rc={self.proc.poll()}\n{self.stderr_tail()}"
        return None

    def client_log(self, n: int = 80) -> str:
        return "\n".join(self.stderr_tail(20000).splitlines()[-n:])


class Fleet:
    """The workers of one test: started, restarted under the same name, killed at teardown."""

    def __init__(self, workdir: Path, bootstrap: str, group: str, **defaults: Any) -> None:
        self.hub = Hub()
        self.workdir = workdir
        self.bootstrap = bootstrap
        self.group = group
        self.defaults = defaults
        self.workers: dict[str, SdkWorker] = {}
        self.retired: list[SdkWorker] = []

    def start(self, name: str, **options: Any) -> SdkWorker:
        if name in self.workers:
            self.retired.append(self.workers[name])
        w = SdkWorker(
            self.hub, self.workdir, self.bootstrap, self.group, name, **{**self.defaults, **options}
        )
        self.workers[name] = w
        return w

    def wait(self, pred: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
        def check() -> Any:
            for w in self.workers.values():
                if (f := w.failure()) is not None and w.alive:
                    raise AssertionError(f)
            return pred()

        return self.hub.wait_until(check, timeout, what)

    def items(self) -> dict[str, frozenset[str]]:
        return {n: w.items for n, w in self.workers.items()}

    def assigned_in(self, generation: int) -> bool:
        """Every live worker's latest event is an assignment of `generation`."""
        return all(
            (last := w.last) is not None
            and last["event"] == "assigned"
            and last["generation"] == generation
            for w in self.workers.values()
            if w.alive
        )

    def kill_all(self) -> None:
        for w in [*self.workers.values(), *self.retired]:
            w.kill()

    def describe(self) -> str:
        return "\n".join(w.describe(last=12) for w in self.workers.values())
