"""Server-side partition assignors, by name.

``"simple"`` (the default) and ``"lag"`` (KIP-1226 backlogs) serve share groups
(KIP-932); ``"uniform"`` (the default, as in Kafka's
``group.consumer.assignors=uniform,range``), ``"range"`` and ``"lag"`` serve
consumer groups (KIP-848).  Assignors are stateless: see base.py for the
input model and README.md for the design notes.
"""

from .base import (
    Assignment,
    Assignor,
    MemberSpec,
    PartitionAssignorError,
    TopicSpec,
)
from .lag import LagAssignor
from .range import RangeAssignor
from .share_lag import ShareLagAssignor
from .simple import SimpleAssignor
from .uniform import UniformAssignor

# Consumer-group assignors by name; share groups have their own namespace (both have a "lag").
ASSIGNORS: dict[str, Assignor] = {
    assignor.name: assignor
    for assignor in (SimpleAssignor(), UniformAssignor(), RangeAssignor(), LagAssignor())
}
SHARE_ASSIGNORS: dict[str, Assignor] = {assignor.name: assignor for assignor in (SimpleAssignor(), ShareLagAssignor())}
SHARE_GROUP_ASSIGNORS = ("simple", "lag")  # first is the default
CONSUMER_GROUP_ASSIGNORS = ("uniform", "range", "lag")  # first is the default


def get_assignor(name: str) -> Assignor:
    """The consumer-group (or ``simple``) assignor registered under ``name``; KeyError for unknown names."""
    return ASSIGNORS[name]


def get_share_assignor(name: str) -> Assignor:
    """The share-group assignor registered under ``name``; raises KeyError for unknown names."""
    return SHARE_ASSIGNORS[name]


__all__ = [
    "ASSIGNORS",
    "CONSUMER_GROUP_ASSIGNORS",
    "SHARE_ASSIGNORS",
    "SHARE_GROUP_ASSIGNORS",
    "ShareLagAssignor",
    "Assignment",
    "Assignor",
    "LagAssignor",
    "MemberSpec",
    "PartitionAssignorError",
    "RangeAssignor",
    "SimpleAssignor",
    "TopicSpec",
    "UniformAssignor",
    "get_assignor",
    "get_share_assignor",
]
