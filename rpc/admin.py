"""Administration methods (permission ``admin``): definitions, API keys, webhooks."""
from __future__ import annotations

from flask import current_app

from engine import auth, definitions, webhooks
from engine.db import db
from engine.errors import InvalidParamsError
from rpc.params import (optional_str, page_params, reject_unknown, require_int, require_list,
                        require_str)
from rpc.registry import rpc_method

MAX_BPMN_CHARS = 1_000_000


def _public_url() -> str:
    return current_app.extensions["baton"].settings.public_url


@rpc_method("definition.deploy", permission="admin")
def deploy(ctx, params):
    reject_unknown(params, {"bpmn", "code"})
    xml = require_str(params, "bpmn", max_len=MAX_BPMN_CHARS)
    code = optional_str(params, "code", max_len=200)
    return definitions.deploy(ctx.tenant_id, xml, code, public_url=_public_url())


@rpc_method("definition.list", permission="admin")
def definition_list(ctx, params):
    reject_unknown(params, {"code", "page", "per_page"})
    page, per_page = page_params(params)
    return definitions.list_definitions(ctx.tenant_id, code=optional_str(params, "code", max_len=200),
                                        page=page, per_page=per_page)


@rpc_method("definition.get", permission="admin")
def definition_get(ctx, params):
    reject_unknown(params, {"definition_id"})
    return definitions.get_definition(ctx.tenant_id, require_int(params, "definition_id"))


@rpc_method("apikey.create", permission="admin")
def apikey_create(ctx, params):
    reject_unknown(params, {"name", "permissions"})
    name = require_str(params, "name", max_len=200)
    row, raw = auth.create_key(ctx.tenant_id, name, require_list(params, "permissions"))
    db.session.commit()
    return {"key_id": row.id, "name": row.name, "permissions": row.permissions, "api_key": raw}


@rpc_method("apikey.list", permission="admin")
def apikey_list(ctx, params):
    reject_unknown(params, {"page", "per_page"})
    page, per_page = page_params(params)
    return auth.list_keys(ctx.tenant_id, page=page, per_page=per_page)


@rpc_method("apikey.revoke", permission="admin")
def apikey_revoke(ctx, params):
    reject_unknown(params, {"key_id"})
    return auth.revoke_key(ctx.tenant_id, require_int(params, "key_id"))


@rpc_method("webhook.list", permission="admin")
def webhook_list(ctx, params):
    reject_unknown(params, {"page", "per_page"})
    page, per_page = page_params(params)
    return webhooks.list_routes(ctx.tenant_id, _public_url(), page=page, per_page=per_page)


@rpc_method("webhook.rotate", permission="admin")
def webhook_rotate(ctx, params):
    reject_unknown(params, {"webhook_id"})
    return webhooks.rotate(ctx.tenant_id, require_str(params, "webhook_id", max_len=64), _public_url())


@rpc_method("webhook.update", permission="admin")
def webhook_update(ctx, params):
    reject_unknown(params, {"webhook_id", "secret"})
    if "secret" not in params:
        raise InvalidParamsError("Missing required parameter 'secret' (a string, or null to remove it).")
    return webhooks.set_secret(ctx.tenant_id, require_str(params, "webhook_id", max_len=64),
                               optional_str(params, "secret", max_len=255), _public_url())
