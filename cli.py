"""Baton's command line (``flask --app app ...``): ``tenant create``, ``retention``, ``worker`` and
``serve``, registered on the app by ``create_app``. The commands read configuration only from the
settings ``create_app`` built (``app.extensions["baton"].settings``); each command owns the units of
work it runs (``app.extensions["baton.units"]``).
"""
from __future__ import annotations

import logging
import signal
import threading
from datetime import timedelta

import click
from flask import Flask



def ensure_default_tenant(app: Flask) -> None:
    """On the first start (no tenant at all), create ``default`` and print its admin key once."""
    from sqlalchemy import select
    from sqlalchemy.exc import IntegrityError

    from engine.auth import create_tenant
    from engine.errors import ConflictError
    from engine.store.models import Tenant

    with app.app_context():
        try:
            with app.extensions["baton.units"].begin("cli") as uow:
                if uow.execute(select(Tenant.id).limit(1)).first() is not None:
                    return
                _, key = create_tenant(uow, "default")
        except (ConflictError, IntegrityError):  # another process won the race
            return
        print("Created tenant 'default'. Its admin API key (shown once):", flush=True)
        print(key, flush=True)


def purge_now(units, kept: timedelta, *, batch_size: int = 200, rest: float = 1.0,
              audit_kept: timedelta | None = None):
    """Run a whole retention purge now (``engine.retention.Purging``), one unit of work per batch;
    its report."""
    import time

    from engine import retention

    purging = retention.Purging(kept, batch_size=batch_size, rest=rest, audit_retention=audit_kept)
    while True:
        with units.begin("cli") as uow:
            more = purging.step(uow)
        if not more:
            return purging.report
        time.sleep(purging.rest_s())


def register(app: Flask) -> None:
    """The ``flask --app app`` commands: ``tenant create``, ``retention``, ``worker``, ``serve``."""
    @app.cli.group("tenant")
    def tenant_group():
        """Manage tenants."""

    @tenant_group.command("create")
    @click.argument("name")
    def tenant_create(name):
        """Create a tenant; prints its admin API key alone on the last line."""
        from engine.auth import create_tenant
        from engine.errors import BatonError

        try:
            with app.extensions["baton.units"].begin("cli") as uow:
                tenant, key = create_tenant(uow, name)
                if app.extensions["baton"].settings.retention is not None:
                    from engine import retention

                    retention.schedule(uow)  # the first tenant: retention has something to look after now
        except BatonError as exc:
            raise click.ClickException(exc.message) from exc
        click.echo(f"Created tenant '{tenant.name}' (id {tenant.id}). Admin API key:")
        click.echo(key)

    @app.cli.group("secrets")
    def secrets_group():
        """The key that seals stored secrets (docs/operations.md, "Security model")."""

    @secrets_group.command("new-key")
    def secrets_new_key():
        """Print a new key for BATON_SECRET_KEY."""
        from engine.store import sealing

        click.echo(sealing.new_key())

    @secrets_group.command("rotate")
    def secrets_rotate():
        """Seal every stored secret under a new key while the server runs: with the key file, a new
        key is put first in it (the old one stays accepted); with BATON_SECRET_KEY=NEW,OLD, under NEW."""
        _rotate(app)

    @secrets_group.command("forget")
    @click.option("--yes", is_flag=True, help="Confirm: the sealed secrets are dropped for good.")
    def secrets_forget(yes):
        """For a lost key: drop every stored secret so that Baton starts under a new key (messenger
        channels are disabled until connected again; webhooks and web-chat channels lose their secret)."""
        if not yes:
            raise click.ClickException("This drops every stored secret; run it again with --yes.")
        from engine.store import sealing

        with app.extensions["baton.units"].begin("cli") as uow:
            dropped = sealing.forget_all(uow.connection())
            sealing.register(uow.connection(), sealing.ring())
            _audit(uow, "secrets.forget", sealing.ring().current_id)
        click.echo(f"Dropped {dropped} stored secret(s); reconnect the messenger channels and set the webhook "
                   f"and web-chat secrets again.")

    @app.cli.command("retention")
    @click.option("--days", type=click.FloatRange(min=0, min_open=True), default=None,
                  help="Remove what ended more than this many days ago [BATON_RETENTION_DAYS].")
    def retention_command(days):
        """Remove ended instances and what hangs off them, old sent deliveries, expired idempotency
        records and inbound receipts, now; prints what it removed."""
        from engine import retention
        from engine.store.db import iso

        settings = app.extensions["baton"].settings
        kept = timedelta(days=days) if days is not None else settings.retention
        if kept is None:
            click.echo("Retention is off (BATON_RETENTION_DAYS=0): nothing removed. Use --days to remove once.")
            return
        report = purge_now(app.extensions["baton.units"], kept, batch_size=settings.retention_batch,
                           audit_kept=settings.audit_retention)
        longest = max(report.batch_seconds, default=0.0)
        click.echo(f"Removed what ended before {iso(report.cutoff)} in {len(report.batch_seconds)} "
                   f"transaction(s), the longest {longest * 1000:.0f} ms:")
        for table in retention.TABLES:
            click.echo(f"{table} {report.removed[table]}")

    @app.cli.command("worker")
    @click.option("--threads", default=1, show_default=True, type=click.IntRange(1, 64),
                  help="Worker threads in this process.")
    @click.option("--wake-from-stdin", is_flag=True, hidden=True,
                  help="Started by a server with BATON_WORKER_PROCESSES: woken by it, exit when it exits.")
    def worker(threads, wake_from_stdin):
        """Run background workers in this process until stopped (SIGTERM, Ctrl-C: gracefully)."""
        baton = app.extensions["baton"]
        pool = baton.start_workers(threads)
        stop_requested = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop_requested.set())
        if wake_from_stdin:
            from engine.jobs.processes import follow_parent

            follow_parent(pool.wake_one, baton.wake, stop_requested.set)
        click.echo(f"Baton worker running with {threads} thread(s).")
        try:
            while not stop_requested.wait(1.0):
                pass
        except KeyboardInterrupt:
            pass
        baton.stop()

    @app.cli.command("serve")
    @click.option("--host", default="127.0.0.1", show_default=True)
    @click.option("--port", default=5000, show_default=True, type=int)
    @click.option("--threads", default=8, show_default=True, help="HTTP threads (of each serving process).")
    def serve(host, port, threads):
        """Serve HTTP until SIGTERM or Ctrl-C, then stop the workers gracefully (``Baton.stop``); exit 0.

        On two cores or more (``BATON_SERVE_PROCESSES``, unset: one per core) granian's processes
        each serve HTTP and run their own workers (``channels/http_server.py``); with
        ``BATON_WORKER_PROCESSES`` set, ``BATON_SERVE_PROCESSES=0`` or one core, waitress serves
        from this process, with worker threads here or supervised worker processes."""
        from waitress import create_server

        from channels.http_server import JsonErrorChannel
        from engine.store.db import db

        _check_can_listen(host, port)
        ensure_default_tenant(app)
        baton = app.extensions["baton"]
        settings = baton.settings
        if settings.serving_processes > 0:
            from app import create_serving_app
            from channels.http_server import serve_processes

            db.engine.dispose()  # from here on this process only watches its serving processes
            click.echo(f"Baton listening on http://{host}:{port} ({settings.serving_processes} processes)", err=True)
            serve_processes(create_serving_app, host=host, port=port, processes=settings.serving_processes,
                            threads=threads, log_level=settings.log_level)
            return
        baton.start_workers(embedded=True)
        # waitress warns "Task queue depth is N" for each request that finds every HTTP thread
        # busy: a line per request under any burst, written by its one I/O thread.
        logging.getLogger("waitress.queue").setLevel(logging.ERROR)
        server = create_server(app, host=host, port=port, threads=threads, ident="baton",
                               # Flask answers oversized bodies (JSON 413) from Content-Length; waitress
                               # only stops absurd ones (JSON too: channels/http_server.py).
                               max_request_body_size=max(16 * app.config["MAX_CONTENT_LENGTH"], 16 << 20))
        # waitress's loop closes the server and returns on SystemExit (as on KeyboardInterrupt).
        signal.signal(signal.SIGTERM, _raise_system_exit)
        click.echo(f"Baton listening on http://{host}:{port}", err=True)
        server.channel_class = JsonErrorChannel  # requests waitress cannot parse: the JSON error shape
        server.print_listen("Serving on http://{}:{}")  # as waitress.serve does
        try:
            server.run()
            server.close()  # no new connections while the workers finish
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM while stopping: stop now
            baton.stop()


def _rotate(app: Flask) -> None:
    from engine.store import sealing

    ring = sealing.ring()
    if ring.path is not None:
        previous = ring.keys[0]
        new = sealing.decode_key(sealing.new_key())
        sealing.write_key_file(ring.path, [new, *ring.keys])  # running processes pick it up (KeyRing.refresh)
        ring.refresh()
    elif len(ring.keys) == 1:
        click.echo("BATON_SECRET_KEY holds one key: to rotate, set BATON_SECRET_KEY=NEW,OLD on every process "
                   "(NEW from `flask --app app secrets new-key`), then run this again; resealing under the "
                   "current key only.", err=True)
    with app.extensions["baton.units"].begin("cli") as uow:
        changed = sealing.reseal_all(uow.connection(), ring)
        _audit(uow, "secrets.rotate", ring.current_id)
    if ring.path is not None:
        sealing.write_key_file(ring.path, [ring.keys[0], previous])  # older keys than the last are dropped
        ring.refresh()
    click.echo(f"Sealed {changed} stored secret(s) under key {ring.current_id}.")


def _audit(uow, method: str, key_id: str) -> None:
    """A server-wide administration act, in the audit log of every tenant (actor: the OS user)."""
    import getpass

    from engine import audit

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    audit.record(uow, None, actor_type="cli", actor=user, key_id=None, method=method, target_kind="secrets",
                 target_id=key_id)


def _check_can_listen(host: str, port: int) -> None:
    """One line instead of the HTTP server's traceback (or granian's panic) when the address is taken."""
    import socket

    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind
            probe.bind((host, port))
    except OSError as exc:
        raise click.ClickException(f"Cannot listen on {host}:{port}: {exc.strerror or exc}. Is another server "
                                   "running there? Stop it, or choose another address with --host and --port.") from None


def _raise_system_exit(*_) -> None:
    raise SystemExit(0)
