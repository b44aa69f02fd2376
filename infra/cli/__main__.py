"""`python -m infra.cli`: the `atlas` command without its console script (the scripts/ wrappers use it)."""

import sys

from infra.cli import main

sys.exit(main())
