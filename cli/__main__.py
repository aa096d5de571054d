"""``python -m proofgym.cli``: the same as the ``proofgym`` console script."""

import sys

from proofgym.cli import main

sys.exit(main())
