"""``python -m backend ...`` -> :func:`backend.cli.main`."""
import os
import sys

# On-demand diffusion packages (GBUFFER_EXTRA_SITE, see dependencies.py) go to the END of
# sys.path, so Blender's numpy and the bundled wheels are never shadowed.
sys.path += [p for p in os.environ.get("GBUFFER_EXTRA_SITE", "").split(os.pathsep) if p and p not in sys.path]

from .cli import main  # noqa: E402

sys.exit(main())
