"""The exception share-group components raise to carry a Kafka error code."""
from __future__ import annotations

from protocol.errors import Errors


class ShareError(Exception):
    """A failure that maps to one Kafka error code (`code`), with an optional message."""

    __slots__ = ("code", "message")

    def __init__(self, code: int, message: str | None = None):
        self.code = int(code)
        self.message = message
        known = self.code in Errors._value2member_map_
        super().__init__(message or (Errors(self.code).name if known else str(self.code)))
