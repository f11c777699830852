"""What an admin call that cannot be done says, in Kafka's terms.

One exception class per kind of refusal, each standing for a family of Kafka error codes; the
message says why, for the operator. Nothing here knows HTTP: `api/errors.py` maps each class
to a status in one table, and the console and the CLI show the message.
"""

from __future__ import annotations


class AdminError(Exception):
    """An admin call that cannot be done; `message` says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequest(AdminError):
    """The request itself is wrong and fails however often it is sent: INVALID_REQUEST,
    INVALID_PARTITIONS (a topic cannot shrink), an invalid ACL binding or filter,
    UNACCEPTABLE_CREDENTIAL."""


class InvalidGroupId(InvalidRequest):
    """INVALID_GROUP_ID: the group id is empty."""


class NotFound(AdminError):
    """What the call names does not exist: GROUP_ID_NOT_FOUND, UNKNOWN_MEMBER_ID (a static
    member), UNKNOWN_TOPIC_OR_PARTITION, RESOURCE_NOT_FOUND (a group's records, a user's
    credential)."""


class Conflict(AdminError):
    """The resource's state refuses the act now: NON_EMPTY_GROUP, TOPIC_ALREADY_EXISTS, an
    Empty group with nothing to rebalance, offsets the group's generation refuses."""


class TooLarge(AdminError):
    """More elements in one request than a Kafka request may hold
    (COORD_MAX_REQUEST_ELEMENTS)."""


class Unavailable(AdminError):
    """Retriable, or not served by this node as it runs: COORDINATOR_NOT_AVAILABLE (no owner
    yet, a failed write), COORDINATOR_LOAD_IN_PROGRESS, SECURITY_DISABLED (no security
    manager)."""


class NotCoordinator(Exception):
    """NOT_COORDINATOR: the group's log partition (or the topic registry's) is owned by
    another node; ask it at `admin_url`, the admin URL it registered (None if it registered
    none). Not an AdminError: it is a direction, not a refusal.

    A plain exception, not a frozen dataclass: Starlette clears `exc.__traceback__` after the
    handler answered, which a frozen (slotted) dataclass refuses with a TypeError."""

    def __init__(self, node_id: int, admin_url: str | None) -> None:
        super().__init__(node_id, admin_url)
        self.node_id = node_id
        self.admin_url = admin_url
