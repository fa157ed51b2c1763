"""Operator properties of service tasks: what each enabled operator needs, checked at deploy.

``http``: ``url`` (a template; without ``{{ }}`` it must be an http(s) URL), ``method`` (GET, POST,
PUT, PATCH, DELETE, HEAD; default POST with a body, else GET), ``body`` (a template), ``headers``
(a JSON object of header name -> template), ``result_variable`` (a variable name), ``timeout_s``
(seconds, 1 to 60) and ``retries`` (0 to 10). Deploy never fetches the URL.

``send_message``: ``text`` (a template, required; sent to the instance's conversation),
``buttons`` (``id:Title, ...`` or ``Title, ...``: at most 100, ids and titles non-empty and unique;
what a messenger can carry is checked when the process is bound to its channel, engine.definitions)
and a file: ``attachment_url`` (a template), ``attachment_type`` (image, document) and
``attachment_size`` (bytes, a template; Viber's documents need it).

``ai_chat``: ``prompt`` (a template: the system prompt), ``knowledge`` (text, at most 200,000
characters), ``model`` (a model name at the configured endpoint, or ``builtin``), ``max_turns``
(1 to 1000, default 20), ``handoff_keywords`` (words or phrases separated by commas) and
``handoff_groups`` (the operator groups the model may hand the customer to, separated by commas).
"""
from __future__ import annotations

import json
from urllib.parse import urlsplit

from lxml import etree

from bpmn.allowlist import (AI_MAX_KEYWORD, AI_MAX_KNOWLEDGE, AI_MAX_MODEL_NAME, AI_MAX_TURNS, HTTP_METHODS,
                            HTTP_RETRIES, HTTP_TIMEOUT_S, MAX_MESSAGE_BUTTONS)
from bpmn.issues import Issues
from bpmn.profile import property_elements, read_message_buttons, read_message_template, template_problem
from engine.sandbox import check_template

HTTP_PROPERTIES = frozenset({"operator", "url", "method", "body", "headers", "result_variable",
                             "timeout_s", "retries"})


def check_http(element, properties: dict[str, str], issues: Issues) -> None:
    at = {prop.get("name"): prop for prop in property_elements(element)}

    def refuse(name: str, message: str) -> None:
        issues.add(element, f"serviceTask (http) {message}", at=at.get(name))

    url = (properties.get("url") or "").strip()
    if not url:
        refuse("url", "needs a 'url' property.")
    else:
        _check_template(url, "url", refuse)
        if "{{" not in url and not _is_http_url(url):
            refuse("url", f"url '{url}' must be an http:// or https:// URL.")
    method = properties.get("method")
    if method is not None and method.strip().upper() not in HTTP_METHODS:
        refuse("method", f"method '{method}' must be one of {', '.join(HTTP_METHODS)}.")
    if properties.get("body"):
        _check_template(properties["body"], "body", refuse)
    if properties.get("headers") is not None:
        _check_headers(properties["headers"], refuse)
    variable = properties.get("result_variable")
    if variable is not None and (not variable.strip().isidentifier() or variable.strip().startswith("__")):
        refuse("result_variable", f"result_variable '{variable}' must be a variable name.")
    _check_number(properties, "timeout_s", HTTP_TIMEOUT_S, float, refuse)
    _check_number(properties, "retries", HTTP_RETRIES, int, refuse)


def check_send_message(element, properties: dict[str, str], issues: Issues) -> None:
    at = {prop.get("name"): prop for prop in property_elements(element)}

    def refuse(name: str, message: str) -> None:
        issues.add(element, f"serviceTask (send_message) {message}", at=at.get(name))

    text = properties.get("text") or ""
    if not text.strip():
        refuse("text", "needs a 'text' property (the message, a template such as 'Hello {{ name }}').")
    else:
        _check_template(text, "text", refuse)
    if properties.get("buttons") is not None:
        problem = message_buttons_problem(read_message_buttons(properties))
        if problem:
            refuse("buttons", f"buttons '{properties['buttons'][:200]}': {problem} Write them as "
                              "'id:Title, id2:Title 2' or 'Title, Title 2'.")
    _check_attachment(properties, refuse)
    _check_message_template(properties, refuse)


ATTACHMENT_TYPES = ("image", "document")


def _check_attachment(properties: dict[str, str], refuse) -> None:
    """``attachment_url`` (a template; written out, an http(s) URL) needs ``attachment_type`` (image or
    document); ``attachment_size`` (a template; written out, a number of bytes) goes with them."""
    url = (properties.get("attachment_url") or "").strip()
    kind = properties.get("attachment_type")
    size = properties.get("attachment_size")
    if not url:
        for name in ("attachment_type", "attachment_size"):
            if properties.get(name) is not None:
                refuse(name, f"{name} needs an 'attachment_url' (the file's http(s) URL).")
        return
    _check_template(url, "attachment_url", refuse)
    if "{{" not in url and not _is_http_url(url):
        refuse("attachment_url", f"attachment_url '{url[:200]}' must be an http:// or https:// URL.")
    if kind not in ATTACHMENT_TYPES:
        refuse("attachment_type", f"attachment_type must be {' or '.join(ATTACHMENT_TYPES)}, not '{kind or ''}'.")
    if size is not None:
        _check_template(size, "attachment_size", refuse)
        if "{{" not in size and not (size.strip().isascii() and size.strip().isdigit() and int(size) > 0):
            refuse("attachment_size", f"attachment_size '{size[:50]}' must be a number of bytes.")


def _check_message_template(properties: dict[str, str], refuse) -> None:
    """``template``, ``template_language``, ``template_params`` (WhatsApp's message template, sent
    instead of the text when the 24-hour window is closed): a name, a language code, a JSON list of
    strings, each a template."""
    template = read_message_template(properties)
    if template is None:
        for name in ("template_language", "template_params"):
            if properties.get(name) is not None:
                refuse(name, f"{name} needs a 'template' property (the template's name).")
        return
    if isinstance(template["params"], str):
        refuse("template_params", "template_params must be a JSON list of strings, such as "
                                  "'[\"{{ external_username }}\", \"{{ order_id }}\"]'.")
        return
    problem = template_problem(template["name"], template["language"], template["params"])
    if problem:
        refuse(problem[0], problem[1])
        return
    for value in template["params"]:
        _check_template(value, "template_params", refuse)


def message_buttons_problem(buttons: list[dict[str, str]]) -> str | None:
    """What no channel can carry, whatever its type: none, too many, blank or repeated ids or titles
    (a title is what the customer picks and what comes back, so two alike could not be told apart)."""
    if not buttons:
        return "there are no buttons."
    if len(buttons) > MAX_MESSAGE_BUTTONS:
        return f"at most {MAX_MESSAGE_BUTTONS} buttons are allowed, not {len(buttons)}."
    if any(not button["id"] or not button["title"] for button in buttons):
        return "every button needs an id and a title (is there an empty entry or a colon with nothing after it?)."
    for key in ("id", "title"):
        values = [button[key] for button in buttons]
        repeated = sorted({value for value in values if values.count(value) > 1})
        if repeated:
            return f"the {key} '{repeated[0]}' is used twice."
    return None


def check_ai_chat(element, properties: dict[str, str], issues: Issues) -> None:
    at = {prop.get("name"): prop for prop in property_elements(element)}

    def refuse(name: str, message: str) -> None:
        issues.add(element, f"serviceTask (ai_chat) {message}", at=at.get(name))

    if any(etree.QName(child).localname.endswith("LoopCharacteristics") for child in element
           if isinstance(child.tag, str)):
        refuse("operator", "cannot loop: one ai_chat step holds the whole dialog.")
    if properties.get("prompt"):
        _check_template(properties["prompt"], "prompt", refuse)
    knowledge = properties.get("knowledge") or ""
    if len(knowledge) > AI_MAX_KNOWLEDGE:
        refuse("knowledge", f"knowledge is {len(knowledge)} characters long; at most {AI_MAX_KNOWLEDGE} are allowed.")
    model = properties.get("model")
    if model is not None and (not model.strip() or len(model.strip()) > AI_MAX_MODEL_NAME
                              or any(c.isspace() for c in model.strip())):
        refuse("model", f"model must be a model name without spaces, at most {AI_MAX_MODEL_NAME} characters "
                        "(or 'builtin').")
    _check_number(properties, "max_turns", AI_MAX_TURNS, int, refuse)
    raw = properties.get("handoff_keywords")
    if raw is not None:
        keywords = [k.strip() for k in raw.split(",")]
        if not all(keywords) or any(len(k) > AI_MAX_KEYWORD for k in keywords):
            refuse("handoff_keywords", f"handoff_keywords '{raw[:200]}' must be words or phrases (at most "
                                       f"{AI_MAX_KEYWORD} characters each) separated by commas.")
    raw = properties.get("handoff_groups")
    if raw is not None:
        groups = [g.strip() for g in raw.split(",")]
        if not all(groups) or any(len(g) > AI_MAX_KEYWORD for g in groups) or len(groups) > 20:
            refuse("handoff_groups", f"handoff_groups '{raw[:200]}' must be at most 20 group names (at most "
                                     f"{AI_MAX_KEYWORD} characters each) separated by commas.")


def _is_http_url(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme.lower() in ("http", "https") and bool(parts.netloc)


def _check_template(text: str, name: str, refuse, what: str | None = None) -> None:
    problem = check_template(text)
    if problem:
        refuse(name, f"{what or name} cannot be rendered: {problem.rstrip('.')}.")


def _check_headers(raw: str, refuse) -> None:
    try:
        headers = json.loads(raw)
    except ValueError:
        headers = None
    if not isinstance(headers, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                for k, v in headers.items()):
        refuse("headers", 'headers must be a JSON object of header names to text, such as '
                          '{"Authorization": "Bearer {{ token }}"}.')
        return
    for name, value in headers.items():
        if not name.strip() or any(c in name for c in ":\r\n "):
            refuse("headers", f"header name '{name}' is not a valid HTTP header name.")
        _check_template(value, "headers", refuse, what=f"header '{name}'")


def _check_number(properties, name: str, bounds: tuple[int, int], kind, refuse) -> None:
    raw = properties.get(name)
    if raw is None:
        return
    low, high = bounds
    try:
        value = kind(raw.strip())
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        noun = "whole number" if kind is int else "number"
        refuse(name, f"{name} '{raw}' must be a {noun} from {low} to {high}.")
