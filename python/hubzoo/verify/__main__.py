"""python -m hubzoo.verify MODEL ... (see hubzoo.verify)."""

import sys

from .cli import main

sys.exit(main())
