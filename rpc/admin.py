"""Administration methods (permission ``admin``): definitions, API keys, webhooks."""
from __future__ import annotations

from engine import auth, definitions, webhooks
from engine.errors import InvalidParamsError
from rpc.params import (optional_list, optional_str, page_params, reject_unknown, require_int, require_list,
                        require_str)
from rpc.registry import RpcMethod

MAX_BPMN_CHARS = 1_000_000
MAX_DMN_FILES = 20
MAX_FORMS = 20


def deploy(ctx, params):
    reject_unknown(params, {"bpmn", "code", "dmn", "forms"})
    xml = require_str(params, "bpmn", max_len=MAX_BPMN_CHARS)
    code = optional_str(params, "code", max_len=200)
    dmn = optional_list(params, "dmn") or []
    if len(dmn) > MAX_DMN_FILES:
        raise InvalidParamsError(f"Parameter 'dmn' holds at most {MAX_DMN_FILES} files.", data={"param": "dmn"})
    dmn = [require_str({f"dmn[{i}]": text}, f"dmn[{i}]", max_len=MAX_BPMN_CHARS) for i, text in enumerate(dmn)]
    forms = optional_list(params, "forms") or []
    if len(forms) > MAX_FORMS:
        raise InvalidParamsError(f"Parameter 'forms' holds at most {MAX_FORMS} forms.", data={"param": "forms"})
    forms = [require_str({f"forms[{i}]": text}, f"forms[{i}]", max_len=MAX_BPMN_CHARS) for i, text in enumerate(forms)]
    return definitions.deploy(ctx.uow, ctx.tenant_id, xml, code, dmn=dmn, forms=forms,
                              public_url=ctx.settings.public_url)


def definition_list(ctx, params):
    reject_unknown(params, {"code", "page", "per_page"})
    page, per_page = page_params(params)
    return definitions.list_definitions(ctx.uow, ctx.tenant_id, code=optional_str(params, "code", max_len=200),
                                        page=page, per_page=per_page)


def definition_get(ctx, params):
    reject_unknown(params, {"definition_id"})
    return definitions.get_definition(ctx.uow, ctx.tenant_id, require_int(params, "definition_id"))


def apikey_create(ctx, params):
    reject_unknown(params, {"name", "permissions", "user", "groups"})
    name = require_str(params, "name", max_len=200)
    row, raw = auth.create_key(ctx.uow, ctx.tenant_id, name, require_list(params, "permissions"),
                               granted_by=ctx.principal, user=params.get("user"), groups=params.get("groups"))
    return {"key_id": row.id, "name": row.name, "permissions": row.permissions, "user": row.user,
            "groups": row.groups or [], "api_key": raw}


def apikey_list(ctx, params):
    reject_unknown(params, {"page", "per_page"})
    page, per_page = page_params(params)
    return auth.list_keys(ctx.uow, ctx.tenant_id, page=page, per_page=per_page)


def apikey_revoke(ctx, params):
    reject_unknown(params, {"key_id"})
    return auth.revoke_key(ctx.uow, ctx.tenant_id, require_int(params, "key_id"))


def webhook_list(ctx, params):
    reject_unknown(params, {"page", "per_page"})
    page, per_page = page_params(params)
    return webhooks.list_routes(ctx.uow, ctx.tenant_id, ctx.settings.public_url, page=page, per_page=per_page)


def webhook_rotate(ctx, params):
    reject_unknown(params, {"webhook_id"})
    return webhooks.rotate(ctx.uow, ctx.tenant_id, require_str(params, "webhook_id", max_len=64), ctx.settings.public_url)


def webhook_update(ctx, params):
    reject_unknown(params, {"webhook_id", "secret"})
    if "secret" not in params:
        raise InvalidParamsError("Missing required parameter 'secret' (a string, or null to remove it).")
    return webhooks.set_secret(ctx.uow, ctx.tenant_id, require_str(params, "webhook_id", max_len=64),
                               optional_str(params, "secret", max_len=255), ctx.settings.public_url)


METHODS = (
    RpcMethod("definition.deploy", deploy, "admin"),
    RpcMethod("definition.list", definition_list, "admin"),
    RpcMethod("definition.get", definition_get, "admin"),
    RpcMethod("apikey.create", apikey_create, "admin"),
    RpcMethod("apikey.list", apikey_list, "admin"),
    RpcMethod("apikey.revoke", apikey_revoke, "admin"),
    RpcMethod("webhook.list", webhook_list, "admin"),
    RpcMethod("webhook.rotate", webhook_rotate, "admin"),
    RpcMethod("webhook.update", webhook_update, "admin"),
)
