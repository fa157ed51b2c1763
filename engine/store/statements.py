"""Core statements that run either through SQLAlchemy or straight on a DBAPI connection.

SQLAlchemy's execution context costs ~40 us of CPU per statement and its Connection/pool/
transaction objects ~100 us per transaction; for the common webhook start (three statements in
one transaction) that was about half of the server's CPU for the accept on SQLite. ``Statement``
compiles a Core statement once per dialect and runs it on the DBAPI cursor with SQLAlchemy's own
bind and result processors and Python-side column defaults, so the rows written are the same
(tests/unit/store/test_writes.py compares them).
"""
from __future__ import annotations


class Statement:
    """A Core INSERT/UPDATE/DELETE/SELECT (``core``), compiled once per dialect for ``run`` on a
    DBAPI connection; executors that hold a SQLAlchemy connection execute ``core`` itself."""

    def __init__(self, statement):
        self.core = statement
        self._compiled: dict = {}

    def _prepare(self, dialect):
        prepared = self._compiled.get(dialect)
        if prepared is None:
            compiled = self.core.compile(dialect=dialect)
            if compiled.positiontup is None:
                raise TypeError("Statement needs a positional paramstyle")
            binds = compiled._bind_processors
            # Python-side defaults (created_at=utcnow, attempts=0 ...), as SQLAlchemy fills them in.
            defaults = []
            for column in (*compiled.insert_prefetch, *compiled.update_prefetch):
                default = column.default if compiled.isinsert else column.onupdate
                if default is None or not (default.is_callable or default.is_scalar):
                    raise TypeError(f"Statement.run cannot fill the default of {column}")
                if column.key not in compiled.positiontup:
                    raise TypeError(f"Statement.run cannot fill the default of {column}")
                defaults.append((column.key, default))
            results = [entry[3]._cached_result_processor(dialect, None)
                       for entry in compiled._result_columns] if compiled._result_columns else []
            prepared = (compiled.string, tuple(compiled.positiontup), binds, tuple(defaults),
                        compiled.construct_params(_check=False), results)
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
