"""``GET /metrics``: Prometheus' text format: the counters and histograms of every process of this
server (summed from their files, ``engine.telemetry.metrics``) and the gauges read from the
database (``engine.gauges``)."""
from __future__ import annotations

from flask import Blueprint, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from engine.gauges import DatabaseGauges
from engine.telemetry.metrics import DIRECTORY

bp = Blueprint("metrics", __name__)


@bp.get("/metrics")
def metrics() -> Response:
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(DIRECTORY))
    registry.register(DatabaseGauges())
    return Response(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
