"""The SQL adapter behind storage's ports (storage/ports.py): SQLAlchemy Core on SQLite or
PostgreSQL, the backend's differences decided by one Dialect (storage/sql/dialect.py)."""
