"""`python -m commbench` is the same front door as the `commbench` console script."""

import sys

from commbench.cli import main

sys.exit(main())
