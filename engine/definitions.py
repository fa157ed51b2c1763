"""Publishing BPMN: versions per code (each executable pool of a collaboration its own), the spec stored
once, the DMN files its business rule tasks call, webhook routes for webhook start events, channel
start events resolved to their channel's config id."""
from __future__ import annotations

import logging
import re
import secrets
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from bpmn import all_task_specs
from bpmn.deploy import parse_definitions
from engine.chat import channel_configs, messenger_deliveries
from engine.chat.messengers.registry import MESSENGERS
from engine.errors import BpmnValidationError, InvalidParamsError, NotFoundError
from engine.runtime import timer_starts
from engine.store.db import iso
from engine.store.models import Definition, Form, WebhookRoute
from engine.store.paging import page_of
from engine.store.unit_of_work import UnitOfWork

log = logging.getLogger("baton.definitions")
_CODE = re.compile(r"^[A-Za-z0-9_.\-]{1,200}$")
CHANNEL_TRIGGERS = channel_configs.TYPES  # the start event triggers that name a channel


def new_webhook_id() -> str:
    """192 random bits, URL-safe."""
    return secrets.token_urlsafe(24)


def webhook_url(public_url: str, webhook_id: str) -> str:
    return f"{public_url.rstrip('/')}/webhooks/inbound/{webhook_id}"


def deploy(uow: UnitOfWork, tenant_id: int, xml: str, code: str | None, *, dmn: list[str] = (),
           forms: list[str] = (), public_url: str) -> dict[str, Any]:
    """Publish a file: each executable pool becomes a new version of its code (its process id, or
    ``code`` for a file with one), all in the unit of work. The answer describes the first (a file
    with one process: that one) and lists every definition in ``definitions``. ``forms``: Camunda
    Forms (JSON texts), each stored as a new version of its id, which the file's user tasks name."""
    deployed_forms: dict[str, set[int]] = {}
    for key, version in uow.execute(select(Form.form_key, Form.version).where(Form.tenant_id == tenant_id)):
        deployed_forms.setdefault(key, set()).add(version)
    parsed_all = parse_definitions(xml, list(dmn), list(forms), deployed_forms)
    if code is not None and len(parsed_all) > 1:
        ids = ", ".join(f"'{parsed.process_id}'" for parsed in parsed_all)
        raise InvalidParamsError(f"Parameter 'code' names one process, but the file has {len(parsed_all)} "
                                 f"executable pools ({ids}); each is deployed under its process id. Leave "
                                 "'code' out.", data={"param": "code"})
    codes = [parsed.process_id if code is None else code for parsed in parsed_all]
    for one in codes:
        if not _CODE.match(one or ""):
            raise InvalidParamsError("Parameter 'code' must be 1 to 200 letters, digits, '_', '.' or '-'.")
    # A start event's channel (config id or name) must exist, of the trigger's type.
    bound = [channel_configs.resolve_start_channels(uow, tenant_id, parsed.start_events, CHANNEL_TRIGGERS)
             for parsed in parsed_all]
    for parsed in parsed_all:
        _refuse_buttons_the_messenger_cannot_carry(parsed)
    for attempt in range(3):  # two deploys of one code at once: the loser takes the next version
        try:
            with uow.savepoint():
                stored_forms = _store_forms(uow, tenant_id, parsed_all[0].forms)
                answers = [_store(uow, tenant_id, xml, list(dmn), one, parsed, public_url, channels, stored_forms)
                           for one, parsed, channels in zip(codes, parsed_all, bound)]
            break
        except IntegrityError:
            if attempt == 2:
                raise
    for answer in answers:
        uow.after_commit(lambda answer=answer: log.info("deployed %s version %s (definition %s)", answer["code"],
                                                        answer["version"], answer["definition_id"]))
    return {**answers[0], "definitions": answers}


def _refuse_buttons_the_messenger_cannot_carry(parsed) -> None:
    """A process a messenger channel starts sends its buttons there: each messenger's limits apply
    (WhatsApp: 3 buttons, titles of 20 characters; Telegram: ids of 64 bytes ...)."""
    errors = []
    for channel_type in sorted({start.trigger for start in parsed.start_events} & set(MESSENGERS)):
        errors += messenger_deliveries.deploy_refusals(all_task_specs(parsed.spec, parsed.subprocess_specs),
                                                       MESSENGERS[channel_type])
    if errors:
        raise BpmnValidationError(errors)


def _store_forms(uow: UnitOfWork, tenant_id: int, forms: dict[str, dict]) -> dict[str, dict[str, int]]:
    """Each form as the next version of its id: ``{form id: {"form_id": row id, "version": n}}``."""
    stored = {}
    for key, schema in forms.items():
        latest = uow.execute(select(func.max(Form.version)).where(
            Form.tenant_id == tenant_id, Form.form_key == key)).scalar_one()
        row = Form(tenant_id=tenant_id, form_key=key, version=(latest or 0) + 1, schema=schema)
        uow.session.add(row)
        uow.session.flush()
        stored[key] = {"form_id": row.id, "version": row.version}
    return stored


def _store(uow: UnitOfWork, tenant_id: int, xml: str, dmn: list[str], code: str, parsed, public_url: str,
           bound: dict[str, int], forms: dict[str, dict[str, int]]) -> dict[str, Any]:
    latest = uow.execute(
        select(func.max(Definition.version)).where(Definition.tenant_id == tenant_id, Definition.code == code)
    ).scalar_one()
    definition = Definition(
        tenant_id=tenant_id, code=code, version=(latest or 0) + 1, process_id=parsed.process_id,
        name=parsed.name, bpmn_xml=xml, dmn_xml=dmn or None, spec_json=parsed.spec_json,
        start_events=[_start_event(s, bound, parsed.default_start) for s in parsed.start_events],
        forms={key: form["form_id"] for key, form in forms.items()} or None)
    uow.session.add(definition)
    uow.session.flush()
    webhooks = []
    for start in parsed.start_events:
        if start.trigger != "webhook":
            continue
        route = uow.execute(select(WebhookRoute).where(
            WebhookRoute.tenant_id == tenant_id, WebhookRoute.code == code,
            WebhookRoute.start_event_id == start.element_id)).scalar_one_or_none()
        if route is None:
            route = WebhookRoute(tenant_id=tenant_id, code=code, start_event_id=start.element_id,
                                 webhook_id=new_webhook_id())
            uow.session.add(route)
            uow.session.flush()
        webhooks.append({"start_event_id": start.element_id, "webhook_id": route.webhook_id,
                         "url": webhook_url(public_url, route.webhook_id)})
    timer_starts.schedule(uow, definition, getattr(parsed, "timer_starts", []))
    return {"definition_id": definition.id, "code": code, "version": definition.version,
            "webhooks": webhooks,
            "channels": [{"start_event_id": element_id, "config_id": config_id}
                         for element_id, config_id in bound.items()],
            "forms": [{"id": key, "version": form["version"]} for key, form in forms.items()]}


def _start_event(start, bound: dict[str, int], default: str | None) -> dict[str, Any]:
    """A start event as stored (and listed): what triggers it, and whether process.start begins there."""
    entry = {"element_id": start.element_id, "trigger": start.trigger, "channel": start.channel}
    for name in ("message", "signal"):
        if getattr(start, name, None):
            entry[name] = getattr(start, name)
    if start.trigger == "multiple":  # what each part of a multiple start event waits for
        entry.update(messages=list(start.messages), signals=list(start.signals), parallel=start.parallel)
    if start.element_id in bound:
        entry["config_id"] = bound[start.element_id]
    if start.element_id == default:
        entry["default"] = True
    return entry


def _summary(definition: Definition) -> dict[str, Any]:
    return {"definition_id": definition.id, "code": definition.code, "version": definition.version,
            "process_id": definition.process_id, "name": definition.name,
            "start_events": definition.start_events, "created_at": iso(definition.created_at)}


def list_definitions(uow: UnitOfWork, tenant_id: int, *, code: str | None, page: int, per_page: int) -> dict[str, Any]:
    conditions = [Definition.tenant_id == tenant_id]
    if code is not None:
        conditions.append(Definition.code == code)
    return page_of(uow, select(Definition).where(*conditions), Definition.id, page=page, per_page=per_page,
                   scalars=True, item=_summary)


def get_definition(uow: UnitOfWork, tenant_id: int, definition_id: int) -> dict[str, Any]:
    definition = uow.execute(select(Definition).where(
        Definition.tenant_id == tenant_id, Definition.id == definition_id)).scalar_one_or_none()
    if definition is None:
        raise NotFoundError(f"Definition {definition_id} not found.")
    return {**_summary(definition), "bpmn": definition.bpmn_xml, "dmn": definition.dmn_xml or []}
