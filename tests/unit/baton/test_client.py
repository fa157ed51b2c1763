"""baton.client without a server: its typed calls are the method table's (generated from its OpenRPC
document, never stale), it imports nothing of the server, and it reads its configuration as documented."""
from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import baton
from baton import codegen
from baton.client import Client, methods
from baton.client.transport import OMIT, without_omitted
from rpc import openrpc
from rpc.methods import build_methods

ROOT = Path(__file__).resolve().parents[3]
TABLE = build_methods()
DOCUMENT = openrpc.document(TABLE, version=baton.__version__, url="")


def test_the_typed_calls_are_generated_from_the_tables_openrpc_document():
    written = (ROOT / "baton" / "client" / "methods.py").read_text(encoding="utf-8")

    assert written == codegen.generate(DOCUMENT), "baton/client/methods.py is stale: run `make client`"


@pytest.mark.parametrize("name", list(TABLE))
def test_every_method_has_a_typed_call_with_its_documented_params(name):
    group, method = name.split(".", 1)
    call = getattr(getattr(Client("http://127.0.0.1:1", "key"), group), method)
    signature = inspect.signature(call)
    declared = TABLE[name].params

    assert list(signature.parameters) == [param.name for param in declared if param.required] + \
        [param.name for param in declared if not param.required]
    for param in declared:
        required = signature.parameters[param.name].default is inspect.Parameter.empty
        assert required == param.required, (name, param.name)


def test_importing_the_client_loads_nothing_of_the_server():
    server = ("app", "cli", "engine", "rpc", "bpmn", "channels", "console", "ai", "flask", "sqlalchemy",
              "SpiffWorkflow")
    probe = ("import sys, baton.client; print(sorted({m.split('.')[0] for m in sys.modules} & set(%r)))" % (server,))

    loaded = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)

    assert loaded.stdout.strip() == "[]"


def test_an_optional_param_left_at_none_is_left_out_and_a_nullable_one_only_when_omitted():
    assert without_omitted({"a": 1, "b": None}) == {"a": 1}
    assert without_omitted({"secret": None}, ("secret",)) == {"secret": None}
    assert without_omitted({"secret": OMIT}, ("secret",)) == {}


def test_the_environment_names_what_is_missing():
    with pytest.raises(ValueError, match="BATON_API_KEY is not set"):
        Client.from_environment({"BATON_URL": "http://127.0.0.1:5000"})
    assert Client.from_environment({"BATON_API_KEY": "bt_x"}).url == "http://127.0.0.1:5000"
    assert Client.from_environment({"BATON_API_KEY": "bt_x", "BATON_URL": "http://h:1/"}).url == "http://h:1"


def test_the_generated_module_names_every_group():
    groups = {name.split(".")[0] for name in TABLE}

    assert groups <= set(vars(methods.Methods(None)))
