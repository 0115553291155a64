"""``python -m trioperator`` is the same as the ``trioperator`` command."""

import sys

from trioperator.cli import main

sys.exit(main())
