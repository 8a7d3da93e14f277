"""``python -m backend ...`` -> :func:`backend.cli.main`."""
import sys

from .cli import main

sys.exit(main())
