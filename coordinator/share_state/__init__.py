"""Share coordinator (KIP-932): durable share-partition state on ``__share_group_state``.

See :mod:`coordinator.share_state.coordinator` and ``coordinator/share_state/README.md``.
"""
from coordinator.share_state.batches import StateBatch, combine_state_batches
from coordinator.share_state.coordinator import ShareCoordinator, ShareState

__all__ = ["ShareCoordinator", "ShareState", "StateBatch", "combine_state_batches"]
