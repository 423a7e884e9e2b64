"""Group coordinator: classic and KIP-848 consumer groups, committed offsets (KIP-211 expiration).

See README.md in this package for what is and is not implemented.
"""
from .cluster import Cluster, Scheduler
from .config import GroupConfig
from .coordinator import GroupCoordinator

__all__ = ["Cluster", "GroupConfig", "GroupCoordinator", "Scheduler"]
