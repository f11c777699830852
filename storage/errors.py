"""Typed storage errors: callers never see raw driver exceptions.

Modelled on pyeventsourcing's persistence errors: one base class the runtime can catch, and a few
subclasses for the cases it must tell apart (fencing, transient unavailability, constraint
violations, configuration that disagrees with what the store already holds).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import exc as sa_exc


class StorageError(Exception):
    """Base class: the store could not do what was asked. Nothing was committed."""


class OperationalError(StorageError):
    """Transient trouble: connection lost or refused, database locked, timeout. May be retried."""


class IntegrityError(StorageError):
    """A constraint was violated (e.g. an offset written twice). Points at a bug or a zombie."""


class FencedError(StorageError):
    """The writer does not hold the partition's lease at the epoch it claimed; nothing was written.

    `epoch` is the epoch the writer claimed; `owner_node_id`/`current_epoch` are what the lease
    row held at the time of the check (None when there is no lease row at all).
    """

    def __init__(
        self,
        partition: int,
        epoch: int | None = None,
        owner_node_id: int | None = None,
        current_epoch: int | None = None,
    ) -> None:
        super().__init__(
            f"partition {partition} fenced: writer epoch {epoch}, "
            f"lease owner {owner_node_id} at epoch {current_epoch}"
        )
        self.partition = partition
        self.epoch = epoch
        self.owner_node_id = owner_node_id
        self.current_epoch = current_epoch


class ConfigMismatch(StorageError):
    """A setting disagrees with the value the store was created with (e.g. log_partitions)."""


class WriterStopped(StorageError):
    """The LogWriter was stopped before this submission could be written."""


@contextmanager
def translate_errors() -> Iterator[None]:
    """Re-raise driver/SQLAlchemy exceptions (and OS-level connection errors) as the types above."""
    try:
        yield
    except StorageError:
        raise
    except sa_exc.IntegrityError as e:
        raise IntegrityError(_describe(e)) from e
    except (
        sa_exc.OperationalError,
        sa_exc.InterfaceError,
        sa_exc.TimeoutError,
        sa_exc.DisconnectionError,
        OSError,
        TimeoutError,
    ) as e:
        raise OperationalError(_describe(e)) from e
    except sa_exc.SQLAlchemyError as e:
        raise StorageError(_describe(e)) from e


def _describe(e: BaseException) -> str:
    # DBAPIError's str() embeds the statement and (some) parameters: keep only the driver's words.
    orig = getattr(e, "orig", None)
    cause = orig if isinstance(orig, BaseException) else e
    return f"{type(cause).__name__}: {cause}"


class RecordTooLarge(StorageError):
    """A record is larger than the log accepts (COORD_MAX_RECORD_BYTES); nothing was written."""


class WriterBusy(StorageError):
    """The writer's queue is full (COORD_MAX_QUEUED_RECORDS); retry shortly."""
