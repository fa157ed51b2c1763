"""The database: the handle and its SQLite rules (``db``), the tables (``models``), the one write path (``writes``), list pages (``paging``), and instance state (``workflows``)."""
