"""The ``baton`` command that ``pip install .`` installs.

Server commands run as ``flask --app app <command>`` runs them (the same code, ``cli.py``):
``serve``, ``worker``, ``tenant create``, ``db upgrade``, ``retention``. Client commands call a
running server's JSON-RPC API through ``baton.client`` (they load nothing of the server), at
``BATON_URL`` (default http://127.0.0.1:5000) with ``BATON_API_KEY``: ``deploy``, ``start``,
``status``, ``tasks``, ``complete``. A refusal prints the server's message and exits 1, never a traceback.
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import click

from baton import __version__
from baton.client import DEFAULT_URL, Client, RpcError

# The server's commands, with the line ``baton --help`` shows (each one's own --help: its options).
SERVER_COMMANDS = {
    "serve": "Serve HTTP with the background workers, until SIGTERM or Ctrl-C.",
    "worker": "Run background workers in this process (scale-out on PostgreSQL).",
    "tenant": "Manage tenants: 'baton tenant create NAME' prints its admin API key.",
    "db": "The database schema: 'baton db upgrade' (every start upgrades too).",
    "retention": "Remove ended instances and what hangs off them, now.",
}


class BatonCommand(click.Group):
    """Client commands of its own, and the server's, which load the app only when run."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *SERVER_COMMANDS])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in SERVER_COMMANDS:
            return _server_command(name)
        return super().get_command(ctx, name)


def _server_command(name: str) -> click.Command:
    @click.command(name, help=f"{SERVER_COMMANDS[name]} Options: baton {name} --help.", add_help_option=False,
                   context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
    @click.pass_context
    def run(ctx: click.Context) -> None:
        from flask.cli import FlaskGroup

        import app

        server = FlaskGroup(name="baton", create_app=app.create_app, add_default_commands=False,
                            add_version_option=False, load_dotenv=False, set_debug_flag=False)
        server.main(args=[name, *ctx.args], prog_name="baton")

    return run


@click.group(cls=BatonCommand, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="baton")
def main() -> None:
    """Baton, a BPMN process engine service: the server's commands, and client commands for a
    running server (BATON_URL, default http://127.0.0.1:5000; BATON_API_KEY)."""


# --- client commands -----------------------------------------------------------------------------

def _client() -> Client:
    key = os.environ.get("BATON_API_KEY", "").strip()
    if not key:
        raise click.ClickException("BATON_API_KEY is not set: set it to an API key of the server (its first "
                                   "start prints one; 'baton tenant create NAME' makes a tenant with one).")
    return Client(os.environ.get("BATON_URL", "").strip() or DEFAULT_URL, key)


def _refused(exc: RpcError) -> click.ClickException:
    """The server's message, and which setting to look at when it is about the connection or the key."""
    message = exc.message
    if exc.reason == "unreachable" and not os.environ.get("BATON_URL", "").strip():
        message += f" BATON_URL is not set; {DEFAULT_URL} is its default."
    elif exc.reason == "unreachable":
        message += " Check BATON_URL."
    elif exc.reason == "unauthorized":
        message += " Check BATON_API_KEY."
    return click.ClickException(message)


def _call(method, *args, **kwargs) -> Any:
    try:
        return method(*args, **kwargs)
    except RpcError as exc:
        raise _refused(exc) from None


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def _variables(pairs: tuple[str, ...], json_file: str | None) -> dict[str, Any]:
    """``--json FILE`` (an object; ``-`` reads standard input), then each ``--var name=value`` over it:
    a value that reads as JSON is that value (``70``, ``true``, ``[1,2]``, ``"007"``), else text."""
    variables: dict[str, Any] = {}
    if json_file is not None:
        text = sys.stdin.read() if json_file == "-" else _read(json_file)
        try:
            variables = json.loads(text)
        except ValueError as exc:
            raise click.BadParameter(f"{json_file} is not JSON: {exc}.", param_hint="--json") from None
        if not isinstance(variables, dict):
            raise click.BadParameter(f"{json_file} must hold a JSON object of variables.", param_hint="--json")
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name:
            raise click.BadParameter(f"'{pair}' is not name=value.", param_hint="--var")
        try:
            variables[name] = json.loads(value)
        except ValueError:
            variables[name] = value
    return variables


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise click.ClickException(f"Cannot read {path}: {exc}.") from None


VAR = click.option("--var", "pairs", multiple=True, metavar="NAME=VALUE",
                   help="A variable; a value that reads as JSON is that value, else text. Repeatable.")
JSON_FILE = click.option("--json", "json_file", metavar="FILE", help="A JSON object of variables ('-': stdin).")


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--dmn", multiple=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="A DMN file whose decisions the process calls. Repeatable.")
@click.option("--form", multiple=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="A Camunda Forms JSON file its user tasks name. Repeatable.")
@click.option("--code", help="The code to deploy under (default: the process's id).")
def deploy(file: str, dmn: tuple[str, ...], form: tuple[str, ...], code: str | None) -> None:
    """Deploy a BPMN FILE: prints each definition it gives, or every refusal as FILE:LINE ELEMENT: MESSAGE
    (exit 1)."""
    params: dict[str, Any] = {"bpmn": _read(file), "dmn": [_read(path) for path in dmn] or None, "code": code}
    if form:  # only when given: a server without Camunda Forms refuses the param by name
        params["forms"] = [_read(path) for path in form]
    try:
        deployed = _client().call("definition.deploy", **{k: v for k, v in params.items() if v is not None})
    except RpcError as exc:
        if exc.reason != "invalid_params" or not exc.data.get("errors"):
            raise _refused(exc) from None
        for error in exc.data["errors"]:
            click.echo(_located(error, file, dmn), err=True)
        sys.exit(1)
    for definition in deployed.get("definitions") or [deployed]:
        click.echo(f"Deployed {definition['code']} version {definition['version']} "
                   f"(definition_id {definition['definition_id']}).")
        for webhook in definition.get("webhooks", []):
            click.echo(f"  webhook of {webhook['start_event_id']}: {webhook['url']}")
        for channel in definition.get("channels", []):
            click.echo(f"  channel of {channel['start_event_id']}: config_id {channel['config_id']}")


_DMN_FILE = re.compile(r"^DMN file (\d+)\b")


def _located(error: dict[str, Any], bpmn_file: str, dmn_files: tuple[str, ...]) -> str:
    """``file:line element: message``; a DMN file's refusal names that file."""
    message = str(error.get("message") or "")
    source = bpmn_file
    found = _DMN_FILE.match(message)
    if found and 1 <= int(found.group(1)) <= len(dmn_files):
        source = dmn_files[int(found.group(1)) - 1]
    where = f"{source}:{error['line']}" if error.get("line") else source
    return f"{where} {error['element_id']}: {message}" if error.get("element_id") else f"{where}: {message}"


@main.command()
@click.argument("code")
@VAR
@JSON_FILE
def start(code: str, pairs: tuple[str, ...], json_file: str | None) -> None:
    """Start the latest version of the process CODE; prints the answer (its instance_id)."""
    variables = _variables(pairs, json_file)
    _echo_json(_call(_client().process.start, code, variables=variables or None))


@main.command()
@click.argument("instance_id", type=click.IntRange(min=1), metavar="ID")
def status(instance_id: int) -> None:
    """An instance's status, variables, error and what it waits at."""
    _echo_json(_call(_client().process.status, instance_id))


@main.command()
@click.option("--status", "status_", type=click.Choice(["in_progress", "completed", "cancelled"]),
              default="in_progress", show_default=True)
@click.option("--instance", "instance_id", type=click.IntRange(min=1), help="Only this instance's tasks.")
@click.option("--page", type=click.IntRange(min=1), default=1, show_default=True)
def tasks(status_: str, instance_id: int | None, page: int) -> None:
    """Human tasks, newest first (a page of 100)."""
    _echo_json(_call(_client().task.list, status=status_, instance_id=instance_id, page=page, per_page=100))


@main.command()
@click.argument("task_id", type=click.IntRange(min=1), metavar="TASK")
@VAR
@JSON_FILE
def complete(task_id: int, pairs: tuple[str, ...], json_file: str | None) -> None:
    """Complete the human task TASK with a result (its form's fields)."""
    result = _variables(pairs, json_file)
    _echo_json(_call(_client().task.complete, task_id, result=result or None))


if __name__ == "__main__":
    main()
