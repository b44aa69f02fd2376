"""`python -m workloads.probe <step> [args]`."""

import sys

from workloads.probe.probe import main

sys.exit(main())
