"""Server-side partition assignors, by name.

``"simple"`` (the default) and ``"lag"`` (KIP-1226 backlogs) serve share groups
(KIP-932); ``"uniform"`` (the default, as in Kafka's
``group.consumer.assignors=uniform,range``), ``"range"`` and ``"lag"`` serve
consumer groups (KIP-848).  Assignors are stateless: see base.py for the
input model and README.md for the design notes.

An assignor's module is imported when it is first looked up (a group's first assignment),
not at start-up: the names below are all the broker needs to check its settings.
"""
from importlib import import_module
from typing import Mapping

from protocol.lazy_messages import LazyMapping

from .base import (
    Assignment,
    Assignor,
    MemberSpec,
    PartitionAssignorError,
    TopicSpec,
)

# class name -> module (in this package)
_CLASSES = {"LagAssignor": "lag", "RangeAssignor": "range", "ShareLagAssignor": "share_lag",
            "SimpleAssignor": "simple", "UniformAssignor": "uniform"}

# Consumer-group assignors by name; share groups have their own namespace (both have a "lag").
# Each an instance made (its module imported) on first lookup.
_CONSUMER = {"simple": "SimpleAssignor", "uniform": "UniformAssignor", "range": "RangeAssignor", "lag": "LagAssignor"}
_SHARE = {"simple": "SimpleAssignor", "lag": "ShareLagAssignor"}
ASSIGNORS: Mapping[str, Assignor] = LazyMapping(_CONSUMER, lambda name: _class(_CONSUMER[name])())
SHARE_ASSIGNORS: Mapping[str, Assignor] = LazyMapping(_SHARE, lambda name: _class(_SHARE[name])())
SHARE_GROUP_ASSIGNORS = ("simple", "lag")  # first is the default
CONSUMER_GROUP_ASSIGNORS = ("uniform", "range", "lag")  # first is the default


def get_assignor(name: str) -> Assignor:
    """The consumer-group (or ``simple``) assignor registered under ``name``; KeyError for unknown names."""
    return ASSIGNORS[name]


def get_share_assignor(name: str) -> Assignor:
    """The share-group assignor registered under ``name``; raises KeyError for unknown names."""
    return SHARE_ASSIGNORS[name]


def _class(name: str) -> type:
    cls = globals()[name] = getattr(import_module(f"{__name__}.{_CLASSES[name]}"), name)
    return cls


def __getattr__(name: str):
    if name not in _CLASSES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _class(name)


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
