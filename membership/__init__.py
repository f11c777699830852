"""Group membership for Python services over Kafka's classic group protocol: split work across
worker processes, elect one leader, survive restarts without reshuffling (static membership,
KIP-345; SkipAssignment for a returning static leader, KIP-814). Works against this coordinator
and against Apache Kafka brokers. README: "Membership SDK"."""

from membership.blocking import Blocking
from membership.helpers import LeaderElection, WorkDistributor
from membership.items import ItemAssignor, Subscription
from membership.member import (
    Assignment,
    Assignor,
    CallableAssignor,
    GroupMember,
    JoinedMember,
    MembershipError,
)

__all__ = [
    "Assignment",
    "Assignor",
    "Blocking",
    "CallableAssignor",
    "GroupMember",
    "ItemAssignor",
    "JoinedMember",
    "LeaderElection",
    "MembershipError",
    "Subscription",
    "WorkDistributor",
]
