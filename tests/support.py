"""Small helpers shared by the integration tests."""
from __future__ import annotations

import time
import uuid


def until(cond, timeout: float, what: str = "condition", interval: float = 0.01):
    """Return ``cond()``'s first truthy value; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
