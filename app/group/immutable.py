"""`@immutable`: a frozen dataclass to the type checker, a fast one at run time.

`@dataclass(frozen=True)` makes every instance's `__init__` set each field through
`object.__setattr__` (a frozen class refuses its own `__setattr__`): about four times the cost
of a plain slots dataclass. The core's messages, results and records are made for every request
(a commit made eight of them: a tenth of its CPU), so they are built as plain slots dataclasses,
hashable like frozen ones (`unsafe_hash`), and mypy holds them frozen (`frozen_default`): an
assignment to a field is a type error, which `make lint` fails on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def immutable(cls: type[T]) -> type[T]:
    return dataclass(slots=True, unsafe_hash=True)(cls)
