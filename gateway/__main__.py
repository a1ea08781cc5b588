"""``python -m gateway``: the same as the ``mlxd`` command."""

import sys

from gateway.cli import main

sys.exit(main())
