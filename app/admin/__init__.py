"""The admin service: what the REST API and the console can do, in Kafka's terms.

`AdminService` (groups, static members, offsets, topics, the cluster view) and its
`SecurityAdmin` (ACLs, SCRAM users) answer JSON documents or raise a typed outcome
(`errors`); `api/` turns those into HTTP answers in one place (api/errors.py).
"""

from app.admin.errors import (
    AdminError,
    Conflict,
    InvalidGroupId,
    InvalidRequest,
    NotCoordinator,
    NotFound,
    TooLarge,
    Unavailable,
)
from app.admin.security import SecurityAdmin
from app.admin.service import AdminService
from app.admin.views import assignment_view, subscription_view

__all__ = [
    "AdminError",
    "AdminService",
    "Conflict",
    "InvalidGroupId",
    "InvalidRequest",
    "NotCoordinator",
    "NotFound",
    "SecurityAdmin",
    "TooLarge",
    "Unavailable",
    "assignment_view",
    "subscription_view",
]
