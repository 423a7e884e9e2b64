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
from typing import Iterator, Mapping

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


class _Assignors(Mapping):
    """name -> assignor instance, made (its module imported) on first lookup."""

    __slots__ = ("_classes", "_made")

    def __init__(self, classes: dict[str, str]):
        self._classes = classes  # assignor name -> class name
        self._made: dict[str, Assignor] = {}

    def __getitem__(self, name: str) -> Assignor:
        a = self._made.get(name)
        if a is None:
            cls = self._classes[name]  # KeyError for an unknown name, as a dict
            a = self._made[name] = _class(cls)()
        return a

    def __iter__(self) -> Iterator[str]:
        return iter(self._classes)

    def __len__(self) -> int:
        return len(self._classes)


# Consumer-group assignors by name; share groups have their own namespace (both have a "lag").
ASSIGNORS: Mapping[str, Assignor] = _Assignors({"simple": "SimpleAssignor", "uniform": "UniformAssignor",
                                                "range": "RangeAssignor", "lag": "LagAssignor"})
SHARE_ASSIGNORS: Mapping[str, Assignor] = _Assignors({"simple": "SimpleAssignor", "lag": "ShareLagAssignor"})
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
