"""Server-side partition assignors, by name.

``"simple"`` serves share groups (KIP-932); ``"uniform"`` (the default, as in
Kafka's ``group.consumer.assignors=uniform,range``), ``"range"`` and ``"lag"``
serve consumer groups (KIP-848).  Assignors are stateless: see base.py for the
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
from .simple import SimpleAssignor
from .uniform import UniformAssignor

ASSIGNORS: dict[str, Assignor] = {
    assignor.name: assignor
    for assignor in (SimpleAssignor(), UniformAssignor(), RangeAssignor(), LagAssignor())
}
SHARE_GROUP_ASSIGNORS = ("simple",)
CONSUMER_GROUP_ASSIGNORS = ("uniform", "range", "lag")  # first is the default


def get_assignor(name: str) -> Assignor:
    """The assignor registered under ``name``; raises KeyError for unknown names."""
    return ASSIGNORS[name]


__all__ = [
    "ASSIGNORS",
    "CONSUMER_GROUP_ASSIGNORS",
    "SHARE_GROUP_ASSIGNORS",
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
]
