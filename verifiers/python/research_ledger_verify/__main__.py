"""`python -m research_ledger_verify`."""

import sys

from .cli import main

sys.exit(main())
