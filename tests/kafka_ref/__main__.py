import sys

from tests.kafka_ref.launcher import main

sys.exit(main())
