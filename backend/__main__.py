"""``python -m backend ...`` -> :func:`backend.cli.main`."""
import sys

from .sitepaths import append_extra_site_paths

# On-demand diffusion packages (GBUFFER_EXTRA_SITE) go to the END of sys.path, before the
# CLI imports anything, so Blender's numpy and the bundled wheels are never shadowed.
append_extra_site_paths()

from .cli import main  # noqa: E402

sys.exit(main())
