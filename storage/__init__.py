"""The event log behind ports: storage/ports.py names what the node uses of its store, the
values it speaks live beside it (envelope.py, security.py, errors.py), and storage/sql/ is the
SQLite and PostgreSQL implementation (opened as storage.log.EventLog). The group-commit writer
(writer.py) runs on any RecordLog."""
