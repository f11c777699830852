"""The gateway's Prometheus metrics: relayed requests and bytes per API, requests our ACLs
kept from the upstream, upstream errors.

Plain counters bumped per request and read at scrape time (as the node's request counter:
a prometheus-client child's inc() takes a lock on the hot path)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from app.gateway.routes import api_name


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.requests: dict[int, int] = {}
        self.request_bytes: dict[int, int] = {}
        self.reply_bytes: dict[int, int] = {}
        self.denied: dict[int, int] = {}
        self.upstream_errors = 0
        if registry is not None:
            registry.register(_Collector(self))

    def relayed(self, api_key: int, size: int) -> None:
        self.requests[api_key] = self.requests.get(api_key, 0) + 1
        self.request_bytes[api_key] = self.request_bytes.get(api_key, 0) + size

    def replied(self, api_key: int, size: int) -> None:
        self.reply_bytes[api_key] = self.reply_bytes.get(api_key, 0) + size

    def refused(self, api_key: int) -> None:
        self.denied[api_key] = self.denied.get(api_key, 0) + 1

    def upstream_error(self) -> None:
        self.upstream_errors += 1


class _Collector(Collector):
    def __init__(self, metrics: GatewayMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[CounterMetricFamily]:
        m = self.metrics
        for name, doc, values in (
            ("coordinator_gateway_relayed_requests", "requests relayed upstream", m.requests),
            (
                "coordinator_gateway_request_bytes",
                "request bytes relayed upstream",
                m.request_bytes,
            ),
            ("coordinator_gateway_reply_bytes", "reply bytes relayed back", m.reply_bytes),
            (
                "coordinator_gateway_denied_requests",
                "requests answered here because our ACLs denied every resource they name",
                m.denied,
            ),
        ):
            family = CounterMetricFamily(name, doc, labels=["api"])
            for key, value in sorted(dict(values).items()):
                family.add_metric([api_name(key)], value)
            yield family
        yield CounterMetricFamily(
            "coordinator_gateway_upstream_errors",
            "upstream connections that failed or were lost under a client",
            value=m.upstream_errors,
        )
