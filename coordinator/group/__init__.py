"""Group coordinator: classic, KIP-848 consumer and KIP-932 share groups, committed offsets (KIP-211).

See README.md in this package for what is and is not implemented.
"""
from .cluster import Cluster, Scheduler
from .config import GroupConfig
from .coordinator import GroupCoordinator
from .share import ShareGroup

__all__ = ["Cluster", "GroupConfig", "GroupCoordinator", "Scheduler", "ShareGroup"]
