import sys

from tpot_locust.cli.main import main

sys.exit(main())
