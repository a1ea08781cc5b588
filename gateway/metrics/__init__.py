"""``GET /metrics``: the Prometheus registry, per-request timing, scrape-time pool series."""
