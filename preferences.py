# SPDX-License-Identifier: GPL-3.0-or-later
"""Add-on preferences (user-level settings) and the on-demand diffusion install.

Settings live in :class:`GBufferEditorPreferences` (Edit > Preferences > Add-ons >
G-Buffer Editor); read them with :func:`get_preferences`. Other modules use the helpers
:func:`model_dir`, :func:`is_offline`, :func:`diffusion_site_dir` and
:func:`backend_python` rather than re-deriving paths.
"""

import os
import shutil
import subprocess
import sys

import bpy
from bpy.props import BoolProperty, EnumProperty, StringProperty

from . import dependencies

_PACKAGE = __package__


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


def is_offline(prefs=None):
    """True when nothing may be downloaded: the preference, or Blender's online access off."""
    prefs = prefs or get_preferences()
    return (not bpy.app.online_access) or (prefs is not None and prefs.offline_mode)


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
        row.operator(GBUFFER_OT_install_diffusion_deps.bl_idname, icon='IMPORT')
        row.operator(GBUFFER_OT_remove_diffusion_deps.bl_idname, icon='TRASH')

        # Model list (status, size, Download buttons): engineer B, operators/models.py
        from .operators import models
        models.draw_model_list(layout, self)


class GBUFFER_OT_install_diffusion_deps(bpy.types.Operator):
    """Download torch, diffusers and transformers (several GB) into the extension's user folder"""

    bl_idname = "gbuffer.install_diffusion_deps"
    bl_label = "Install Diffusion Packages"
    bl_options = {'INTERNAL'}

    _proc = None
    _timer = None
    _log = None

    @classmethod
    def poll(cls, context):
        if not bpy.app.online_access:
            cls.poll_message_set("Online access is off (Preferences > System > Network)")
            return False
        prefs = get_preferences(context)
        if prefs is not None and prefs.offline_mode:
            cls.poll_message_set("Offline mode is on in the G-Buffer Editor preferences")
            return False
        return True

    def invoke(self, context, event):
        prefs = get_preferences(context)
        index = (prefs.torch_index_url if prefs else "") or "PyPI"
        return context.window_manager.invoke_confirm(
            self, event,
            title="Install diffusion packages?",
            message="Downloads torch, diffusers and transformers (several GB) from " + index,
            confirm_text="Download and Install",
        )

    def _start(self, context):
        import numpy
        site = diffusion_site_dir()
        partial = site + ".partial"
        if os.path.exists(partial):
            shutil.rmtree(partial)
        prefs = get_preferences(context)
        cmd = dependencies.pip_install_command(
            sys.executable, partial,
            numpy_version=numpy.__version__,
            index_url=prefs.torch_index_url if prefs else "",
        )
        self._log_path = os.path.join(os.path.dirname(site), "install.log")
        self._log = open(self._log_path, "w", encoding="utf-8")
        self._log.write(" ".join(cmd) + "\n")
        self._log.flush()
        self._proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
        self._site, self._partial = site, partial

    def _finish(self):
        """Move the finished install in place (atomic rename); return an error or None."""
        self._log.close()
        if self._proc.returncode != 0:
            shutil.rmtree(self._partial, ignore_errors=True)
            return "pip failed (exit {:d}), see {:s}".format(self._proc.returncode, self._log_path)
        dependencies.remove_shadowing_packages(self._partial)
        dependencies.write_marker(self._partial, dependencies.DIFFUSION_REQUIREMENTS)
        if os.path.exists(self._site):
            shutil.rmtree(self._site)
        os.replace(self._partial, self._site)
        return None

    def execute(self, context):
        if not self.poll(context):
            self.report({'ERROR'}, "Downloads are not allowed (online access or offline mode)")
            return {'CANCELLED'}
        try:
            self._start(context)
        except OSError as ex:
            self.report({'ERROR'}, "Cannot start pip: {:s}".format(str(ex)))
            return {'CANCELLED'}
        if bpy.app.background or context.window is None:  # No event loop: wait here.
            self._proc.wait()
            return self._report_finish()
        wm = context.window_manager
        self._timer = wm.event_timer_add(0.5, window=context.window)
        wm.modal_handler_add(self)
        self.report({'INFO'}, "Installing diffusion packages (Esc cancels)...")
        return {'RUNNING_MODAL'}

    def _report_finish(self):
        error = self._finish()
        if error:
            self.report({'ERROR'}, error)
            return {'CANCELLED'}
        self.report({'INFO'}, "Diffusion packages installed in " + self._site)
        return {'FINISHED'}

    def modal(self, context, event):
        if event.type == 'ESC':
            self._proc.terminate()
            self._proc.wait()
            self._log.close()
            shutil.rmtree(self._partial, ignore_errors=True)
            context.window_manager.event_timer_remove(self._timer)
            self.report({'WARNING'}, "Install cancelled")
            return {'CANCELLED'}
        if event.type != 'TIMER' or self._proc.poll() is None:
            return {'PASS_THROUGH'}
        context.window_manager.event_timer_remove(self._timer)
        return self._report_finish()


class GBUFFER_OT_remove_diffusion_deps(bpy.types.Operator):
    """Delete the on-demand diffusion packages from the extension's user folder"""

    bl_idname = "gbuffer.remove_diffusion_deps"
    bl_label = "Remove Diffusion Packages"
    bl_options = {'INTERNAL'}

    @classmethod
    def poll(cls, context):
        if not os.path.isdir(diffusion_site_dir()):
            cls.poll_message_set("Nothing installed")
            return False
        return True

    def invoke(self, context, event):
        return context.window_manager.invoke_confirm(self, event)

    def execute(self, context):
        shutil.rmtree(diffusion_site_dir())
        self.report({'INFO'}, "Diffusion packages removed")
        return {'FINISHED'}


_classes = (
    GBufferEditorPreferences,
    GBUFFER_OT_install_diffusion_deps,
    GBUFFER_OT_remove_diffusion_deps,
)


def register():
    for cls in _classes:
        bpy.utils.register_class(cls)


def unregister():
    for cls in reversed(_classes):
        bpy.utils.unregister_class(cls)
