"""``python -m broker.log.cleaner``: the cleaner's worker process (started by the broker; see worker.py)."""
from .worker import main

main()
