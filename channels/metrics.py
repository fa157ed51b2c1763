"""``GET /metrics``: Prometheus' text format: the counters and histograms of every process of this
server (summed from their files, ``engine.telemetry.metrics``) and the gauges read from the
database (``engine.gauges``). The text format 0.0.4 by default, OpenMetrics when the scraper asks
for it (Prometheus does). With ``BATON_METRICS_TOKEN`` set, only a scraper sending it as a bearer
token is answered (401 otherwise): the labels carry every tenant's process codes."""
from __future__ import annotations

import hmac

from flask import Blueprint, Response, current_app, request
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.multiprocess import MultiProcessCollector

from channels.http import error_response, unit_of_work
from engine.errors import MetricsTokenError
from engine.gauges import DatabaseGauges
from engine.telemetry.metrics import DIRECTORY

bp = Blueprint("metrics", __name__)


def _allowed(token: str | None) -> bool:
    if not token:
        return True
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


@bp.get("/metrics")
def metrics() -> Response:
    if not _allowed(current_app.extensions["baton"].settings.metrics_token):
        return error_response(MetricsTokenError())
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(DIRECTORY))
    encode, content_type = choose_encoder(request.headers.get("Accept"))  # OpenMetrics when asked for
    with unit_of_work("metrics") as uow:
        registry.register(DatabaseGauges(uow))
        text = encode(registry)
    return Response(text, content_type=content_type)
