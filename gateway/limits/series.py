"""The ``/metrics`` series of the API keys, by key name (never the key).

=============================================  =======  ======================================
name                                           type     meaning
=============================================  =======  ======================================
mlxd:api_key_requests_total{key}               counter  model requests admitted
mlxd:api_key_rate_limited_total{key,limit}     counter  model requests refused with 429, by limit
mlxd:api_key_tokens_total{key}                 counter  prompt + completion tokens of ended requests
mlxd:api_key_requests_in_flight{key}           gauge    admitted model requests not answered yet
=============================================  =======  ======================================

Every configured key has its series (at zero before its first request);
a key removed by a reload keeps its totals. Read at scrape time, on the
event loop.
"""

from __future__ import annotations

from typing import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.limits.counters import LIMIT_KINDS, KeyLimits
from shared.config import ServerConfig, api_key_entries

PREFIX = "mlxd:"
"""The prefix of every mlxd series."""


class KeySeriesCollector(Collector):
    """Collects the series above from ``limits``, with every key of the
    current config (``get_server``) present."""

    def __init__(self, limits: KeyLimits, get_server: Callable[[], ServerConfig]) -> None:
        self.limits = limits
        self.get_server = get_server

    def collect(self) -> Iterator[Metric]:
        """The four families, one sample per key name (and limit)."""
        for entry in api_key_entries(self.get_server()):
            self.limits.of(entry.name)
        requests = CounterMetricFamily(
            PREFIX + "api_key_requests", "Model requests admitted per API key.", labels=["key"]
        )
        refused = CounterMetricFamily(
            PREFIX + "api_key_rate_limited",
            "Model requests refused with 429 per API key and limit.",
            labels=["key", "limit"],
        )
        tokens = CounterMetricFamily(
            PREFIX + "api_key_tokens", "Prompt plus completion tokens of ended requests per API key.", labels=["key"]
        )
        in_flight = GaugeMetricFamily(
            PREFIX + "api_key_requests_in_flight",
            "Admitted model requests not answered yet per API key.",
            labels=["key"],
        )
        for name, counters in sorted(self.limits.keys.items()):
            requests.add_metric([name], counters.total_requests)
            tokens.add_metric([name], counters.total_tokens)
            in_flight.add_metric([name], counters.in_flight)
            for kind in LIMIT_KINDS:
                refused.add_metric([name, kind], counters.refused[kind])
        yield from (requests, refused, tokens, in_flight)
