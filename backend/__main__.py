"""``python -m backend ...`` -> :func:`backend.cli.main`.

Also runs as ``python path/to/backend ...`` from any folder (the folder holding this
package is put on ``sys.path`` first), so the CLI needs no installation and no
particular working directory.
"""
import os
import sys

if not __package__:  # run as a directory / file: make the package importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    __package__ = "backend"  # noqa: A001 - relative imports below resolve against it
    import backend  # noqa: F401,E402

from .sitepaths import append_extra_site_paths  # noqa: E402

# On-demand diffusion packages (GBUFFER_EXTRA_SITE) go to the END of sys.path, before the
# CLI imports anything, so Blender's numpy and the bundled wheels are never shadowed.
append_extra_site_paths()

from .cli import main  # noqa: E402

sys.exit(main())
