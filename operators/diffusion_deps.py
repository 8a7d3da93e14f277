"""Install / remove the on-demand diffusion packages (torch, diffusers, ...).

Both buttons sit in the add-on preferences (:mod:`..addon.preferences`). The install
runs pip (:func:`..addon.dependencies.pip_install_command`) in a child process into
``<folder>.partial`` and moves the result in place when pip succeeds, so a failed or
cancelled install never leaves a half-written folder.
"""
import os
import shutil
import subprocess
import sys

import bpy

from ..addon import dependencies, preferences


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
        ok, why = preferences.downloads_allowed(preferences.get_preferences(context))
        if not ok:
            cls.poll_message_set(why)
        return ok

    def invoke(self, context, event):
        prefs = preferences.get_preferences(context)
        index = (prefs.torch_index_url if prefs else "") or "PyPI"
        return context.window_manager.invoke_confirm(
            self, event,
            title="Install diffusion packages?",
            message="Downloads torch, diffusers and transformers (several GB) from " + index,
            confirm_text="Download and Install",
        )

    def _start(self, context):
        import numpy
        site = preferences.diffusion_site_dir()
        partial = site + ".partial"
        if os.path.exists(partial):
            shutil.rmtree(partial)
        prefs = preferences.get_preferences(context)
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
        if not os.path.isdir(preferences.diffusion_site_dir()):
            cls.poll_message_set("Nothing installed")
            return False
        return True

    def invoke(self, context, event):
        return context.window_manager.invoke_confirm(self, event)

    def execute(self, context):
        shutil.rmtree(preferences.diffusion_site_dir())
        self.report({'INFO'}, "Diffusion packages removed")
        return {'FINISHED'}


classes = (GBUFFER_OT_install_diffusion_deps, GBUFFER_OT_remove_diffusion_deps)
