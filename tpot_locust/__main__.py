import sys

from tpot_locust.cli import main

sys.exit(main())
