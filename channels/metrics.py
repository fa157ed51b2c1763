"""``GET /metrics``: Prometheus' text format: the counters and histograms of every process of this
server (summed from their files, ``engine.telemetry.metrics``) and the gauges read from the
database (``engine.gauges``). The text format 0.0.4 by default, OpenMetrics when the scraper asks
for it (Prometheus does)."""
from __future__ import annotations

from flask import Blueprint, Response, request
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.multiprocess import MultiProcessCollector

from channels.http import unit_of_work
from engine.gauges import DatabaseGauges
from engine.telemetry.metrics import DIRECTORY

bp = Blueprint("metrics", __name__)


@bp.get("/metrics")
def metrics() -> Response:
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(DIRECTORY))
    encode, content_type = choose_encoder(request.headers.get("Accept"))  # OpenMetrics when asked for
    with unit_of_work("metrics") as uow:
        registry.register(DatabaseGauges(uow))
        text = encode(registry)
    return Response(text, content_type=content_type)
