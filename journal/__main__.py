"""`python -m journal`: the same as the `journal` command."""

from __future__ import annotations

import sys

from journal.cli import main

sys.exit(main())
