"""ListTransactions (66) v0-2: transactional ids with their producer id and state.

Filters as Kafka: state names (unknown ones are echoed in UnknownStateFilters),
producer ids, v1 DurationFilter (ongoing for at least that many ms), v2
TransactionalIdPattern (a Java-style regular expression; an invalid one is
INVALID_REQUEST).  Only ids the principal may DESCRIBE are listed.  While the
coordinator loads ``__transaction_state``: COORDINATOR_LOAD_IN_PROGRESS (Kafka's
listTransactionStates).
"""
from __future__ import annotations

import re

from broker.dispatch import handler
from broker.security.authorize import allowed
from coordinator.transaction import STATE_NAMES
from protocol.errors import Errors
from protocol.lazy_messages import ListTransactionsResponse
from protocol.messages.registry import ApiKey


@handler(ApiKey.LIST_TRANSACTIONS, versions=(0, 2))
async def list_transactions(ctx, req):
    states = list(req.state_filters or ())
    unknown = [s for s in states if s not in STATE_NAMES]
    pattern = req.transactional_id_pattern if ctx.api_version >= 2 else None
    if pattern:
        try:
            re.compile(pattern)
        except re.error:
            return ListTransactionsResponse(error_code=Errors.INVALID_REQUEST, unknown_state_filters=[],
                                            transaction_states=[])
    if code := ctx.components.transactions.unavailable_code():  # while __transaction_state loads
        return ListTransactionsResponse(error_code=code, unknown_state_filters=[], transaction_states=[])
    found = ctx.components.transactions.list(states, req.producer_id_filters or (),
                                             req.duration_filter if ctx.api_version >= 1 else -1, pattern or None)
    return ListTransactionsResponse(unknown_state_filters=unknown, transaction_states=[
        ListTransactionsResponse.TransactionState(transactional_id=m.transactional_id, producer_id=m.producer_id,
                                                  transaction_state=m.state_name)
        for m in found if allowed(ctx, "DESCRIBE", "TRANSACTIONAL_ID", m.transactional_id)])
