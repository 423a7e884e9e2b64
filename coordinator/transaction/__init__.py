"""Transaction coordinator (KIP-98, KIP-890): transactional ids on ``__transaction_state``.

See :mod:`coordinator.transaction.coordinator` and ``coordinator/transaction/README.md``.
"""
from coordinator.transaction.coordinator import STATE_NAMES, TransactionCoordinator, TxnMetadata

__all__ = ["STATE_NAMES", "TransactionCoordinator", "TxnMetadata"]
