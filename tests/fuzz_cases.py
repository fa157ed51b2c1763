"""Hostile requests for the fuzz suite (tests/integration/test_fuzz.py) and its long run (bench/fuzz.py).

Hypothesis strategies for every door: JSON-RPC request objects over every method of
``rpc.build_methods`` (param names read from each handler's ``reject_unknown`` call, values hostile
or the tenant's real ids), envelopes and batches, raw bodies that are not JSON at all, and webhook,
web-chat and task-callback bodies. Values include what broke Baton before: overflowing numbers
(``1e400``), NaN and Infinity, integers past 64 bits, nesting past the parser's reach, lone
surrogates, NUL. ``Judge`` checks each answer and counts: never a 5xx, never ``internal``, the JSON
error shape on every error.
"""
from __future__ import annotations

import inspect
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from rpc.methods import build_methods

MISSING = object()
_TOKEN = uuid.uuid4().hex


class Raw(str):
    """JSON text put into a body as is (``1e400``, ``NaN``, deep nesting): json.dumps cannot write it."""


def method_params() -> dict[str, list[str]]:
    """Every method's name -> the param names it accepts: its declaration's (``rpc.schema``), else,
    for a method still declared the old way, its handler's ``reject_unknown`` set."""
    table = {}
    for name, method in build_methods().items():
        if method.params is not None:
            table[name] = [param.name for param in method.params]
            continue
        try:
            source = inspect.getsource(method.handler)
        except (OSError, TypeError):
            source = ""
        found = re.search(r"reject_unknown\(params, \{([^}]*)\}", source)
        table[name] = re.findall(r'"([a-z_]+)"', found.group(1)) if found else []
    return table


HOSTILE_TEXT = ["", " ", "\x00", "a\x00b", "\ud800", "x\udfff", "\udc00\ud800", "\ufeff", "\u202e", "😀",
                "' OR 1=1 --", "%00", "../../etc/passwd", "{{ 7*7 }}", "{% for %}", "a" * 300, "\x7f", "\r\n",
                "null", "true", "1e400", "__proto__", "process.*", "*", "admin", "webchat"]
RAW_NUMBERS = ["1e400", "-1e400", "1e309", "NaN", "Infinity", "-Infinity", "9223372036854775808",
               "-9223372036854775809", "1" + "0" * 40, "1E-400", "-0", "0.1e1", "1" * 4400]
INTS = [0, 1, -1, 2, 2**31, 2**53 + 1, 2**63 - 1, 2**63, -2**63, 10**30]

texts = st.one_of(st.text(max_size=12), st.sampled_from(HOSTILE_TEXT))
raw_numbers = st.sampled_from(RAW_NUMBERS).map(Raw)
deep = st.integers(min_value=60, max_value=3000).map(lambda n: Raw("[" * n + "]" * n))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.sampled_from(INTS),
                    st.floats(allow_nan=True, allow_infinity=True), texts, raw_numbers)
# What broke Baton before, drawn often: a plain value rarely holds one by chance.
dangerous = st.one_of(raw_numbers, deep, st.sampled_from(["\ud800", "x\udfff", "\x00", "\udc00\ud800"]),
                      st.sampled_from([float("inf"), float("-inf"), float("nan"), 2**64, -2**64, 10**30]))


def _nested(leaves):
    return st.recursive(leaves, lambda children: st.one_of(st.lists(children, max_size=4),
                                                           st.dictionaries(texts, children, max_size=4)),
                        max_leaves=10)


json_values = _nested(scalars)
hostile_values = st.one_of(dangerous, _nested(st.one_of(dangerous, scalars)), json_values)


def encode(value: Any) -> bytes:
    """JSON text of ``value`` with every ``Raw`` put in as it is (a ``NaN`` float becomes ``NaN``)."""
    raws: list[str] = []

    def swap(item):
        if isinstance(item, Raw):
            raws.append(str(item))
            return f"{_TOKEN}{len(raws) - 1}"
        if isinstance(item, dict):
            return {swap(k) if isinstance(k, Raw) else k: swap(v) for k, v in item.items()}
        if isinstance(item, list):
            return [swap(v) for v in item]
        return item

    text = json.dumps(swap(value))
    for index in reversed(range(len(raws))):
        text = text.replace(f'"{_TOKEN}{index}"', raws[index])
    return text.encode("utf-8", "surrogatepass")


USERS = ["demo", "ann", "bob"]
GROUPS = ["sales", "support"]


@dataclass
class World:
    """The tenant's real ids, so that fuzzed calls reach rows as well as refusals."""

    instance_ids: list[int] = field(default_factory=list)
    task_ids: list[int] = field(default_factory=list)
    definition_ids: list[Any] = field(default_factory=list)
    binding_ids: list[int] = field(default_factory=list)
    config_ids: list[int] = field(default_factory=list)
    webhook_ids: list[str] = field(default_factory=list)
    protected_key_ids: list[int] = field(default_factory=list)

    def known(self, param: str) -> list[Any]:
        return {"instance_id": self.instance_ids, "task_id": self.task_ids, "definition_id": self.definition_ids,
                "process_id": self.definition_ids, "binding_id": self.binding_ids, "config_id": self.config_ids,
                "webhook_id": self.webhook_ids, "to_definition_id": self.definition_ids,
                "from_definition_id": self.definition_ids,
                # operator work (task.assign, conversation.assign, the inbox filters): real-looking names too
                "user": USERS, "assignee": [*USERS, "me", None], "candidate_group": GROUPS}.get(param, [])


def _param_value(world: World, name: str):
    known = world.known(name)
    options = [hostile_values, st.sampled_from(INTS)]
    if known:
        options.append(st.sampled_from(known))
    if name == "instance_ids" and world.instance_ids:  # process.migrate: a list of the tenant's ids
        options.append(st.lists(st.sampled_from(world.instance_ids), min_size=1, max_size=5))
    if name == "wait_ms":  # a long poll is allowed to wait: keep each example short
        return st.integers(-5, 50)
    return st.one_of(*options)


def rpc_params(world: World, methods: dict[str, list[str]], method: str):
    names = methods.get(method) or ["id"]
    named = st.fixed_dictionaries({}, optional={name: _param_value(world, name) for name in names})
    extra = st.dictionaries(texts, hostile_values, max_size=2)
    return st.one_of(named, named, named, st.builds(lambda a, b: {**a, **b}, named, extra),
                     hostile_values, st.just(MISSING))


def rpc_request(world: World, methods: dict[str, list[str]]):
    """One request object: mostly well-formed with hostile params, sometimes a broken envelope."""
    def build(method, params, request_id, version, extra):
        item: dict[str, Any] = {"jsonrpc": version, "method": method}
        if params is not MISSING:
            item["params"] = params
        if request_id is not MISSING:
            item["id"] = request_id
        item.update(extra)
        if method == "apikey.revoke" and isinstance(params, dict) and params.get("key_id") in world.protected_key_ids:
            params["key_id"] = 0  # never revoke the keys the suite itself calls with
        return item

    method = st.one_of(st.sampled_from(sorted(methods)), st.sampled_from(sorted(methods)), texts, scalars)
    return method.flatmap(lambda m: st.builds(
        build, st.just(m), rpc_params(world, methods, m if isinstance(m, str) else ""),
        st.one_of(st.integers(-2**64, 2**64), texts, st.none(), raw_numbers, st.floats(), st.just(MISSING)),
        st.one_of(st.just("2.0"), st.just("2.0"), st.just("2.0"), scalars),
        st.dictionaries(st.sampled_from(["extra", "trace", "method2"]), hostile_values, max_size=1)))


def method_body(world: World, methods: dict[str, list[str]], method: str):
    """A body calling ``method``: one request with hostile (or real) params, or a small batch of them."""
    def build(params, request_id):
        if isinstance(params, dict) and method == "apikey.revoke" and params.get("key_id") in world.protected_key_ids:
            params = {**params, "key_id": 0}
        item: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": request_id}
        if params is not MISSING:
            item["params"] = params
        return item

    one = st.builds(build, rpc_params(world, methods, method), st.integers(1, 10**6))
    return st.one_of(one.map(encode), one.map(encode), one.map(encode), st.lists(one, min_size=2, max_size=4).map(encode))


def rpc_body(world: World, methods: dict[str, list[str]]):
    """A whole body: one request, a batch (empty, small, past the limit), or bytes that are not JSON."""
    one = rpc_request(world, methods)
    return st.one_of(
        one.map(encode), one.map(encode), one.map(encode),
        st.lists(one, min_size=1, max_size=6).map(encode),
        st.just([]).map(encode),
        st.integers(101, 130).map(lambda n: encode([{"jsonrpc": "2.0", "method": "auth.whoami", "id": i}
                                                    for i in range(n)])),
        hostile_values.map(encode),
        st.binary(max_size=40),
        deep.map(lambda d: (str(d)).encode()),
    )


def object_body(fields: dict[str, Any]):
    """A body for the HTTP doors: an object with the door's fields (hostile or plausible), or anything."""
    named = st.fixed_dictionaries({}, optional=fields)
    return st.one_of(named.map(encode), named.map(encode),
                     st.dictionaries(texts, hostile_values, max_size=4).map(encode),
                     hostile_values.map(encode), st.binary(max_size=40), st.just(b""))


def webhook_bodies():
    return object_body({"amount": hostile_values, "customer": texts, "note": hostile_values})


def webchat_bodies():
    plausible = st.one_of(texts, st.sampled_from(["chat-1", "chat-2"]))
    return object_body({"chat_id": st.one_of(plausible, hostile_values), "text": st.one_of(texts, hostile_values),
                        "user_id": st.one_of(texts, hostile_values), "username": st.one_of(texts, hostile_values)})


def callback_bodies():
    result = st.one_of(st.dictionaries(st.sampled_from(["decision", "response", "reason", "amount", "x"]),
                                       hostile_values, max_size=4), hostile_values)
    return object_body({"result": result, "other": hostile_values})


CONTENT_TYPES = ["application/json", "application/json; charset=utf-8", "text/plain",
                 "application/x-www-form-urlencoded", "application/vnd.api+json", ""]


@dataclass
class Judge:
    """Checks every answer and counts what it saw."""

    strict: bool = True  # raise at the first bad answer (the test, so Hypothesis shrinks it); else count
    requests: int = 0
    internal: int = 0
    server_errors: int = 0
    bad_shape: int = 0
    failures: list[str] = field(default_factory=list)

    def _fail(self, what: str) -> None:
        if self.strict:
            raise AssertionError(what)
        if len(self.failures) < 20:
            self.failures.append(what)

    def http(self, response, what: str) -> None:
        """A non-RPC endpoint's answer: 2xx JSON, or an error in ``{"error": {"code", "message"}}``."""
        self.requests += 1
        if response.status_code >= 500:
            self.server_errors += 1
            self._fail(f"{what}: HTTP {response.status_code} {response.text[:200]}")
        if response.status_code >= 400:
            try:
                error = response.json()["error"]
                ok = isinstance(error["code"], str) and isinstance(error["message"], str)
            except (ValueError, KeyError, TypeError):
                ok = False
            if not ok:
                self.bad_shape += 1
                self._fail(f"{what}: not the JSON error shape: {response.status_code} {response.text[:200]}")
            elif error["code"] == "internal":
                self.internal += 1
                self._fail(f"{what}: internal {response.text[:200]}")

    def rpc(self, response, what: str) -> None:
        """A JSON-RPC answer (or a batch of them): no 5xx, no ``internal``, each one well-formed."""
        self.requests += 1
        if response.status_code >= 500:
            self.server_errors += 1
            self._fail(f"{what}: HTTP {response.status_code} {response.text[:200]}")
            return
        if response.status_code == 204:
            return
        try:
            body = response.json()
        except ValueError:
            self.bad_shape += 1
            self._fail(f"{what}: not JSON: {response.status_code} {response.text[:200]}")
            return
        for answer in body if isinstance(body, list) else [body]:
            error = answer.get("error") if isinstance(answer, dict) else None
            well_formed = isinstance(answer, dict) and answer.get("jsonrpc") == "2.0" and "id" in answer and (
                ("result" in answer) != (error is not None))
            if error is not None:
                well_formed = well_formed and isinstance(error.get("code"), int) and isinstance(
                    error.get("message"), str) and isinstance(error.get("data"), dict)
            if not well_formed:
                self.bad_shape += 1
                self._fail(f"{what}: malformed answer {str(answer)[:200]}")
            elif error is not None and error["data"].get("reason") == "internal":
                self.internal += 1
                self._fail(f"{what}: internal {str(answer)[:300]}")

    def summary(self) -> dict[str, int]:
        return {"requests": self.requests, "internal": self.internal, "server_errors": self.server_errors,
                "bad_shape": self.bad_shape}


class Target:
    """A tenant on a running server (``tests.harness.BatonServer``) set up to be fuzzed: a webhook
    process with a user task, a web-chat channel with a process that keeps talking, headless tasks
    with their callback tokens (a real receiver plays the CRM), and the keys to call with."""

    def __init__(self, server, receiver):
        import requests

        from tests.harness import Api, bpmn

        self.server, self.http = server, requests.Session()
        admin_key = server.create_tenant(f"fuzz-{uuid.uuid4().hex[:8]}")
        self.checker = Api(server.base_url, admin_key)
        fuzz_key = self.checker.call("apikey.create", name="fuzz", permissions=["*"])
        self.chat_key = self.checker.call("apikey.create", name="chat", permissions=["conversation.send"])
        self.fuzzer = Api(server.base_url, fuzz_key["api_key"])
        world = self.world = World()
        world.protected_key_ids = [fuzz_key["key_id"], self.chat_key["key_id"],
                                   self.checker.call("auth.whoami")["key_id"]]
        self.chat_key = self.chat_key["api_key"]

        deployed = self.checker.deploy(bpmn("camunda_profile.bpmn"), code="fuzz-approval")
        self.webhook_url = deployed["webhooks"][0]["url"]
        world.webhook_ids.append(deployed["webhooks"][0]["webhook_id"])
        world.definition_ids += [deployed["definition_id"], "fuzz-approval"]
        for n in range(3):
            world.instance_ids.append(self.http.post(self.webhook_url, json={"n": n}, timeout=30).json()["instance_id"])

        channel = self.checker.call("channel.create", type="webchat", name="fuzz-site",
                                    webhook_url="http://127.0.0.1:9/chat")  # nothing listens: sends nothing
        self.config_id = channel["config_id"]
        world.config_ids.append(self.config_id)
        chat = self.checker.deploy(bpmn("chat_collect.bpmn").replace("__CHANNEL__", "fuzz-site"), code="fuzz-chat")
        world.definition_ids += [chat["definition_id"], "fuzz-chat"]
        first = self.webchat(encode({"chat_id": "chat-1", "text": "hello"}), "application/json")
        world.binding_ids.append(first.json()["binding_id"])
        world.instance_ids.append(first.json()["instance_id"])

        xml = bpmn("approval_form.bpmn").replace(
            '<camunda:property name="buttons" value="approve,reject" />',
            '<camunda:property name="buttons" value="approve,reject" />'
            f'<camunda:property name="crm_webhook" value="{receiver.url}/crm" />')
        headless = self.checker.deploy(xml, code="fuzz-headless")
        world.definition_ids += [headless["definition_id"], "fuzz-headless"]
        for _ in range(6):
            world.instance_ids.append(self.checker.call("process.start", definition_id="fuzz-headless",
                                                        variables={"customer": "c", "order": 1})["instance_id"])
        self.callbacks = [(event["task_id"], event["callback_token"])
                          for event in (r.json() for r in receiver.wait_for(6) if r.path == "/crm")]
        world.task_ids += [task_id for task_id, _ in self.callbacks]
        world.task_ids += [t["task_id"] for t in self.checker.call("task.list", per_page=100)["items"]]

    def rpc(self, body: bytes):
        return self.http.post(self.server.base_url + "/v1/rpc", data=body, timeout=60,
                              headers={"Content-Type": "application/json", "X-API-Key": self.fuzzer.key})

    def webhook(self, body: bytes, content_type: str, webhook_id: str | None = None):
        url = self.webhook_url if webhook_id is None else f"{self.server.base_url}/webhooks/inbound/{webhook_id}"
        return self.http.post(url, data=body, headers={"Content-Type": content_type}, timeout=60)

    def webchat(self, body: bytes, content_type: str):
        return self.http.post(f"{self.server.base_url}/channels/webchat/{self.config_id}/inbound", data=body,
                              headers={"Content-Type": content_type, "X-API-Key": self.chat_key}, timeout=60)

    def callback(self, task_id: int, token: str, body: bytes, content_type: str):
        return self.http.post(f"{self.server.base_url}/tasks/{task_id}/callback", data=body, timeout=60,
                              headers={"Content-Type": content_type, "X-Callback-Token": token})

    def tenant_still_answers(self) -> None:
        """task.list, process.list and every known instance's process.status answer (no -32603)."""
        self.checker.call("task.list", per_page=100)
        self.checker.call("task.list", status="in_progress", per_page=100)
        for page in (1, 2):
            self.checker.call("process.list", per_page=100, page=page)
        for instance_id in self.world.instance_ids:
            self.checker.call("process.status", instance_id=instance_id)
