"""neurok.preview: live preview while you tune the sliders.

What it writes: a temporary PC2 file in the system temp folder (`neurok_cache/preview_*.pc2`) that
grows frame by frame, played by a Mesh Cache modifier named "NeuROK Preview" (placed right after
"NeuROK Cache", or first). While running, the modifier shows the newest frame (play mode Custom);
when the run ends it follows the timeline, so you can scrub the preview. Your mesh data, shape keys
and modifiers are not touched. Changing a NeuROK setting, the object's transform, gravity, frame
rate or a force field restarts the run. Esc (or Preview again) stops it and removes the modifier
and the file. Nothing about a preview is undone/redone or saved as a bake.
"""

import time

import bpy
from bpy.props import BoolProperty, StringProperty

from .. import bridge, jobs, preferences
from ..engine_link import NeurokError
from . import _common

RESTART_DELAY = 0.3  # seconds without further changes before a restart (dragging a slider)


def _object_key(ob) -> tuple:
    """An object as a preview input: its transform, or for an animated object its animation (the current
    transform follows the timeline, and scrubbing must not restart the preview)."""
    if not bridge._maybe_animated(ob):
        return (ob.name, tuple(tuple(r) for r in ob.matrix_world),
                ob.field.strength if ob.field is not None else None)
    keys = []
    ad = ob.animation_data
    fcurves = bridge._channelbag_fcurves(ob)
    for fc in (fcurves or []):
        keys.append((fc.data_path, fc.array_index, tuple(tuple(kp.co) for kp in fc.keyframe_points)))
    return (ob.name, "animated", ad.action.name if ad and ad.action else None, tuple(keys),
            ob.parent.name if ob.parent else None, len(ob.constraints))


def _walk(pg, out, skip=("bake", "active_force")):
    for prop in pg.bl_rna.properties:
        key = prop.identifier
        if key == "rna_type" or key in skip:
            continue
        value = getattr(pg, key)
        if prop.type == 'COLLECTION':
            for item in value:
                _walk(item, out)
        elif prop.type == 'POINTER':
            if value is None:
                out.append(None)
            elif isinstance(value, bpy.types.Object):
                out.append(_object_key(value))
            elif isinstance(value, bpy.types.ID):
                out.append(value.name)
            else:
                _walk(value, out)
        elif getattr(prop, "is_array", False):
            out.append(tuple(value))
        else:
            out.append(value)


def fingerprint(context, obj) -> tuple:
    """Everything a preview depends on that can change from the UI (cheap enough for every tick)."""
    scene = context.scene
    out = [obj.name, len(obj.data.vertices), tuple(vg.name for vg in obj.vertex_groups),
           _object_key(obj), tuple(scene.gravity), scene.use_gravity,
           scene.render.fps, scene.render.fps_base, scene.frame_start, scene.frame_end]
    _walk(obj.neurok, out)
    _walk(scene.neurok, out, skip=("specialize_minutes", "shape_key_mode"))
    if obj.neurok.use_force_fields:
        for ob in bridge.field_objects(context, obj):
            f = ob.field
            out.append((f.type, f.shape, f.falloff_type, f.falloff_power, f.use_min_distance,
                        f.distance_min, f.use_max_distance, f.distance_max, f.z_direction, _object_key(ob)))
    return tuple(out)


class NEUROK_OT_preview(_common.JobOperator, bpy.types.Operator):
    """Live preview: simulate in the background and show frames as they arrive; changing a setting restarts it;
    Esc stops and restores the mesh"""
    bl_idname = "neurok.preview"
    bl_label = "Preview"
    bl_options = {'REGISTER'}

    object_name: StringProperty(name="Object", options={'SKIP_SAVE', 'HIDDEN'})
    stop: BoolProperty(name="Stop", default=False, options={'SKIP_SAVE'},
                       description="Stop a running preview and remove it")

    job_kind = "preview"
    stream = True
    cancelled_message = "Preview cancelled."

    def execute(self, context):
        name = self.object_name or (context.active_object.name if context.active_object else "")
        running = jobs.running(name, "preview") if name else None
        if running is not None or self.stop:
            if running is not None:
                running.cancel.set()
                jobs.JOBS.pop(name, None)  # the modal sees its job gone and restores the mesh
            obj = bpy.data.objects.get(name)
            if obj is not None and running is None:
                bridge.remove_preview(obj)
            return {'FINISHED'}
        obj = _common.target_or_report(self, context, self.object_name)
        if obj is None:
            return {'CANCELLED'}
        other = jobs.JOBS.get(obj.name)
        if other is not None:
            self.report({'ERROR'}, f"NeuROK is already running a {other.kind} on '{obj.name}'; wait for it or press Esc.")
            return {'CANCELLED'}
        inputs = _common.gather_or_report(self, context, obj)
        if inputs is None:
            return {'CANCELLED'}
        self._setup_state(inputs)
        self._fingerprint = None if jobs.synchronous(context) else fingerprint(context, obj)
        return self.start_job(context, inputs)

    # ------------------------------------------------------------------ state
    def _setup_state(self, inputs):
        self._cache = bridge.PreviewCache(inputs.obj_name, inputs.vertex_count, inputs.frame_start)
        self._frame_start = inputs.frame_start
        self._pending = []
        self._newest = None
        self._needs_reset = False
        self._restart_at = None
        self._final_shown = False
        self._reported = False

    def on_message(self, job, msg):
        if job is not jobs.JOBS.get(self._obj_name, job):
            return
        if msg[0] == "frame":
            self._pending.append(msg[2])
            self._newest = msg[1]
            if job.sync:  # background: write as it comes, no display updates needed
                self._flush(None)

    def _flush(self, obj):
        if not self._pending:
            return
        if self._needs_reset:
            self._cache.reset()
            self._needs_reset = False
        self._cache.append(self._pending)
        self._pending = []
        if obj is not None:
            bridge.show_preview(obj, self._cache.path, self._frame_start, self._newest)

    def _cleanup(self, context, restore=True):
        self._stop_timer(context)
        obj = bpy.data.objects.get(self._obj_name)
        if restore and obj is not None:
            bridge.remove_preview(obj)
        self._cache.delete()
        jobs.tag_redraw(context)

    # ------------------------------------------------------------------ background (synchronous) end
    def on_done(self, context, obj, job):
        self._flush(None)
        bridge.show_preview(obj, self._cache.path, self._frame_start, None)
        if obj.neurok.bake.kind == 'NONE':
            bridge.record_ood(obj, job.ood)
        self.report({'INFO'}, f"Previewed {self._cache.samples} frames of '{obj.name}' "
                              "(the 'NeuROK Preview' modifier plays them; run Preview with Stop to remove it).")
        return {'FINISHED'}

    # ------------------------------------------------------------------ interactive
    def modal(self, context, event):
        job = jobs.JOBS.get(self._obj_name)
        if job is None or job.kind != "preview" or job is not self._job:
            # stopped from the button, taken over by a bake, or the file changed
            if job is None or job.kind != "preview":
                self._cleanup(context, restore=True)
            return {'CANCELLED'}
        if event.type == 'ESC' and event.value == 'PRESS':
            job.cancel.set()
            jobs.JOBS.pop(self._obj_name, None)
            self._cleanup(context, restore=True)
            self.report({'INFO'}, "Preview stopped; the mesh is back as it was.")
            return {'CANCELLED'}
        if event.type != 'TIMER':
            return {'PASS_THROUGH'}
        obj = bpy.data.objects.get(self._obj_name)
        if obj is None or obj.type != 'MESH' or obj.mode == 'EDIT':
            job.cancel.set()
            jobs.JOBS.pop(self._obj_name, None)
            self._cleanup(context, restore=obj is not None)
            return {'CANCELLED'}
        job.drain()
        self._flush(obj)
        if job.finished and not self._final_shown:
            self._final_shown = True
            if job.status == "done" and self._cache.samples:
                bridge.show_preview(obj, self._cache.path, self._frame_start, None)
            elif job.status in ("fault", "error") and not self._reported:
                self._reported = True
                self.report({'ERROR'}, _common.fault_sentence(job) if job.status == "fault" else job.message)
            if job.ood is not None and obj.neurok.bake.kind == 'NONE':
                bridge.record_ood(obj, job.ood)
        fp = fingerprint(context, obj)
        now = time.perf_counter()
        if fp != self._fingerprint:
            self._fingerprint = fp
            self._restart_at = now + RESTART_DELAY
        if self._restart_at is not None and now >= self._restart_at:
            self._restart_at = None
            self._restart(context, obj, job)
        jobs.tag_redraw(context)
        return {'PASS_THROUGH'}

    def _restart(self, context, obj, old_job):
        old_job.cancel.set()
        try:
            inputs = bridge.gather(context, obj)
        except NeurokError as e:
            self.report({'ERROR'}, str(e))
            self._final_shown = True
            return
        if inputs.vertex_count != self._cache.points:
            self._cache.delete()
            self._cache = bridge.PreviewCache(inputs.obj_name, inputs.vertex_count, inputs.frame_start)
        else:
            self._needs_reset = True
        self._frame_start = inputs.frame_start
        self._pending, self._newest = [], None
        self._final_shown = self._reported = False
        job = jobs.Job("preview", inputs, device=preferences.device(context), stream=True)
        job.handler = self.on_message
        jobs.JOBS[obj.name] = job
        self._job = job
        job.start()

    def start_job(self, context, inputs, task=None, total=None):
        result = super().start_job(context, inputs, task, total)
        self._job = jobs.JOBS.get(inputs.obj_name)
        return result

    def cancel(self, context):
        job = jobs.JOBS.get(self._obj_name)
        if job is not None and job is getattr(self, "_job", None):
            job.cancel.set()
            jobs.JOBS.pop(self._obj_name, None)
        self._cleanup(context, restore=True)
