"""Core statements that run either through SQLAlchemy or straight on a DBAPI connection.

Only public SQLAlchemy APIs are used (the compiled SQL, its bind parameters, the types' processors).
SQLAlchemy's execution context costs ~40 us of CPU per statement and its Connection/pool/
transaction objects ~100 us per transaction; for the common webhook start (three statements in
one transaction) that was about half of the server's CPU for the accept on SQLite. On PostgreSQL
the statements run on psycopg's connection the same way (with a dict of named parameters). ``Statement``
compiles a Core statement once per dialect and runs it on the DBAPI cursor with SQLAlchemy's own
bind and result processors and Python-side column defaults, so the rows written are the same
(tests/unit/engine/store/test_writes.py compares them).
"""
from __future__ import annotations


class Statement:
    """A Core INSERT/UPDATE/DELETE/SELECT (``core``), compiled once per dialect for ``run`` on a
    DBAPI connection; executors that hold a SQLAlchemy connection execute ``core`` itself.

    ``writes``: whether it changes rows (an INSERT/UPDATE/DELETE, or a SELECT whose CTEs do):
    a transaction in autocommit may run only one such statement (``writes.short_transaction``).
    """

    def __init__(self, statement, *, writes: bool | None = None):
        self.core = statement
        self.writes = bool(getattr(statement, "is_dml", False)) if writes is None else writes
        self._compiled: dict = {}

    def _prepare(self, dialect):
        prepared = self._compiled.get(dialect)
        if prepared is None:
            compiled = self.core.compile(dialect=dialect)
            # Positional (SQLite's qmark) or named (psycopg's pyformat: a dict of parameters).
            names = compiled.positiontup
            if names is None:
                names = {name: name for name in compiled.bind_names.values()}
                if any(f"%({name})s" not in compiled.string for name in names):
                    raise TypeError("Statement needs plain bind names with a named paramstyle")
            binds = {name: bind.type.dialect_impl(dialect).bind_processor(dialect)
                     for name, bind in compiled.binds.items()}
            fixed = {name: bind.effective_value for name, bind in compiled.binds.items() if not bind.required}
            # Python-side defaults (created_at=utcnow, attempts=0 ...), as SQLAlchemy fills them in.
            defaults = []
            for column in (*compiled.insert_prefetch, *compiled.update_prefetch):
                default = column.default if compiled.isinsert else column.onupdate
                if default is None or not (default.is_callable or default.is_scalar):
                    raise TypeError(f"Statement.run cannot fill the default of {column}")
                if column.key not in names:
                    raise TypeError(f"Statement.run cannot fill the default of {column}")
                defaults.append((column.key, default))
            results = [column.type.dialect_impl(dialect).result_processor(dialect, None)
                       for column in self.core.exported_columns]
            prepared = (compiled.string, names if isinstance(names, dict) else tuple(names), binds,
                        tuple(defaults), fixed, results)
            self._compiled[dialect] = prepared
        return prepared

    def run(self, dbapi_connection, dialect, params: dict) -> tuple[list[tuple], int]:
        """Run it on a DBAPI connection: the rows it returns (SELECT or RETURNING), processed as
        SQLAlchemy would, and how many rows it changed."""
        sql, names, binds, defaults, fixed, results = self._prepare(dialect)
        values = {**fixed, **params}
        for key, default in defaults:
            if key not in params:
                values[key] = default.arg(None) if default.is_callable else default.arg
        if isinstance(names, dict):
            args = {}
            for name, placeholder in names.items():
                value, process = values[name], binds.get(name)
                args[placeholder] = process(value) if process is not None else value
        else:
            args = []
            for name in names:
                value = values[name]
                process = binds.get(name)
                args.append(process(value) if process is not None else value)
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(sql, args)
            rows = cursor.fetchall() if cursor.description else []
            rowcount = cursor.rowcount
        finally:
            cursor.close()
        if results and rows and any(results):
            rows = [tuple(p(v) if p is not None else v for p, v in zip(results, row)) for row in rows]
        return rows, rowcount
