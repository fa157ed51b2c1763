"""Files customers send through a messenger, fetched through Baton: each file of an inbound message
gets an ``attachment_id`` of Baton's when the message is taken (kept with the messenger's own
reference, which is never shown), and ``GET /v1/media/{binding_id}/{attachment_id}`` fetches it
through the messenger (Telegram ``getFile`` then the download, WhatsApp the media id's URL with the
bearer token, Viber the media URL), so that a process or an operator never needs the bot's token.

A file is found by the tenant, the conversation and its id together: any other pair is not found,
whatever exists elsewhere. Its bytes are passed on as they arrive, never kept, and never more than
``BATON_MEDIA_MAX_BYTES``.
"""
from __future__ import annotations

import re
import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import insert, select

from engine.chat.messengers.items import Attachment
from engine.chat.messengers.registry import Registry
from engine.errors import NotFoundError, OutboundError, OutboundRefusedError
from engine.outbound.http import OutboundHttp, OutboundStream
from engine.store.db import utcnow
from engine.store.models import Channel, ChatAttachment, Conversation
from engine.store.unit_of_work import UnitOfWork

PERMISSION = "conversation.messages"
TIMEOUT_S = 60.0                       # one download, from the first byte asked to the last passed on
_ID = re.compile(r"[0-9a-f]{32}")
_MAX_SOURCE = 4096


def with_ids(attachments: tuple[Attachment, ...]) -> tuple[Attachment, ...]:
    """The attachments, each file with a new ``attachment_id`` (places and contacts have none)."""
    return tuple(replace(attachment, attachment_id=secrets.token_hex(16))
                 if attachment.source and len(attachment.source) <= _MAX_SOURCE else attachment
                 for attachment in attachments)


def record(uow: UnitOfWork, tenant_id: int, channel_id: int, conversation_id: int,
           attachments: tuple[Attachment, ...]) -> None:
    """In the message's transaction: the files of a message, by their ids, with the messenger's references."""
    rows = [{"id": a.attachment_id, "tenant_id": tenant_id, "channel_id": channel_id,
             "conversation_id": conversation_id, "kind": a.type, "source": a.source,
             "name": (a.name or "")[:255] or None, "mime_type": (a.mime_type or "")[:255] or None,
             "size": a.size if a.size is not None and 0 <= a.size < 2**62 else None, "created_at": utcnow()}
            for a in attachments if a.attachment_id]
    if rows:
        uow.execute(insert(ChatAttachment), rows)


@dataclass(frozen=True)
class StoredFile:
    """A file as found for a caller: the channel that fetches it and what it knows of it."""

    channel_type: str
    settings: Mapping[str, Any]
    source: str
    kind: str
    name: str | None
    mime_type: str | None
    size: int | None


def find(uow: UnitOfWork, tenant_id: int, binding_id: int, attachment_id: str) -> StoredFile:
    """The file ``attachment_id`` of the tenant's conversation ``binding_id``; NotFoundError for any
    other pair (another tenant's, another conversation's, none)."""
    row = None
    if _ID.fullmatch(attachment_id) and 0 < binding_id < 2**63:
        row = uow.execute(
            select(Channel.type, Channel.settings, ChatAttachment.source, ChatAttachment.kind, ChatAttachment.name,
                   ChatAttachment.mime_type, ChatAttachment.size)
            .join(Conversation, Conversation.id == ChatAttachment.conversation_id)
            .join(Channel, Channel.id == ChatAttachment.channel_id)
            .where(ChatAttachment.id == attachment_id, ChatAttachment.tenant_id == tenant_id,
                   ChatAttachment.conversation_id == binding_id, Conversation.tenant_id == tenant_id)).first()
    if row is None:
        raise NotFoundError(f"Attachment '{attachment_id[:40]}' of conversation {binding_id} not found.")
    return StoredFile(row.type, dict(row.settings or {}), row.source, row.kind, row.name, row.mime_type, row.size)


@dataclass
class Download:
    """A file on its way: what to tell the caller about it, and its bytes as they arrive."""

    content_type: str
    length: int | None
    file_name: str
    stream: OutboundStream
    http: OutboundHttp

    def chunks(self) -> Iterator[bytes]:
        try:
            yield from self.stream.chunks()
        finally:
            self.close()

    def close(self) -> None:
        self.stream.close()
        self.http.close()


def download(stored: StoredFile, messengers: Registry, api_urls: Mapping[str, str], *, allow_private: bool,
             max_bytes: int) -> Download:
    """Ask the messenger for the file and open its download; OutboundError (nothing passed on yet)
    when the messenger refuses, cannot be reached, or says the file is larger than ``max_bytes``."""
    messenger = messengers[stored.channel_type]
    if stored.size is not None and stored.size > max_bytes:
        raise _too_large(messenger.name, max_bytes, stored.size)
    http = OutboundHttp(allow_private=allow_private, timeout_s=TIMEOUT_S, max_response_bytes=1_048_576)
    try:
        request = messenger.file_request(http, stored.settings, stored.source,
                                         api_url=api_urls[stored.channel_type])
        stream = http.stream(request.method, request.url, headers=request.headers, max_bytes=max_bytes)
    except OutboundRefusedError as error:
        http.close()
        raise OutboundError(f"{messenger.name}'s file cannot be fetched: {error.message}") from None
    except OutboundError as error:
        http.close()
        if "larger than" in error.message:
            raise _too_large(messenger.name, max_bytes) from None
        raise
    if stream.status != 200:
        stream.close()
        http.close()
        raise OutboundError(f"{messenger.name} answered HTTP {stream.status} for the file; try again later.")
    content_type = stream.headers.get("Content-Type") or stored.mime_type or "application/octet-stream"
    return Download(content_type, stream.declared_size, stored.name or _name_in(request.url) or stored.kind,
                    stream, http)


def _name_in(url: str) -> str | None:
    """A file name the download URL ends with (Telegram's ``photos/file_7.jpg``), if it has one."""
    segment = urlsplit(url).path.rpartition("/")[2]
    return segment if "." in segment and 0 < len(segment) <= 255 and segment.isprintable() else None


def _too_large(messenger: str, max_bytes: int, size: int | None = None) -> OutboundError:
    said = f" ({size} bytes)" if size is not None else ""
    return OutboundError(f"The {messenger} file is larger{said} than this server passes on ({max_bytes} bytes, "
                         "BATON_MEDIA_MAX_BYTES); nothing was fetched.", data={"max_bytes": max_bytes})
