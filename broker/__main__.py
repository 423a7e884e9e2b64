"""``python -m broker``: start the broker (same as the ``sharebroker`` command)."""
from broker.cli import main

raise SystemExit(main())
