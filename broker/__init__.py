"""sharebroker: a single-node Kafka-protocol broker with share groups (KIP-932)."""

_DIST = "sharebroker-"


def version() -> str:
    """The installed package's version ("dev" when running from a source tree not installed).

    Read from the name of the ``sharebroker-VERSION.dist-info`` directory on ``sys.path``, as
    ``importlib.metadata`` finds it; ``importlib.metadata`` itself (with the ``email`` package it
    loads: ~9 ms and ~2 MiB at every start) only when there is no such directory.
    """
    import os
    import sys

    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.startswith(_DIST) and name.endswith(".dist-info"):
                return name[len(_DIST):-len(".dist-info")]
    try:
        from importlib.metadata import version as dist_version

        return dist_version("sharebroker")
    except Exception:
        return "dev"
