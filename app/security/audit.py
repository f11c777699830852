"""The audit trail: one JSON line per security decision or change on `coordinator.audit`.

Authentication failures, authorization denials, ACL and credential changes and admin
mutations each write one line with the principal, the source address, the action, the
resource and the outcome, so a log shipper can index them without parsing prose.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

audit_log = logging.getLogger("coordinator.audit")


def audit(
    action: str,
    outcome: str,
    *,
    principal: str | None,
    source: str | None,
    resource: str | None = None,
    **detail: Any,
) -> None:
    """`outcome`: "success", "failure" (authentication) or "denied" (authorization)."""
    if not audit_log.isEnabledFor(logging.INFO):
        return
    line = {
        "ts": round(time.time(), 3),
        "action": action,
        "outcome": outcome,
        "principal": principal,
        "source": source,
        "resource": resource,
    }
    line.update(detail)
    audit_log.info(json.dumps(line, default=str, separators=(",", ":")))
