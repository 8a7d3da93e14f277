"""``python -m backend ...`` -> :func:`backend.cli.main`.

Also runs as ``python path/to/backend ...`` from any folder (the folder holding this
package is put on ``sys.path`` first), so the CLI needs no installation and no
particular working directory.
"""
import os
import signal
import sys
import threading

if not __package__:  # run as a directory / file: make the package importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    __package__ = "backend"  # noqa: A001 - relative imports below resolve against it
    import backend  # noqa: F401,E402

# SIGINT/SIGTERM/SIGHUP from the very first moment: a signal that arrives while Python and the
# packages are still loading cancels the job cleanly (event "cancelled", exit 130)
# instead of killing the process (exit 143) or printing a traceback. The CLI's
# SignalCancel takes this event over.
_cancel = threading.Event()


def _early_signal(signum, frame):
    if _cancel.is_set():
        raise KeyboardInterrupt
    _cancel.set()


# SIGHUP (the terminal or ssh session closed) too, where it exists
_SIGNALS = tuple(getattr(signal, _n) for _n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, _n))
for _s in _SIGNALS:
    signal.signal(_s, _early_signal)

try:
    from .sitepaths import append_extra_site_paths

    # On-demand diffusion packages (GBUFFER_EXTRA_SITE) go to the END of sys.path, before the
    # CLI imports anything, so Blender's numpy and the bundled wheels are never shadowed.
    append_extra_site_paths()

    from .cli import main  # noqa: E402

    rc = main(cancel=_cancel)
    # the job has reported its last word: a signal from now on (while Python shuts down,
    # when it would otherwise kill the process with 143) changes nothing
    for _s in _SIGNALS:
        signal.signal(_s, signal.SIG_IGN)
    sys.exit(rc)
except KeyboardInterrupt:  # a second signal while loading
    sys.stdout.write('{"event": "cancelled", "written": null, "frame": null}\n')
    sys.stderr.write("cancelled\n")
    sys.exit(130)
