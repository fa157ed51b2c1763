"""Baton's application factory: configuration, database, endpoints, workers (the command line
it registers is ``cli``).

``create_app`` is the only reader of configuration (environment variables, or a dict in tests);
it builds the objects that need settings and hands the values to them.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, fields, replace
from datetime import timedelta
from pathlib import Path

import click
from flask import Flask
from flask_migrate import Migrate, upgrade

import cli
from baton import __version__
from engine import json_values
from engine.jobs.processes import default_count
from engine.jobs.wakers import LongPoll, Wakers
from engine.store.db import db, is_postgres
from engine.store.driver import configure_postgres, configure_sqlite
from engine.store.unit_of_work import Units
from engine.store.workflows import SpecCache
from engine.telemetry import logs, metrics_dir

ROOT = Path(__file__).resolve().parent
# The instance folder (the embedded default's database): beside the code in a checkout (make run),
# in the directory it is started from when Baton is installed (pip install .), never in site-packages.
INSTANCE = ROOT / "instance" if (ROOT / "pyproject.toml").is_file() else Path.cwd() / "instance"


@dataclass(frozen=True)
class Settings:
    """Every setting, its environment variable and its default (docs/operations.md lists them)."""

    database_url: str = f"sqlite:///{INSTANCE / 'baton.db'}"  # DATABASE_URL
    public_url: str = "http://127.0.0.1:5000"                       # BATON_PUBLIC_URL
    workers: int | None = None                                      # BATON_WORKERS (unset: see worker_threads)
    worker_processes: int | None = None                             # BATON_WORKER_PROCESSES (unset: see serve_processes)
    serve_processes: int | None = None                              # BATON_SERVE_PROCESSES (unset: by cores)
    call_threads: int = 8                                           # BATON_CALL_THREADS (outbound calls)
    db_pool_size: int = 20                                          # BATON_DB_POOL_SIZE (connections a process keeps)
    allow_private_urls: bool = False                                # BATON_ALLOW_PRIVATE_URLS
    max_body_bytes: int = 1_048_576                                 # BATON_MAX_BODY_BYTES
    script_timeout_s: float = 5.0                                   # BATON_SCRIPT_TIMEOUT_S
    script_memory_mb: int = 256                                     # BATON_SCRIPT_MEMORY_MB
    script_hosts: int = 8                                           # BATON_SCRIPT_HOSTS (per worker process, >= its threads)
    script_host_runs: int = 5000                                    # BATON_SCRIPT_HOST_RUNS (then a fresh host)
    script_user: str = "nobody"                                     # BATON_SCRIPT_USER (hosts' user when run as root)
    script_namespace: str = "auto"                                  # BATON_SCRIPT_NAMESPACE (auto, on, off: bubblewrap)
    job_lease_s: float = 30.0                                       # BATON_JOB_LEASE_S
    http_retry_base_s: float = 5.0                                  # BATON_HTTP_RETRY_BASE_S
    poll_s: float = 5.0                                             # BATON_POLL_S
    shutdown_grace_s: float = 20.0                                  # BATON_SHUTDOWN_GRACE_S (SIGTERM: jobs may finish)
    delivery_retry_scale: float = 1.0                               # BATON_DELIVERY_RETRY_SCALE (tests: tiny)
    delivery_probe_s: float = 15.0                                  # BATON_DELIVERY_PROBE_S (a failing destination's probe)
    ai_base_url: str | None = None                                  # BATON_AI_BASE_URL (unset: the built-in)
    ai_model: str | None = None                                     # BATON_AI_MODEL
    ai_api_key: str | None = None                                   # BATON_AI_API_KEY
    ai_timeout_s: float = 30.0                                      # BATON_AI_TIMEOUT_S (per model call)
    ai_retries: int = 2                                             # BATON_AI_RETRIES (the client's retries)
    telegram_api_url: str = "https://api.telegram.org"              # BATON_TELEGRAM_API_URL
    viber_api_url: str = "https://chatapi.viber.com/pa"             # BATON_VIBER_API_URL
    whatsapp_api_url: str = "https://graph.facebook.com/v21.0"      # BATON_WHATSAPP_API_URL
    media_max_bytes: int = 20_971_520                               # BATON_MEDIA_MAX_BYTES (GET /v1/media: one file)
    whatsapp_max_body_bytes: int = 3 * 1_048_576                    # BATON_WHATSAPP_MAX_BODY_BYTES (Meta's up to 3 MB)
    # Pacing: messages per second (0: no limit) each messenger is sent, shared by every worker process.
    telegram_per_bot_per_s: float = 30.0                            # BATON_TELEGRAM_PER_BOT_PER_S
    telegram_per_chat_per_s: float = 1.0                            # BATON_TELEGRAM_PER_CHAT_PER_S
    telegram_per_group_per_min: float = 20.0                        # BATON_TELEGRAM_PER_GROUP_PER_MIN
    whatsapp_per_number_per_s: float = 80.0                         # BATON_WHATSAPP_PER_NUMBER_PER_S
    whatsapp_per_chat_per_s: float = 1.0                            # BATON_WHATSAPP_PER_CHAT_PER_S
    viber_per_bot_per_s: float = 50.0                               # BATON_VIBER_PER_BOT_PER_S
    viber_per_chat_per_s: float = 0.0                               # BATON_VIBER_PER_CHAT_PER_S

    @property
    def worker_threads(self) -> int:
        """Engine threads of a process running its workers as threads (the server on one core,
        ``BATON_WORKER_PROCESSES=0``, gunicorn): ``BATON_WORKERS``, unset 2 (one computes while
        the other waits on the database or the sandbox)."""
        return self.workers if self.workers is not None else 2

    @property
    def serving_processes(self) -> int:
        """Processes of ``serve`` that each serve HTTP (granian) and run their own engine threads:
        ``BATON_SERVE_PROCESSES``, unset one per core from two cores on; 0 when
        ``BATON_WORKER_PROCESSES`` is set (that chooses the one-process server, waitress, with
        worker threads or supervised worker processes) or on one core."""
        if self.worker_processes is not None:
            return 0
        if self.serve_processes is not None:
            return self.serve_processes
        return default_count(os.cpu_count() or 1)

    @property
    def child_threads(self) -> int:
        """Engine threads of each worker process the server supervises: ``BATON_WORKERS``, unset 1,
        as ``flask worker``. The processes are the parallelism; a second engine thread in one only
        shares its GIL (measured: docs/operations.md, "Worker processes supervised by the server")."""
        return self.workers if self.workers is not None else 1

    @property
    def messenger_limits(self) -> dict:
        """Each messenger's pacing (``engine.chat.pacing.Limits``)."""
        from engine.chat.pacing import Limits
        return {"telegram": Limits(self.telegram_per_bot_per_s, self.telegram_per_chat_per_s,
                                   self.telegram_per_group_per_min / 60.0),
                "whatsapp": Limits(self.whatsapp_per_number_per_s, self.whatsapp_per_chat_per_s),
                "viber": Limits(self.viber_per_bot_per_s, self.viber_per_chat_per_s)}

    @property
    def messenger_api_urls(self) -> dict[str, str]:
        return {"telegram": self.telegram_api_url, "viber": self.viber_api_url,
                "whatsapp": self.whatsapp_api_url}
    max_long_polls: int = 4                                         # BATON_MAX_LONG_POLLS (external.fetch_and_lock waiting at once)
    rate_limit_per_key: float = 0.0                                 # BATON_RATE_LIMIT_PER_KEY (requests/s; 0: off)
    rate_limit_per_webhook: float = 0.0                             # BATON_RATE_LIMIT_PER_WEBHOOK (requests/s; 0: off)
    retention_days: float = 30.0                                    # BATON_RETENTION_DAYS (0: keep everything)
    retention_every_s: float = 3600.0                               # BATON_RETENTION_EVERY_S (how often it runs)
    retention_batch: int = 200                                      # BATON_RETENTION_BATCH (instances per transaction)
    log_level: str = "WARNING"                                      # BATON_LOG_LEVEL
    log_format: str = "text"                                        # BATON_LOG_FORMAT (text or json)
    metrics_token: str | None = None                                # BATON_METRICS_TOKEN (bearer for /metrics; unset: open)
    audit_retention_days: float = 365.0                             # BATON_AUDIT_RETENTION_DAYS (0: keep the audit log)
    secret_key: str | None = None                                   # BATON_SECRET_KEY (keys, comma-separated, current first)
    secret_key_file: str = str(INSTANCE / "secret.key")             # BATON_SECRET_KEY_FILE (unset key: created there)

    ENV = {"database_url": "DATABASE_URL"}

    @property
    def audit_retention(self) -> timedelta | None:
        """How long audit entries are kept; None: for ever (``BATON_AUDIT_RETENTION_DAYS=0``)."""
        return timedelta(days=self.audit_retention_days) if self.audit_retention_days > 0 else None

    @property
    def retention(self) -> timedelta | None:
        """How long ended instances are kept; None: for ever (``BATON_RETENTION_DAYS=0``)."""
        return timedelta(days=self.retention_days) if self.retention_days > 0 else None

    @classmethod
    def from_mapping(cls, values: dict) -> "Settings":
        converted = {}
        for field in fields(cls):
            env_name = cls.ENV.get(field.name, f"BATON_{field.name.upper()}")
            raw = values.get(field.name, values.get(env_name))
            if raw is None or raw == "":
                continue
            if field.type == "bool":
                raw = str(raw).lower() in ("1", "true", "yes", "on")
            elif field.type in ("int", "int | None"):
                raw = int(raw)
            elif field.type == "float":
                raw = float(raw)
            converted[field.name] = raw
        return cls(**converted)

    def as_environment(self) -> dict[str, str]:
        """These settings as the environment variables ``from_mapping`` reads (for child processes)."""
        env = {}
        for field in fields(self):
            value = getattr(self, field.name)
            if value is not None:
                name = self.ENV.get(field.name, f"BATON_{field.name.upper()}")
                env[name] = ("1" if value else "0") if isinstance(value, bool) else str(value)
        return env


class Baton:
    """What the app holds besides Flask: settings, the job wakers, and once workers start, the
    machinery they run (``app.extensions["baton"]``).

    The sandbox, the runner and the outbound client exist only in a process that runs workers
    (a web-only process needs none of them), sized to its worker threads.
    """

    def __init__(self, app: Flask, settings: Settings, units: Units, wakers, specs, rate_limits):
        self.app = app
        self.settings = settings
        self.units = units
        self.wakers = wakers
        self.specs = specs
        self.rate_limits = rate_limits
        self.sandbox = None
        self.outbound = None
        self.ai = None
        self.pool = None
        self.call_pool = None
        self.listener = None
        self.processes = None

    def start_workers(self, threads: int | None = None, *, embedded: bool = False):
        """Start this process's workers: ``threads`` engine threads (``flask worker``), else as
        the settings say. ``embedded``: the one-server commands (``serve``, ``run``), where an
        unset ``BATON_WORKER_PROCESSES`` means worker processes picked by the cores
        (``engine.jobs.processes.default_count``); elsewhere (gunicorn) unset means threads."""
        processes = self.settings.worker_processes
        if processes is None:
            processes = default_count(os.cpu_count() or 1) if embedded else 0
        if threads is None and processes > 0:
            return self.start_worker_processes(processes)
        threads = self.settings.worker_threads if threads is None else threads
        if self.pool is not None or threads <= 0:
            return self.pool
        from engine.jobs.kinds import CALL_KINDS
        from engine.jobs.queue import KindFilter
        from engine.jobs.worker import WorkerPool

        handlers = self._handlers(threads)
        settings = self.settings
        # Jobs that wait on another server get their own threads: a slow model or receiver must not
        # hold up the engine (timers, starts, other chats), nor need a sandbox process per thread.
        calls = KindFilter(CALL_KINDS, include=True)
        split = settings.call_threads > 0
        common = dict(units=self.units, wakers=self.wakers, lease_seconds=settings.job_lease_s,
                      poll_seconds=settings.poll_s)
        self.pool = WorkerPool(self.app, handlers, threads=threads, kinds=replace(calls, include=False) if split else None,
                               **common)
        self.pool.start()
        if settings.retention is not None:
            from engine import retention

            with self.app.app_context(), self.units.begin("worker") as uow:
                retention.schedule(uow)
        if split:
            self.call_pool = WorkerPool(self.app, handlers, threads=settings.call_threads, kinds=calls, name="call",
                                        claim_batch=1,  # a batch would wait for each slow call in turn
                                        **common)
            self.call_pool.start()
        with self.app.app_context():
            if is_postgres():  # NOTIFY from other processes wakes both pools
                from engine.jobs.listener import NotifyListener

                self.listener = NotifyListener(db.engine.url, self.wakers)
                self.listener.start()
        return self.pool

    def _handlers(self, threads: int) -> dict:
        """The handler of every job kind, built around this process's sandbox, HTTP client and model."""
        from ai import build_provider
        from engine.chat.ai_turns import AiTurnRunner
        from engine.chat.messenger_deliveries import MessengerCalls
        from engine.chat.pacing import Pacing
        from engine.chat.messengers.registry import MESSENGERS
        from engine.jobs.kinds import AI_TURN, DELIVER, OPERATOR, RETENTION, THROWN, TIMER_START
        from engine.outbound.delivery_runner import DeliveryRunner
        from engine.outbound.http import OutboundHttp
        from engine.outbound.http_tasks import HttpTaskRunner
        from engine.retention import RetentionRunner
        from engine.runtime.routing import ThrownRunner
        from engine.runtime.runner import Runner
        from engine.runtime.timer_starts import TimerStartRunner
        from engine.sandbox import Sandbox, SandboxScriptEngine
        from engine.sandbox.scripts import plan_launch
        settings = self.settings
        launch = plan_launch(settings.script_namespace, settings.script_user)
        logging.getLogger("baton.sandbox").info("Script hosts: %s.", launch.note)
        # Hosts belong to one tenant each: room for a warm host of a few tenants, and always one
        # per engine thread, so that a script never waits for a host.
        self.sandbox = Sandbox(timeout_s=settings.script_timeout_s, memory_mb=settings.script_memory_mb,
                               hosts=max(threads, settings.script_hosts), runs_per_host=settings.script_host_runs,
                               launch=launch, tenant_required=True)
        self.outbound = OutboundHttp(allow_private=settings.allow_private_urls)
        self.ai = build_provider(base_url=settings.ai_base_url, model=settings.ai_model,
                                 api_key=settings.ai_api_key, timeout_s=settings.ai_timeout_s,
                                 retries=settings.ai_retries)
        script_engine, specs = SandboxScriptEngine(self.sandbox), self.specs
        runner = Runner(script_engine, specs, advance_contributors(settings.public_url),
                        check_url=self.outbound.check_url)
        handlers = {kind: runner for kind in runner.kinds}
        handlers[TIMER_START] = TimerStartRunner()
        handlers[THROWN] = ThrownRunner()
        handlers[OPERATOR] = HttpTaskRunner(self.sandbox, script_engine, specs, self.outbound,
                                            retry_base_s=settings.http_retry_base_s, lease_s=settings.job_lease_s)
        handlers[DELIVER] = DeliveryRunner(self.outbound, retry_scale=settings.delivery_retry_scale,
                                           probe_s=settings.delivery_probe_s, lease_s=settings.job_lease_s,
                                           channel_calls=MessengerCalls(MESSENGERS, settings.messenger_api_urls,
                                                                        Pacing(settings.messenger_limits)))
        handlers[AI_TURN] = AiTurnRunner(self.ai)
        # Within half a lease per run (the rest right after), so that no other worker takes it over.
        handlers[RETENTION] = RetentionRunner(settings.retention, every_s=settings.retention_every_s,
                                              batch_size=settings.retention_batch, budget_s=settings.job_lease_s / 2,
                                              audit_retention=settings.audit_retention)
        return handlers

    def start_worker_processes(self, count: int):
        """``count`` supervised ``flask worker`` children instead of threads here."""
        from engine.jobs.processes import WorkerProcesses, child_command

        settings = self.settings
        if self.processes is not None or settings.child_threads <= 0:
            return self.processes
        # The children count their metrics into this server's directory (engine.telemetry.metrics_dir).
        env = metrics_dir.for_children({**os.environ, **replace(settings, worker_processes=0).as_environment()})
        self.processes = WorkerProcesses(count, child_command(settings.child_threads), env, ROOT)
        self.processes.start()
        if settings.database_url.startswith("sqlite"):  # PostgreSQL wakes them with NOTIFY
            self.wakers.add(self.processes.wake)
        return self.processes

    def wake(self) -> None:
        for pool in (self.pool, self.call_pool):
            if pool is not None:
                pool.wake()

    def stop(self, grace_s: float | None = None) -> None:
        """Stop the workers gracefully: no new claims; the jobs in hand may finish within ``grace_s``
        (default ``BATON_SHUTDOWN_GRACE_S``); what is left is released, due at once, for another
        worker (docs/operations.md, "Stopping")."""
        grace_s = self.settings.shutdown_grace_s if grace_s is None else grace_s
        deadline = time.monotonic() + grace_s
        pools = [pool for pool in (self.call_pool, self.pool) if pool is not None]
        for pool in pools:
            pool.stop_claiming()
        if self.listener is not None:
            self.listener.stop()
            self.listener = None
        if self.processes is not None:
            self.wakers.remove(self.processes.wake)
            self.processes.stop(grace_s)  # each child stops the same way, with the same grace
            self.processes = None
        for pool in pools:
            pool.finish(deadline)
        self.pool = self.call_pool = None
        for part in (self.sandbox, self.outbound, self.ai):
            if part is not None:
                part.close()


def advance_contributors(public_url: str) -> tuple:
    """What an advance writes besides the instance and its job (``engine.runtime.advance``): each
    module's own contributor, in the order their rows are locked (dialog rows before the
    conversation's, which the outbox writes)."""
    from engine.chat.ai_dialogs import DialogRows
    from engine.chat.outbox import OutboxRows
    from engine.outbound.http_tasks import OperatorCalls
    from engine.runtime.external_task_rows import ExternalTaskRows
    from engine.runtime.human_task_rows import HumanTaskRows
    from engine.runtime.routing import ThrownEvents
    from engine.runtime.subscription_rows import SubscriptionRows
    from engine.runtime.timer_jobs import TimerJobs

    return (DialogRows(), OutboxRows(), HumanTaskRows(public_url), TimerJobs(), OperatorCalls(), ExternalTaskRows(),
            SubscriptionRows(), ThrownEvents())


def quiet_spiff_loggers() -> None:
    """SpiffWorkflow logs every task state change, and while its loggers' own level is unset (0,
    below INFO) it builds each record's extras from the task data and, for a workflow record,
    from every task of the tree, whatever the handlers' level. Set them to the process's level,
    at least INFO (at BATON_LOG_LEVEL=DEBUG they stay unset)."""
    level = logging.getLogger().getEffectiveLevel()
    if level > logging.DEBUG:
        for name in ("spiff.task", "spiff.workflow", "spiff.data", "spiff.dmn"):
            logging.getLogger(name).setLevel(max(level, logging.INFO))
    # And its tasks build a state change's record only when it is written (bpmn.spiff_internals).
    from bpmn import spiff_internals

    spiff_internals.log_state_changes_only_when_written()


def create_app(config: dict | None = None) -> Flask:
    settings = Settings.from_mapping({**os.environ, **(config or {})})
    if settings.retention_days < 0 or settings.retention_every_s <= 0 or settings.retention_batch < 1:
        raise ValueError("BATON_RETENTION_DAYS must be 0 (keep everything) or more, BATON_RETENTION_EVERY_S "
                         "more than 0 and BATON_RETENTION_BATCH at least 1.")
    if settings.audit_retention_days < 0:
        raise ValueError("BATON_AUDIT_RETENTION_DAYS must be 0 (keep the audit log) or more.")
    if settings.db_pool_size < 1:
        raise ValueError("BATON_DB_POOL_SIZE must be at least 1.")
    if settings.serve_processes is not None and settings.serve_processes < 0:
        raise ValueError("BATON_SERVE_PROCESSES must be 0 (one process, waitress) or more.")
    if settings.script_hosts < 1 or settings.script_host_runs < 1:
        raise ValueError("BATON_SCRIPT_HOSTS and BATON_SCRIPT_HOST_RUNS must be at least 1.")
    if settings.script_namespace not in ("auto", "on", "off"):
        raise ValueError("BATON_SCRIPT_NAMESPACE must be auto, on or off.")
    if os.geteuid() == 0:  # script hosts drop to this user: a missing one stops the start, not a script
        from engine.errors import BatonError
        from engine.sandbox.scripts import resolve_user
        try:
            resolve_user(settings.script_user)
        except BatonError as exc:
            raise ValueError(exc.message) from None
    logs.configure(settings.log_level, settings.log_format)
    quiet_spiff_loggers()  # every process runs workflows: the server's RPC calls too, not only workers
    app = Flask(__name__, instance_path=str(INSTANCE))
    app.config.update(
        SQLALCHEMY_DATABASE_URI=settings.database_url,
        # No ping per checkout: PostgreSQL pings only connections that sat idle (configure_postgres).
        # As many pooled connections as the process's threads use at once, the last used first: a new
        # PostgreSQL connection is a backend started with cold caches (docs/operations.md#database-connections).
        # JSON columns keep the door's limits; a stored value outside them reads as a marker (engine.json_values).
        SQLALCHEMY_ENGINE_OPTIONS={"pool_pre_ping": False, "pool_size": settings.db_pool_size, "pool_use_lifo": True,
                                   "json_serializer": json_values.write_stored,
                                   "json_deserializer": json_values.read_stored},
        MAX_CONTENT_LENGTH=settings.max_body_bytes,
        BATON_WHATSAPP_MAX_BODY_BYTES=settings.whatsapp_max_body_bytes,
    )
    app.json.sort_keys = False  # answers keep the order the code builds them in
    wakers = Wakers()
    units = Units(wakers)  # every unit of work of this process wakes them after its commit
    app.extensions["baton.units"] = units
    if settings.database_url.startswith("sqlite:///"):
        Path(settings.database_url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    db.init_app(app)
    Migrate(app, db, directory=str(ROOT / "migrations"), render_as_batch=True)
    with app.app_context():
        if db.engine.dialect.name == "sqlite":
            configure_sqlite(db.engine)
        elif db.engine.dialect.name == "postgresql":
            configure_postgres(db.engine)
        keys = _secret_keys(settings)
        upgrade(directory=str(ROOT / "migrations"))
        _check_secret_keys(keys)

    from channels.http import register_http
    from channels.messengers import bp as messengers_bp
    from channels.media import bp as media_bp
    from channels.metrics import bp as metrics_bp
    from channels import request_layer
    from channels.task_callback import bp as task_callback_bp
    from channels.webchat import bp as webchat_bp
    from channels.webhook import WebhookDoor
    from channels.webhook import bp as webhook_bp
    from console import console_blueprint
    from rpc.endpoint import rpc_blueprint
    from engine.rate_limits import RateLimits
    from rpc.methods import build_methods

    with app.app_context():
        rate_limits = RateLimits(per_key=settings.rate_limit_per_key, per_webhook=settings.rate_limit_per_webhook,
                                 engine=db.engine)
    register_http(app)
    app.register_blueprint(metrics_bp)
    app.register_blueprint(webhook_bp)
    app.register_blueprint(webchat_bp)
    app.register_blueprint(messengers_bp)
    app.register_blueprint(media_bp)
    app.register_blueprint(task_callback_bp)
    specs = SpecCache()  # parsed specs by definition (never stale): one per process, shared by all
    long_poll = LongPoll(settings.max_long_polls)
    wakers.add(long_poll)  # a commit that opens external tasks wakes this process's long polls
    app.register_blueprint(rpc_blueprint(build_methods(), settings, units, specs=specs, long_poll=long_poll,
                                         rate_limits=rate_limits, version=__version__))
    app.register_blueprint(console_blueprint())
    if not app.debug:  # (debug answers are indented: Flask's path gives them)
        with app.app_context():
            app.wsgi_app = WebhookDoor(app.wsgi_app, Units(wakers, engine=db.engine), settings.max_body_bytes,
                                       rate_limits)
    request_layer.install(app)  # outermost: request ids and request metrics for every door
    app.extensions["baton"] = Baton(app, settings, units, wakers, specs, rate_limits)
    cli.register(app)
    if _is_flask_run_serving():
        cli.ensure_default_tenant(app)
        app.extensions["baton"].start_workers(embedded=True)
    return app


def _secret_keys(settings: Settings):
    """Install the key ring that seals stored secrets (``engine.store.sealing``) before the
    migrations run (0025 seals what was stored in the clear)."""
    from engine.store import sealing

    try:
        loaded = sealing.load(settings.secret_key, Path(settings.secret_key_file))
    except sealing.SecretKeyError as exc:
        raise click.ClickException(str(exc)) from None
    sealing.install(loaded.ring)
    return loaded


def _check_secret_keys(loaded) -> None:
    """Refuse to start with a ring that lacks a key the database needs (a wrong or missing
    ``BATON_SECRET_KEY``); write the embedded default's new key file and say so."""
    from engine.store import sealing

    try:
        with db.engine.begin() as connection:
            if loaded.new_file is not None and loaded.new_file.exists():
                # Another process of this server started at the same moment and wrote it first.
                ring = sealing.KeyRing(sealing.read_key_file(loaded.new_file),
                                       source=f"the key file {loaded.new_file}", path=loaded.new_file)
                sealing.install(ring)
                loaded = sealing.Loaded(ring)
            if not _is_command("secrets", "forget"):  # (which drops what the lost key sealed)
                sealing.check(connection, loaded)
            ring = loaded.ring
            if loaded.new_file is not None:
                try:
                    sealing.write_key_file(loaded.new_file, [ring.keys[0]], exclusive=True)
                except FileExistsError:  # another process of this server wrote it first: use that one
                    ring = sealing.KeyRing(sealing.read_key_file(loaded.new_file), source=f"the key file "
                                           f"{loaded.new_file}", path=loaded.new_file)
                    sealing.install(ring)
                    sealing.check(connection, sealing.Loaded(ring))
                else:
                    ring = sealing.KeyRing(list(ring.keys), source=f"the key file {loaded.new_file}",
                                           path=loaded.new_file)  # (a rotation changes the file: followed)
                    sealing.install(ring)
                    logging.getLogger("baton.secrets").warning(
                        "Created the secret key file %s (mode 0600): it encrypts the stored secrets. Keep it "
                        "with the database's backups; set BATON_SECRET_KEY on other machines "
                        "(docs/operations.md, \"Security model\").", loaded.new_file)
            sealing.register(connection, ring)
    except sealing.SecretKeyError as exc:
        raise click.ClickException(str(exc)) from None


def _is_command(*words: str) -> bool:
    """Whether the command line being run is ``flask ... <words> ...`` (the app loads before click
    has picked the command, so the arguments are all there is to read)."""
    import sys

    argv = sys.argv[1:]
    return any(argv[i:i + len(words)] == list(words) for i in range(len(argv)))


def _is_flask_run_serving() -> bool:
    """True inside ``flask run``'s serving process (not the reloader's watcher, not other commands)."""
    context = click.get_current_context(silent=True)
    if context is None or context.info_name != "run":
        return False
    reloading = context.params.get("reload") or context.find_root().params.get("debug")
    return not reloading or os.environ.get("WERKZEUG_RUN_MAIN") == "true"


def create_serving_app() -> Flask:
    """The app of each process of the default ``serve`` (``BATON_SERVE_PROCESSES``), run by granian
    in a process of its own: it serves HTTP and runs ``BATON_WORKERS`` engine threads (unset 1),
    stopped gracefully when the process ends (``channels.http_server``)."""
    from channels import http_server

    http_server.follow_parent()
    app = create_app()
    baton = app.extensions["baton"]
    baton.start_workers(baton.settings.child_threads)
    http_server.at_process_end(baton.stop)
    return app


def create_server_app() -> Flask:
    """For gunicorn (``gunicorn 'app:create_server_app()'``): the app with its workers started.

    Gunicorn handles SIGTERM itself (it stops its worker processes within its ``graceful_timeout``);
    as a worker process exits, Baton's workers stop gracefully too (``Baton.stop``, at exit)."""
    import atexit

    app = create_app()
    app.extensions["baton"].start_workers()
    atexit.register(app.extensions["baton"].stop)
    return app

