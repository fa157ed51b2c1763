"""``GET /v1/media/{binding_id}/{attachment_id}``: a file a customer sent through a messenger, fetched
through the messenger for a caller holding an API key with ``conversation.messages``
(``engine.chat.media``). The key, the rate limit and the file's conversation are checked in one short
transaction; the download runs after it, its bytes passed on as they arrive, at most
``BATON_MEDIA_MAX_BYTES``.
"""
from __future__ import annotations

from urllib.parse import quote

from flask import Blueprint, Response, current_app, request, stream_with_context

from channels.http import unit_of_work
from engine import auth
from engine.chat import media
from engine.chat.messengers.registry import MESSENGERS
from engine.telemetry import context

bp = Blueprint("media", __name__)


@bp.get("/v1/media/<int:binding_id>/<attachment_id>")
def fetch(binding_id: int, attachment_id: str):
    baton = current_app.extensions["baton"]
    settings = baton.settings
    with unit_of_work("media") as uow:
        principal = auth.authenticate(uow, request.headers.get("X-API-Key"))
        context.set_ids(tenant_id=principal.tenant_id)
        baton.rate_limits.check_key(principal.key_id)
        principal.require(media.PERMISSION)
        stored = media.find(uow, principal.tenant_id, binding_id, attachment_id)
    download = media.download(stored, MESSENGERS, settings.messenger_api_urls,
                              allow_private=settings.allow_private_urls, max_bytes=settings.media_max_bytes)
    headers = {"Content-Disposition": f"attachment; filename*=UTF-8''{quote(download.file_name, safe='')}",
               "X-Content-Type-Options": "nosniff", "Cache-Control": "private, no-store"}
    if download.length is not None:
        headers["Content-Length"] = str(download.length)
    response = Response(stream_with_context(download.chunks()), status=200, headers=headers,
                        content_type=download.content_type)
    response.call_on_close(download.close)
    return response
