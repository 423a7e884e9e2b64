"""Builds the coordinators and the share-partition manager for a starting broker."""
from __future__ import annotations


async def start(broker) -> None:
    return None
