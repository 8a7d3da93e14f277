# SPDX-License-Identifier: GPL-3.0-or-later
"""Add-on preferences (user-level settings): :class:`GBufferEditorPreferences`.

Edit > Preferences > Add-ons > G-Buffer Editor; read them with :func:`get_preferences`.
Other modules use the helpers :func:`model_dir`, :func:`cache_dir`,
:func:`downloads_allowed`, :func:`diffusion_site_dir` and :func:`backend_python` rather
than re-deriving paths. The buttons drawn here (install / remove the diffusion
packages, download a model) are operators of ``operators/``, named by their ids.
"""

import os
import sys
from typing import Optional, Tuple

import bpy
from bpy.props import BoolProperty, EnumProperty, StringProperty

from . import dependencies
from .model_catalog import human_size, model_specs, model_status

#: The extension's package (``bl_ext.<repo>.gbuffer_editor``), parent of this ``addon``
#: package: the preferences and the user folder are registered under it.
_PACKAGE = __package__.rpartition(".")[0]


def get_preferences(context=None):
    """The :class:`GBufferEditorPreferences` of this extension (``None`` if not enabled)."""
    context = context or bpy.context
    addon = context.preferences.addons.get(_PACKAGE)
    return addon.preferences if addon is not None else None


def _user_dir(*parts, create=True):
    """The extension's user folder (survives upgrades), optionally a sub-folder of it."""
    return bpy.utils.extension_path_user(_PACKAGE, path=os.path.join(*parts) if parts else "", create=create)


def model_dir(prefs=None):
    """Folder holding optional (downloaded) models: the preference, or ``<user>/models``."""
    prefs = prefs or get_preferences()
    if prefs is not None and prefs.model_dir:
        return bpy.path.abspath(prefs.model_dir)
    return _user_dir("models")


def diffusion_site_dir():
    """Folder of the on-demand diffusion packages for this Blender's Python version."""
    return str(dependencies.diffusion_site_dir(_user_dir()))


def cache_dir(prefs=None) -> Optional[str]:
    """The models folder (a Hugging Face cache): :func:`model_dir`, or ``None`` when there
    is none (the add-on is not installed as an extension)."""
    try:
        return model_dir(prefs)
    except (ValueError, RuntimeError, TypeError):
        return None


def catalog_options(prefs=None) -> dict:
    """Keyword arguments for :mod:`..backend.catalog` matching what the worker will see:
    the models folder, the on-demand diffusion packages folder, and no package check when
    an external backend Python runs the jobs (its packages cannot be seen from here)."""
    prefs = prefs if prefs is not None else get_preferences()
    try:
        site = diffusion_site_dir()
    except Exception:  # noqa: BLE001 - not installed as an extension
        site = None
    external = bool(getattr(prefs, "backend_python", "") or "")
    cache = None
    if prefs is not None and hasattr(prefs, "bl_rna"):
        cache = cache_dir(prefs)
    return {"cache_dir": cache, "extra_sites": [site] if site else [], "check_packages": not external}


def downloads_allowed(prefs=None) -> Tuple[bool, str]:
    """``(allowed, reason)``: Blender's online access must be on and offline mode off."""
    if not bpy.app.online_access:
        return False, "Online access is off (Preferences > System > Network)"
    if prefs is not None and getattr(prefs, "offline_mode", False):
        return False, "Offline mode is on in the G-Buffer Editor preferences"
    return True, ""


def backend_python(prefs=None):
    """Python executable that runs the backend: the preference when set, else Blender's."""
    prefs = prefs or get_preferences()
    if prefs is not None and prefs.backend_python:
        return bpy.path.abspath(prefs.backend_python)
    return sys.executable


class GBufferEditorPreferences(bpy.types.AddonPreferences):
    bl_idname = _PACKAGE

    backend_python: StringProperty(
        name="External Python",
        description=(
            "Python executable of an environment with torch and diffusers (e.g. a venv or "
            "conda env with CUDA torch). Empty: use Blender's Python, the bundled wheels "
            "and the on-demand install"
        ),
        subtype='FILE_PATH',
        default="",
    )
    device: EnumProperty(
        name="Device",
        description="Where the models run",
        items=(
            ('AUTO', "Auto", "CUDA or MPS when available, else CPU"),
            ('CPU', "CPU", "Run on the CPU"),
            ('CUDA', "CUDA", "Run on an NVIDIA GPU (needs CUDA torch or onnxruntime-gpu)"),
            ('MPS', "MPS", "Run on Apple Silicon (diffusion backends only)"),
        ),
        default='AUTO',
    )
    precision: EnumProperty(
        name="Precision",
        description="Floating-point precision of the diffusion backends (Marigold, ControlNet) "
        "on the GPU; the CPU and the embedded backends always use full precision",
        items=(
            ('fp16', "FP16", "Half precision on the GPU: faster, less memory"),
            ('fp32', "FP32", "Full precision on the GPU too: slower, more memory, no fp16 overflow"),
        ),
        default='fp16',
    )
    model_dir: StringProperty(
        name="Model Folder",
        description="Folder for optional downloaded models. Empty: the extension's user folder",
        subtype='DIR_PATH',
        default="",
    )
    offline_mode: BoolProperty(
        name="Offline Mode",
        description="Never download models or packages, even when online access is allowed",
        default=False,
    )
    torch_index_url: StringProperty(
        name="Package Index",
        description=(
            "Index for the on-demand install, e.g. https://download.pytorch.org/whl/cu128 "
            "for a given CUDA version. Empty: PyPI"
        ),
        default="",
    )

    def draw(self, context):
        layout = self.layout
        layout.use_property_split = True

        col = layout.column(heading="Backend")
        col.prop(self, "backend_python")
        if self.backend_python and not os.path.isfile(bpy.path.abspath(self.backend_python)):
            col.label(text="File not found", icon='ERROR')
        col.prop(self, "device")
        col.prop(self, "precision")
        col.prop(self, "model_dir")
        if not self.model_dir:
            col.label(text=model_dir(self), icon='FILE_FOLDER')
        col.prop(self, "offline_mode")
        if not bpy.app.online_access:
            col.label(text="Online access is off in Preferences > System", icon='INFO')

        box = layout.box()
        box.label(text="Diffusion Packages (torch, diffusers)")
        if self.backend_python:
            box.label(text="Using the external Python above", icon='CHECKMARK')
        site = diffusion_site_dir()
        marker = dependencies.read_marker(site)
        if marker:
            box.label(text="Installed in " + site, icon='CHECKMARK')
        else:
            box.label(text="Not installed (the embedded default path needs none)", icon='INFO')
        box.prop(self, "torch_index_url")
        row = box.row()
        row.operator("gbuffer.install_diffusion_deps", icon='IMPORT')
        row.operator("gbuffer.remove_diffusion_deps", icon='TRASH')

        draw_model_list(layout, self)


def draw_model_list(layout, prefs) -> None:
    """Model rows of the preferences: status, size on disk, Download (``gbuffer.download_model``)."""
    cache = cache_dir(prefs)
    allowed, why = downloads_allowed(prefs)
    box = layout.box()
    box.label(text="Models", icon="FILE_3D")
    if cache:
        box.label(text=str(cache), icon="FILE_FOLDER")
    for spec in model_specs():
        present, size = model_status(spec, cache)
        row = box.row()
        row.label(text=spec.label, icon="CHECKMARK" if present else "X")
        row.label(text=(human_size(size) if present else "missing") + f"  ({spec.used_by})")
        if spec.licence:
            row.label(text=", ".join(x for x in (spec.licence, spec.size, getattr(spec, "vram", "")) if x))
        if spec.repo_id and not present:
            sub = row.row()
            sub.enabled = allowed
            op = sub.operator("gbuffer.download_model", text="Download", icon="IMPORT")
            op.model = spec.key
    if not allowed:
        box.label(text=why, icon="INFO")


_classes = (GBufferEditorPreferences,)


def register():
    for cls in _classes:
        bpy.utils.register_class(cls)


def unregister():
    for cls in reversed(_classes):
        bpy.utils.unregister_class(cls)
