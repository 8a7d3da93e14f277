"""Where the compositor gets wired: source footage, G-buffer sequence, "Material edits", outputs.

Layout built by :func:`setup_gbuffer` (left to right)::

    [Image "G-buffers"] --pass--> [Material edits frame: Reroute In.<Pass> -> Reroute Out.<Pass>]
                                        --> [File Output "G-buffer output" (multilayer EXR)]
                                        --> [Viewer] (chosen pass)   --> Composite / Group Output

Artists insert their nodes between ``In.<Pass>`` and ``Out.<Pass>`` inside the frame.
Restyle renders the compositor with the File Output unmuted, which writes the edited
passes under the contract's pass names.

Nodes are found again by a ``gbuffer_editor_role`` custom property, so re-running a
step updates the existing setup instead of stacking duplicates. All version
differences go through :mod:`.compat`.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import bpy

from . import compat
from ..backend.contract import FILE_PREFIX, PASSES, list_frames

ROLE_KEY = "gbuffer_editor_role"
ROLE_SOURCE = "source"
ROLE_GBUFFER = "gbuffer"
ROLE_EDITS = "edits_frame"
ROLE_OUTPUT = "gbuffer_output"
ROLE_VIEWER = "viewer"
ROLE_PREVIEW = "preview_normalize"
ROLE_RESULT = "result"
ROLE_RENDER = "render_layers"
ROLE_ZCOMBINE = "zcombine"
EDITS_LABEL = "Material edits"
#: pass name -> contract socket type, in contract order
PASS_TYPES = {name: spec[2] for name, spec in PASSES.items()}


def find_tree(scene):
    """The scene's compositor tree, or ``None`` (never creates one)."""
    return compat.compositor_tree(scene, create=False)


def find_node(tree, role: str, pass_name: str = ""):
    """The node tagged with ``role`` (and ``pass_name`` for per-pass reroutes), or ``None``."""
    key = f"{role}:{pass_name}" if pass_name else role
    for n in tree.nodes:
        if n.get(ROLE_KEY) == key:
            return n
    return None


def _node(tree, role: str, bl_idname: str, pass_name: str = "", factory=None):
    node = find_node(tree, role, pass_name)
    if node is None and role == ROLE_VIEWER:  # adopt the tree's existing Viewer
        node = next((n for n in tree.nodes if n.bl_idname == bl_idname and not n.get(ROLE_KEY)), None)
        if node is not None:
            node[ROLE_KEY] = role
    if node is not None and node.bl_idname != bl_idname and factory is None:
        tree.nodes.remove(node)
        node = None
    if node is None:
        node = factory() if factory else tree.nodes.new(bl_idname)
        node[ROLE_KEY] = f"{role}:{pass_name}" if pass_name else role
    return node


def _link(tree, from_socket, to_socket) -> None:
    for l in list(to_socket.links):
        tree.links.remove(l)
    tree.links.new(from_socket, to_socket)


def setup_source(scene, clip) -> bpy.types.Node:
    """Movie Clip node for the imported footage, shown by the Viewer and the final output
    (an existing G-buffer setup stays in the tree, unplugged from the output).

    Returns:
        The ``CompositorNodeMovieClip`` node.
    """
    tree = compat.compositor_tree(scene)
    node = _node(tree, ROLE_SOURCE, "CompositorNodeMovieClip")
    node.clip = clip
    node.name = node.label = "Footage"
    node.location = (-700, 300)
    out = compat.output_socket(tree)
    out.node.location = (700, 300)
    viewer = _node(tree, ROLE_VIEWER, "CompositorNodeViewer")
    viewer.location = (700, -100)
    # newly imported footage is what the output and the Viewer show (until Decompose)
    _link(tree, node.outputs["Image"], out)
    _link(tree, node.outputs["Image"], viewer.inputs["Image"])
    return node


def load_sequence_image(folder: os.PathLike, prefix: str = FILE_PREFIX):
    """Load the EXR frames ``folder/<prefix>NNNN.exr`` as one image sequence.

    Returns:
        ``(image, first_number, count)``.

    Raises:
        FileNotFoundError: no frame in ``folder`` (names the folder).
    """
    frames = list_frames(folder, prefix=prefix)
    if not frames:
        raise FileNotFoundError(f"no {prefix}NNNN.exr frames in {folder}")
    img, first = _sequence_image(frames, f"{Path(folder).name} G-buffers")
    return img, first, _span(frames)


def _span(frames: dict) -> int:
    """Frames a sequence ``{number: path}`` spans, first to last (gaps included: a source
    numbered 1001, 1002, 1004 spans 4 scene frames, 1003 showing nothing)."""
    nums = list(frames)
    return max(nums) - min(nums) + 1


def _sequence_image(frames: dict, name: str):
    """Load ``{number: path}`` (sorted) as one image sequence named ``name``;
    returns ``(image, first_number)``."""
    first = next(iter(frames))
    path = os.path.normpath(str(frames[first]))
    # the same sequence loaded again (Show Result twice, or a re-run into the same
    # folder) reuses its image and reloads it, instead of adding "name.001", ".002" ...
    for img in bpy.data.images:
        if img.source == "SEQUENCE" and img.filepath and \
                os.path.normpath(bpy.path.abspath(img.filepath)) == path:
            img.name = name
            img.reload()
            return img, first
    img = bpy.data.images.load(path, check_existing=False)
    img.source = "SEQUENCE"
    img.name = name
    return img, first


def _configure_sequence_node(node, img, first: int, count: int, scene_start: int) -> None:
    node.image = img
    node.frame_start = scene_start
    node.frame_duration = count
    node.frame_offset = first - 1
    node.use_auto_refresh = True


def setup_gbuffer(scene, gbuffer_dir: os.PathLike, preview_pass: str = "Combined"):
    """Wire the G-buffer sequence in ``gbuffer_dir`` into the compositor (idempotent).

    The Image node reads the EXR sequence (source ``SEQUENCE``, layer ``GBuffer``), so
    every contract pass is an output socket; it starts at the scene's first frame.

    Returns:
        The Image node.

    Raises:
        FileNotFoundError: no frames in the folder.
    """
    tree = compat.compositor_tree(scene)
    img, first, count = load_sequence_image(gbuffer_dir)
    image_node = _node(tree, ROLE_GBUFFER, "CompositorNodeImage")
    image_node.name = image_node.label = "G-buffers"
    image_node.location = (-400, 0)
    _configure_sequence_node(image_node, img, first, count, scene.frame_start)
    if image_node.has_layers:
        try:
            image_node.layer = "GBuffer"
        except TypeError:
            pass  # single-layer files: the only layer is already selected

    frame = _node(tree, ROLE_EDITS, "NodeFrame")
    frame.label = frame.name = EDITS_LABEL
    frame.label_size = 20
    frame.use_custom_color = True
    frame.color = (0.25, 0.35, 0.25)

    output = find_node(tree, ROLE_OUTPUT)
    if output is None:
        output = compat.new_multilayer_file_output(tree, list(PASS_TYPES.items()))
        output[ROLE_KEY] = ROLE_OUTPUT
        output.mute = True  # only Restyle turns it on; a plain render writes nothing
        if hasattr(output, "save_as_render"):
            output.save_as_render = False
    output.location = (700, -400)
    fo_inputs = compat.file_output_inputs(output)

    for i, name in enumerate(PASS_TYPES):
        src = image_output(image_node, name)
        r_in = _node(tree, "in", "NodeReroute", name)
        r_out = _node(tree, "out", "NodeReroute", name)
        for r, x in ((r_in, 0), (r_out, 400)):
            if r.parent is None:  # new: place it; an existing one stays where the artist put it
                r.parent = frame
                r.name = f"{name} {'in' if x == 0 else 'out'}"
                r.location = (x, 200 - 60 * i)
            r.label = name
        if src is not None and not r_in.inputs[0].is_linked:
            tree.links.new(src, r_in.inputs[0])
        if not r_out.inputs[0].is_linked:
            tree.links.new(r_in.outputs[0], r_out.inputs[0])
        if name in fo_inputs and not fo_inputs[name].is_linked:
            tree.links.new(r_out.outputs[0], fo_inputs[name])

    out = compat.output_socket(tree)
    out.node.location = (700, 300)
    _link(tree, find_node(tree, "out", "Combined").outputs[0], out)
    show_pass(tree, preview_pass)
    return image_node


def changed_passes(tree) -> list:
    """The passes the artist changed inside the "Material edits" frame: those that do not
    go from the G-buffer node straight through their ``in`` reroute to their ``out``
    reroute (a node in between, a muted or missing reroute). Every pass when the
    G-buffer node is missing. Restyle re-renders only these (the others are the source
    files' own)."""
    image = find_node(tree, ROLE_GBUFFER)
    if image is None:
        return list(PASS_TYPES)
    changed = []
    for name in PASS_TYPES:
        r_in, r_out = find_node(tree, "in", name), find_node(tree, "out", name)
        if r_in is None or r_out is None or r_out.mute or r_in.mute:
            changed.append(name)
            continue
        links_out = r_out.inputs[0].links
        src = image_output(image, name)
        links_in = r_in.inputs[0].links
        if len(links_out) != 1 or links_out[0].from_node != r_in or \
                (src is not None and (len(links_in) != 1 or links_in[0].from_socket != src)):
            changed.append(name)
    return changed


def edits_untouched(tree) -> bool:
    """Whether the "Material edits" frame is as Decompose wired it: every pass goes from
    the G-buffer node straight through its ``in`` reroute to its ``out`` reroute. Then the
    edited G-buffers equal the source files and Restyle can skip re-rendering them."""
    return find_node(tree, ROLE_GBUFFER) is not None and not changed_passes(tree)


def pass_socket(tree, pass_name: str):
    """The socket carrying ``pass_name`` after the material edits (end of the edits frame)."""
    r_out = find_node(tree, "out", pass_name)
    if r_out is not None:
        return r_out.outputs[0]
    node = find_node(tree, ROLE_GBUFFER)
    return image_output(node, pass_name) if node is not None else None


def image_output(image_node, pass_name: str):
    """The Image node's socket of a contract pass in either channel layout
    (``backend.layouts``): ``Depth`` of the default layout, ``depth`` of ``--layout nuke``
    (its unlayered R G B A are ``Combined`` in both); ``None`` when the file has neither."""
    return image_node.outputs.get(pass_name) or image_node.outputs.get(pass_name.lower())


#: the Preview pass entry that shows the last Restyle result instead of a G-buffer pass
RESULT_PASS = "Result"


def show_pass(tree, pass_name: str) -> None:
    """Connect the Viewer (the backdrop) to ``pass_name`` (after edits; Depth goes through
    a Normalize node), or to the Restyle result for :data:`RESULT_PASS`."""
    viewer = _node(tree, ROLE_VIEWER, "CompositorNodeViewer")
    viewer.location = (700, -100)
    if pass_name == RESULT_PASS:
        node = find_node(tree, ROLE_RESULT)
        if node is not None:
            _link(tree, node.outputs["Image"], viewer.inputs["Image"])
        return
    sock = pass_socket(tree, pass_name)
    if sock is None:
        return
    if pass_name == "Depth":
        norm = _node(tree, ROLE_PREVIEW, "CompositorNodeNormalize")
        norm.location = (550, -100)
        _link(tree, sock, norm.inputs[0])
        sock = norm.outputs[0]
    _link(tree, sock, viewer.inputs["Image"])


def gbuffer_range(tree) -> tuple:
    """``(first scene frame, frame count)`` of the G-buffer Image node (the count spans
    first to last file number, gaps included)."""
    node = find_node(tree, ROLE_GBUFFER)
    if node is None or node.image is None:
        raise LookupError("no G-buffer Image node in the compositor; run Decompose first")
    return node.frame_start, node.frame_duration


def gbuffer_folder(tree) -> Path:
    """Folder the G-buffer Image node reads."""
    node = find_node(tree, ROLE_GBUFFER)
    if node is None or node.image is None:
        raise LookupError("no G-buffer Image node in the compositor; run Decompose first")
    return Path(bpy.path.abspath(node.image.filepath)).parent


def gbuffer_output(tree):
    """The File Output node of the setup (``LookupError`` when missing)."""
    node = find_node(tree, ROLE_OUTPUT)
    if node is None:
        raise LookupError("no G-buffer output node in the compositor; run Decompose first")
    return node


_SEQ_RE = re.compile(r"^(?P<prefix>.*?)(?P<num>\d+)\.(?P<ext>png|exr|jpe?g|tiff?)$", re.IGNORECASE)


def find_sequence(folder: os.PathLike) -> tuple:
    """The longest numbered image sequence in ``folder``.

    Returns:
        ``(prefix, {frame number: path})``, sorted by number; ``("", {})`` when none.
    """
    groups: dict = {}
    folder = Path(folder)
    if not folder.is_dir():
        return "", {}
    for p in folder.iterdir():
        m = _SEQ_RE.match(p.name)
        if m and not p.name.startswith("."):
            key = (m.group("prefix"), m.group("ext").lower())
            groups.setdefault(key, {})[int(m.group("num"))] = p
    if not groups:
        return "", {}
    key = max(groups, key=lambda k: (len(groups[k]), k[1] == "exr"))
    return key[0], dict(sorted(groups[key].items()))


def load_result(scene, folder: os.PathLike, *, show: bool = True) -> bpy.types.Node:
    """Load a Restyle result sequence: an Image node feeding the final output.

    With ``show`` (the default) the artist sees it at once: the Viewer (the compositor's
    backdrop) switches to it and the sequence opens in the Image Editors that show
    images (:func:`show_in_image_editors`). The image is named after the run folder
    (``restyle_003 result``), so earlier runs stay in the image browser.

    Returns:
        The Image node.

    Raises:
        FileNotFoundError: no numbered image sequence in ``folder``.
    """
    tree = compat.compositor_tree(scene)
    _, frames = find_sequence(folder)
    if not frames:
        raise FileNotFoundError(f"no numbered image frames in {folder}")
    folder = Path(folder)
    run = folder.parent.name if folder.name == "result" else folder.name
    img, first = _sequence_image(frames, f"{run} result")
    node = _node(tree, ROLE_RESULT, "CompositorNodeImage")
    node.name = node.label = "Restyle result"
    node.location = (350, 450)
    _configure_sequence_node(node, img, first, _span(frames), scene.frame_start)
    _link(tree, node.outputs["Image"], compat.output_socket(tree))
    if show:
        show_pass(tree, RESULT_PASS)
        show_in_image_editors(img, node)
    return node


#: workspaces whose Image Editor shows results (Blender's "Rendering" is where render
#: results are looked at); Image Editors in the open windows are used too
RESULT_WORKSPACES = ("Rendering", "Compositing")


def show_in_image_editors(img, node=None) -> list:
    """Show ``img`` (an image sequence) in every Image Editor in *View* mode of the open
    windows and of the :data:`RESULT_WORKSPACES`, playing along with the scene's frames
    like ``node`` (start, duration, offset). UV and paint editors are left alone.

    Returns:
        The ``SpaceImageEditor`` objects changed (empty when none is open, e.g. headless).
    """
    screens = []
    wm = bpy.context.window_manager
    for win in getattr(wm, "windows", []):
        if win.screen is not None:
            screens.append(win.screen)
    for name in RESULT_WORKSPACES:
        ws = bpy.data.workspaces.get(name)
        if ws is not None:
            screens.extend(ws.screens)
    changed = []
    for screen in dict.fromkeys(screens):
        for area in screen.areas:
            if area.type != "IMAGE_EDITOR":
                continue
            space = area.spaces.active
            if getattr(space, "mode", "VIEW") != "VIEW" or space in changed:
                continue
            space.image = img
            if node is not None:
                iu = space.image_user
                iu.frame_start, iu.frame_duration = node.frame_start, node.frame_duration
                iu.frame_offset, iu.use_auto_refresh = node.frame_offset, True
            area.tag_redraw()
            changed.append(space)
    return changed


def _is_startup_cube(obj) -> bool:
    """Blender's untouched startup cube: mesh "Cube", 8 vertices, 2 m, at the origin, no
    rotation, no modifiers."""
    if obj is None or obj.type != "MESH" or not obj.name.startswith("Cube"):
        return False
    me = obj.data
    return (len(me.vertices) == 8 and not obj.modifiers and obj.parent is None
            and all(abs(d - 2.0) < 1e-4 for d in obj.dimensions)
            and obj.location.length < 1e-6 and all(abs(a) < 1e-6 for a in obj.rotation_euler))


def _contains(obj, point) -> bool:
    """Is ``point`` (world space) inside ``obj``'s world bounding box (its 8 corners)?"""
    from mathutils import Vector

    corners = [obj.matrix_world @ Vector(c) for c in obj.bound_box]
    return all(min(c[i] for c in corners) <= point[i] <= max(c[i] for c in corners) for i in range(3))


def clear_camera_start(scene) -> list:
    """Make sure the solved camera does not start inside a rendered object.

    The camera solve starts the scene camera at the origin, inside Blender's startup
    cube: the Z Combine then showed that cube's inside (black) until the camera left it
    (frames 1-18 on boat.mp4, issue 28). The untouched startup cube is hidden from the
    render (``hide_render``; Object Properties > Visibility brings it back); any other
    object around the camera's first position is only named in a warning.

    Returns:
        One-line warnings (empty when nothing was in the way).
    """
    cam = scene.camera
    if cam is None:
        return []
    here = scene.frame_current
    scene.frame_set(scene.frame_start)
    try:
        pos = cam.matrix_world.translation.copy()
        inside = [o for o in scene.objects if o.type in {"MESH", "CURVE", "SURFACE", "META", "FONT"}
                  and not o.hide_render and o is not cam and _contains(o, pos)]
    finally:
        scene.frame_set(here)
    out = []
    for o in inside:
        if _is_startup_cube(o):
            o.hide_render = True
            out.append(f"hid the startup cube '{o.name}' from the render: the solved camera starts inside "
                       "it (the Z Combine would be black); Object Properties > Visibility > Renders "
                       "shows it again")
        else:
            out.append(f"the solved camera starts inside '{o.name}' (frame {scene.frame_start}): the Z "
                       "Combine shows that object's inside until the camera leaves it")
    return out


def setup_zcombine(scene) -> bpy.types.Node:
    """Composite the 3D scene's render over the footage with depth (idempotent)::

        footage Combined + Depth (after the material edits) --A--> [Z Combine] --> output, Viewer
        [Render Layers] Image + Depth  ---------------------B-->

    A CG object rendered by the scene camera (which follows the camera solve) is then
    hidden wherever the footage's depth is nearer. Turns on the view layer's Depth pass
    and a transparent film (the render's alpha blends its edges). The compositor then
    renders the 3D scene on every compositor render, as any Render Layers node does.

    Raises:
        LookupError: no G-buffer setup in the compositor (run Decompose first).

    Returns:
        The Z Combine node.
    """
    tree = compat.compositor_tree(scene)
    if find_node(tree, ROLE_GBUFFER) is None:
        raise LookupError("no G-buffer Image node in the compositor; run Decompose first")
    layer = scene.view_layers[0]
    layer.use_pass_z = True
    scene.render.film_transparent = True
    rl = _node(tree, ROLE_RENDER, "CompositorNodeRLayers")
    rl.name = rl.label = "3D scene"
    rl.scene = scene
    rl.layer = layer.name
    rl.location = (-400, 600)
    zc = _node(tree, ROLE_ZCOMBINE, "CompositorNodeZcombine", factory=lambda: compat.new_zcombine_node(tree))
    zc.name = zc.label = "Z Combine (footage vs 3D scene)"
    zc.location = (450, 450)
    _link(tree, pass_socket(tree, "Combined"), zc.inputs[0])
    _link(tree, pass_socket(tree, "Depth"), zc.inputs[1])
    _link(tree, rl.outputs["Image"], zc.inputs[2])
    _link(tree, rl.outputs["Depth"], zc.inputs[3])
    _link(tree, zc.outputs[0], compat.output_socket(tree))
    viewer = _node(tree, ROLE_VIEWER, "CompositorNodeViewer")
    _link(tree, zc.outputs[0], viewer.inputs["Image"])
    return zc
