"""sharebroker: a single-node Kafka-protocol broker with share groups (KIP-932)."""


def version() -> str:
    """The installed package's version ("dev" when running from a source tree not installed)."""
    try:
        from importlib.metadata import version as dist_version

        return dist_version("sharebroker")
    except Exception:
        return "dev"
