"""neurok.preview: live preview while you tune the sliders.

What it writes: a temporary PC2 file in the system temp folder (`neurok_cache/preview_*.pc2`) that
grows frame by frame, played by a Mesh Cache modifier named "NeuROK Preview" (placed right after
"NeuROK Cache", or first). While running, the modifier shows the newest frame (play mode Custom);
when the run ends it follows the timeline, so you can scrub the preview. Your mesh data, shape keys
and modifiers are not touched. Changing a NeuROK setting, the object's transform, gravity, frame
rate or a force field restarts the run; scrubbing the timeline does not (keyed values enter through
their curves). Esc while frames are still being computed (or Stop Preview at any time) stops it and
removes the modifier and the file; once the run is complete, Esc belongs to playback again. Renaming
the object during a preview is followed. Nothing about a preview is undone/redone or saved as a bake.
"""

import time

import bpy
from bpy.props import BoolProperty, StringProperty

from .. import animation, gather, jobs, preferences, preview_cache, records, stack
from ..engine_link import NeurokError
from . import _common

RESTART_DELAY = 0.3  # seconds without further changes before a restart (dragging a slider)


TRANSFORM_PATHS = ("location", "rotation_euler", "rotation_quaternion", "rotation_axis_angle", "scale",
                   "delta_location", "delta_rotation_euler", "delta_rotation_quaternion", "delta_scale")


def animated_paths(id_data) -> set:
    """Data paths of `id_data` that an F-curve or a driver sets: their current values follow the timeline, so
    they are fingerprinted through their curves, never through the value at the current frame."""
    out = set()
    ad = getattr(id_data, "animation_data", None)
    if ad is None:
        return out
    for fc in (animation.channelbag_fcurves(id_data) or []):
        out.add(fc.data_path)
    for fc in ad.drivers:
        out.add(fc.data_path)
    return out


def _curves_key(id_data) -> tuple:
    keys = []
    for fc in (animation.channelbag_fcurves(id_data) or []):
        keys.append((fc.data_path, fc.array_index, tuple(tuple(kp.co) for kp in fc.keyframe_points),
                     tuple(kp.interpolation for kp in fc.keyframe_points)))
    ad = getattr(id_data, "animation_data", None)
    if ad is not None:
        keys.append(tuple((d.data_path, d.array_index, d.driver.expression) for d in ad.drivers))
        keys.append(ad.action.name if ad.action else None)
    return tuple(keys)


def _object_key(ob, named: bool = True) -> tuple:
    """An object as a preview input: its transform unless the transform is animated (then its curves: the
    current transform follows the timeline, and scrubbing must not restart the preview)."""
    animated = animated_paths(ob)
    moving = (any(p in TRANSFORM_PATHS for p in animated) or ob.parent is not None or len(ob.constraints) > 0)
    key = [ob.name if named else None, _curves_key(ob)]
    if moving:
        key += ["moving", ob.parent.name if ob.parent else None, len(ob.constraints)]
    else:
        key.append(tuple(tuple(r) for r in ob.matrix_world))
    if ob.field is not None and "field.strength" not in animated:
        key.append(ob.field.strength)
    return tuple(key)


def _walk(pg, out, prefix="", animated=frozenset(), skip=("bake", "active_force")):
    for prop in pg.bl_rna.properties:
        key = prop.identifier
        if key == "rna_type" or key in skip:
            continue
        path = f"{prefix}.{key}" if prefix else key
        if path in animated:  # keyed or driven: its curve is in the owner's key, its value moves with the frame
            out.append(("animated", path))
            continue
        value = getattr(pg, key)
        if prop.type == 'COLLECTION':
            for i, item in enumerate(value):
                _walk(item, out, f"{path}[{i}]", animated)
        elif prop.type == 'POINTER':
            if value is None:
                out.append(None)
            elif isinstance(value, bpy.types.Object):
                out.append(_object_key(value))
            elif isinstance(value, bpy.types.ID):
                out.append(value.name)
            else:
                _walk(value, out, path, animated)
        elif getattr(prop, "is_array", False):
            out.append(tuple(value))
        else:
            out.append(value)


FIELD_KEYS = ("type", "shape", "falloff_type", "falloff_power", "use_min_distance", "distance_min",
              "use_max_distance", "distance_max", "z_direction", "flow", "noise", "seed", "use_absorption",
              "inflow", "rest_length", "use_multiple_springs", "size", "use_2d_force")


def fingerprint(context, obj) -> tuple:
    """Everything a preview depends on that can change from the UI (cheap enough for every tick). Values that
    follow the timeline (keyed or driven) enter through their curves, so scrubbing does not restart a preview."""
    scene = context.scene
    out = [len(obj.data.vertices), tuple(vg.name for vg in obj.vertex_groups),
           _object_key(obj, named=False), tuple(scene.gravity), scene.use_gravity,
           scene.render.fps, scene.render.fps_base, scene.frame_start, scene.frame_end,
           stack.stack_key(obj)]
    _walk(obj.neurok, out, "neurok", animated_paths(obj))
    _walk(scene.neurok, out, "neurok", animated_paths(scene), skip=("specialize_minutes", "shape_key_mode",
                                                                 "keep_frames_before_stop"))
    if obj.neurok.use_force_fields:
        for ob in gather.field_objects(context, obj):
            f, animated = ob.field, animated_paths(ob)
            out.append(tuple(("animated", k) if f"field.{k}" in animated else getattr(f, k, None) for k in FIELD_KEYS))
            out.append(_object_key(ob))
    for ob in gather.collider_objects(context, obj):
        c = ob.collision
        out.append((_object_key(ob), c.thickness_outer, c.thickness_inner, c.cloth_friction, c.damping,
                    len(ob.data.vertices) if ob.type == 'MESH' else 0, stack.stack_key(ob)))
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
                preview_cache.remove_preview(obj)
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
        self._cache = preview_cache.PreviewCache(inputs.obj_name, inputs.vertex_count, inputs.frame_start)
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
            preview_cache.show_preview(obj, self._cache.path, self._frame_start, self._newest)

    def _cleanup(self, context, restore=True):
        self._stop_timer(context)
        obj = bpy.data.objects.get(self._obj_name)
        if restore and obj is not None:
            preview_cache.remove_preview(obj)
        self._cache.delete()
        jobs.tag_redraw(context)

    # ------------------------------------------------------------------ background (synchronous) end
    def on_done(self, context, obj, job):
        self._flush(None)
        preview_cache.show_preview(obj, self._cache.path, self._frame_start, None)
        if obj.neurok.bake.kind == 'NONE':
            records.record_ood(obj, job.ood)
        self.report({'INFO'}, f"Previewed {self._cache.samples} frames of '{obj.name}' "
                              "(the 'NeuROK Preview' modifier plays them; run Preview with Stop to remove it).")
        return {'FINISHED'}

    def _finish_fault(self, context, job):
        """Background run stopped by the guard: the frames before the stop stay in the preview (a preview is no
        bake; the file is complete after every frame), with the engine's own message."""
        obj = jobs.follow_rename(job)
        self._flush(None)
        if obj is not None and obj.type == 'MESH' and self._cache.samples:
            preview_cache.show_preview(obj, self._cache.path, self._frame_start, None)
        else:
            self._cache.delete()
        self.report({'ERROR'}, _common.fault_sentence(job, preview=True))
        return {'CANCELLED'}

    # ------------------------------------------------------------------ interactive
    def modal(self, context, event):
        mine = getattr(self, "_job", None)
        if mine is not None:  # the object may have been renamed: follow it (the modifier is on it)
            jobs.follow_rename(mine)
            self._obj_name = mine.obj_name
        job = jobs.JOBS.get(self._obj_name)
        if job is None or job.kind != "preview" or job is not self._job:
            # stopped from the button, taken over by a bake, or the file changed
            if job is None or job.kind != "preview":
                self._cleanup(context, restore=True)
            return {'CANCELLED'}
        if event.type == 'ESC' and event.value == 'PRESS':
            if job.finished:  # Esc now belongs to playback (stop the animation), not to the preview
                return {'PASS_THROUGH'}
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
                preview_cache.show_preview(obj, self._cache.path, self._frame_start, None)
            elif job.status in ("fault", "error") and not self._reported:
                self._reported = True
                self.report({'ERROR'}, _common.fault_sentence(job, preview=True) if job.status == "fault" else job.message)
            if job.ood is not None and obj.neurok.bake.kind == 'NONE':
                records.record_ood(obj, job.ood)
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
            inputs = gather.gather(context, obj)
        except NeurokError as e:
            self.report({'ERROR'}, str(e))
            self._final_shown = True
            return
        if inputs.vertex_count != self._cache.points:
            self._cache.delete()
            self._cache = preview_cache.PreviewCache(inputs.obj_name, inputs.vertex_count, inputs.frame_start)
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
