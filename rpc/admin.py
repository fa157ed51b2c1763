"""Administration methods (permission ``admin``): definitions, API keys, webhooks."""
from __future__ import annotations

from engine import auth, definitions, webhooks
from rpc.registry import Audit, RpcMethod
from rpc.schema import (BOOL, ID, INT, PAGING, TEXT, TIME, ListOf, Param, Text, array, nullable, obj, page_of)

MAX_BPMN_CHARS = 1_000_000
MAX_DMN_FILES = 20
MAX_FORMS = 20


def deploy(ctx, params):
    return definitions.deploy(ctx.uow, ctx.tenant_id, params["bpmn"], params.get("code"), dmn=params.get("dmn") or [],
                              forms=params.get("forms") or [], public_url=ctx.settings.public_url)


def definition_list(ctx, params):
    return definitions.list_definitions(ctx.uow, ctx.tenant_id, code=params.get("code"), page=params["page"],
                                        per_page=params["per_page"])


def definition_get(ctx, params):
    return definitions.get_definition(ctx.uow, ctx.tenant_id, params["definition_id"])


def apikey_create(ctx, params):
    row, raw = auth.create_key(ctx.uow, ctx.tenant_id, params["name"], params["permissions"],
                               granted_by=ctx.principal, user=params.get("user"), groups=params.get("groups"))
    return {"key_id": row.id, "name": row.name, "permissions": row.permissions, "user": row.user,
            "groups": row.groups or [], "api_key": raw}


def apikey_list(ctx, params):
    return auth.list_keys(ctx.uow, ctx.tenant_id, page=params["page"], per_page=params["per_page"])


def apikey_revoke(ctx, params):
    return auth.revoke_key(ctx.uow, ctx.tenant_id, params["key_id"])


def webhook_list(ctx, params):
    return webhooks.list_routes(ctx.uow, ctx.tenant_id, ctx.settings.public_url, page=params["page"],
                                per_page=params["per_page"])


def webhook_rotate(ctx, params):
    return webhooks.rotate(ctx.uow, ctx.tenant_id, params["webhook_id"], ctx.settings.public_url)


def webhook_update(ctx, params):
    return webhooks.set_secret(ctx.uow, ctx.tenant_id, params["webhook_id"], params["secret"],
                               ctx.settings.public_url)


CODE = Text(max_len=200)
# A webhook's id is a credential (its URL): the audit log names it by its process code and start event.
WEBHOOK_AUDIT = Audit("webhook", pick=lambda _params, answer: f"{answer['code']}/{answer['start_event_id']}"
                      if isinstance(answer, dict) else None)
WEBHOOK_ID = Param("webhook_id", Text(max_len=64), required=True)
DEPLOYED_WEBHOOK = obj(start_event_id=TEXT, webhook_id=TEXT, url=TEXT)
DEPLOYED = obj(("forms",), definition_id=INT, code=TEXT, version=INT, webhooks=array(DEPLOYED_WEBHOOK),
               channels=array(obj(start_event_id=TEXT, config_id=INT)), forms=array(obj(id=TEXT, version=INT)))
START_EVENT = obj(("message", "signal", "config_id", "default"), element_id=TEXT, trigger=nullable(TEXT),
                  channel=nullable(TEXT), message=TEXT, signal=TEXT, config_id=INT, default=BOOL)
DEFINITION = obj(definition_id=INT, code=TEXT, version=INT, process_id=TEXT, name=nullable(TEXT),
                 start_events=array(START_EVENT), created_at=TIME)
KEY = obj(key_id=INT, name=TEXT, prefix=TEXT, permissions=array(TEXT), user=nullable(TEXT), groups=array(TEXT),
          created_at=TIME, revoked_at=nullable(TIME))
WEBHOOK = obj(webhook_id=TEXT, url=TEXT, code=TEXT, start_event_id=TEXT, has_secret=BOOL, created_at=TIME,
              rotated_at=nullable(TIME))

METHODS = (
    RpcMethod("definition.deploy", deploy, "admin", summary="Deploy a BPMN file (and its DMN files) as new versions.",
              params=(Param("bpmn", Text(max_len=MAX_BPMN_CHARS), required=True, description="the BPMN 2.0 XML"),
                      Param("code", CODE, description="default: the executable process's id"),
                      Param("dmn", ListOf(Text(max_len=MAX_BPMN_CHARS), max_items=MAX_DMN_FILES, noun="files"),
                            description="DMN files whose decisions the business rule tasks call"),
                      Param("forms", ListOf(Text(max_len=MAX_BPMN_CHARS), max_items=MAX_FORMS, noun="forms"),
                            description="Camunda Forms (JSON) that the user tasks name by formRef or formKey")),
              result={**DEPLOYED, "properties": {**DEPLOYED["properties"], "definitions": array(DEPLOYED)},
                      "required": [*DEPLOYED["required"], "definitions"]},
              audit=Audit("definition", answer="definition_id")),
    RpcMethod("definition.list", definition_list, "admin", summary="Deployed definitions, newest first.",
              params=(Param("code", CODE), *PAGING), result=page_of(DEFINITION)),
    RpcMethod("definition.get", definition_get, "admin", summary="One definition with its BPMN and DMN files.",
              params=(Param("definition_id", ID, required=True),),
              result={**DEFINITION, "properties": {**DEFINITION["properties"], "bpmn": TEXT, "dmn": array(TEXT)},
                      "required": [*DEFINITION["required"], "bpmn", "dmn"]}),
    RpcMethod("apikey.create", apikey_create, "admin", summary="Create an API key; the key is shown only here.",
              params=(Param("name", Text(max_len=200), required=True),
                      Param("permissions", ListOf(Text(), min_items=1, noun="permission(s)"), required=True,
                            description="method names, group wildcards ('process.*'), 'admin' or '*'"),
                      Param("user", Text(max_len=auth.MAX_NAME),
                            description="the operator the key stands for (claims, 'mine', 'me')"),
                      Param("groups", ListOf(Text(max_len=auth.MAX_NAME), max_items=auth.MAX_GROUPS,
                                             noun="group names"),
                            description="the operator's groups (candidate groups of tasks and conversations)")),
              result=obj(key_id=INT, name=TEXT, permissions=array(TEXT), user=nullable(TEXT), groups=array(TEXT),
                         api_key=TEXT),
              audit=Audit("api_key", answer="key_id")),
    RpcMethod("apikey.list", apikey_list, "admin", summary="The tenant's API keys, revoked ones included.",
              params=PAGING, result=page_of(KEY)),
    RpcMethod("apikey.revoke", apikey_revoke, "admin", summary="Revoke an API key.",
              params=(Param("key_id", ID, required=True),), result=obj(key_id=INT, revoked=BOOL),
              audit=Audit("api_key", param="key_id")),
    RpcMethod("webhook.list", webhook_list, "admin", summary="The tenant's inbound webhooks.",
              params=PAGING, result=page_of(WEBHOOK)),
    RpcMethod("webhook.rotate", webhook_rotate, "admin", summary="Give a webhook a new id; the old one answers 404.",
              params=(WEBHOOK_ID,), result=WEBHOOK,
              audit=WEBHOOK_AUDIT),
    RpcMethod("webhook.update", webhook_update, "admin", summary="Set or remove the secret that signs a webhook's calls.",
              params=(WEBHOOK_ID, Param("secret", Text(max_len=255), required=True, nullable=True,
                                        description="16-255 characters; null removes the secret")),
              result=WEBHOOK,
              audit=WEBHOOK_AUDIT),
)
