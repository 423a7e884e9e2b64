"""Share coordinator (KIP-932): durable share-partition state on ``__share_group_state``.

See :mod:`coordinator.share.coordinator` and ``coordinator/share/README.md``.
"""
from coordinator.share.batches import StateBatch, combine_state_batches
from coordinator.share.coordinator import ShareCoordinator, ShareState

__all__ = ["ShareCoordinator", "ShareState", "StateBatch", "combine_state_batches"]
