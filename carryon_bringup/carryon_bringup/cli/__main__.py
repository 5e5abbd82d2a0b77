"""`python -m carryon_bringup.cli`: the same as the `carryon` console script."""

import sys

from carryon_bringup.cli.main import main

sys.exit(main())
