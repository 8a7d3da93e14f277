"""A stand-in for the ``blender`` executable, for tests on machines without one.

``python blender_cli_shim.py -b [FILE.blend] --command gbuffer_editor ARGS...`` does what
``blender -b [FILE.blend] --command gbuffer_editor ARGS...`` does with the extension
installed: it enables the add-on from this checkout in the ``bpy`` module, opens the
.blend if one is given, runs the registered headless command (``operators/cli_command.run``)
with ARGS and exits with its status. Anything else is refused (exit 2). It is the bpy
module, not a Blender binary: Blender's own argument parsing is not exercised.
"""
import sys
from pathlib import Path


def main(argv):
    if not argv or argv[0] != "-b":
        print(f"blender_cli_shim: expected -b [FILE.blend] --command gbuffer_editor ARGS, got {argv}", file=sys.stderr)
        return 2
    argv = argv[1:]
    blend = None
    if argv and argv[0] != "--command":
        blend, argv = argv[0], argv[1:]
    if argv[:2] != ["--command", "gbuffer_editor"]:
        print(f"blender_cli_shim: only --command gbuffer_editor is supported, got {argv[:2]}", file=sys.stderr)
        return 2
    import bpy

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import blender_workflow_util as util

    util.enable_addon()
    if blend:
        bpy.ops.wm.open_mainfile(filepath=blend)
    from gbuffer_editor.operators import cli_command

    return cli_command.run(argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
