"""Calls to other servers: the SSRF guard (``guard``), guarded HTTP (``http``), signed durable
deliveries (``delivery``) and HTTP service tasks (``http_tasks``)."""
from engine.outbound.http import OutboundHttp, OutboundResponse

__all__ = ["OutboundHttp", "OutboundResponse"]
