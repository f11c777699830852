"""The coordinator node. Its hot modules run compiled when `make install` built them for this
very source, and interpreted otherwise (app/compiled.py)."""

from app import compiled as _compiled

_compiled.install()
