"""neurok.bake_shape_keys: simulate (or convert the current cache) and key every frame as a shape key."""

import bpy
from bpy.props import EnumProperty, StringProperty

from .. import cache_files, preview_cache, records, shape_keys, stack
from ..engine_link import formats
from . import _common


def shape_key_problem(obj, inputs) -> str | None:
    """Shape keys sit below the whole modifier stack: with modifiers before NeuROK they would deform the result again."""
    before = [m.name for m in stack.modifiers_before(obj) if m.show_viewport]
    if before or inputs.vertex_count != inputs.data_vertices:
        return (f"'{obj.name}' simulates on top of its modifiers ({', '.join(before) or 'topology changes'}), which "
                "shape keys would pass through again; bake to a Mesh Cache instead.")
    return None


class NEUROK_OT_bake_shape_keys(_common.JobOperator, bpy.types.Operator):
    """Simulate the frame range and key one shape key per frame (absolute keys on one linear Evaluation Time
    curve, or relative keys keyed 0/1/0)"""
    bl_idname = "neurok.bake_shape_keys"
    bl_label = "Bake to Shape Keys"
    bl_options = {'REGISTER', 'UNDO'}

    object_name: StringProperty(name="Object", options={'SKIP_SAVE', 'HIDDEN'})
    mode: EnumProperty(
        name="Mode", default='SCENE',
        items=[('SCENE', "From Settings", "Use the Shape Keys setting of the NeuROK panel"),
               ('ABSOLUTE', "Absolute", "One key per frame on one linear Evaluation Time curve"),
               ('RELATIVE', "Relative", "Relative keys keyed 0/1/0")])
    source: EnumProperty(
        name="Source", default='SIMULATE',
        items=[('SIMULATE', "Simulate", "Run the engine"),
               ('CACHE', "Current Cache", "Convert the existing NeuROK Mesh Cache bake without simulating again")])

    job_kind = "bake"
    keeps_partial = True  # Keep Frames Before a Stop: the good frames become fewer shape keys

    def _mode(self, context):
        return context.scene.neurok.shape_key_mode if self.mode == 'SCENE' else self.mode

    def execute(self, context):
        obj = _common.target_or_report(self, context, self.object_name)
        if obj is None or _common.busy_or_report(self, obj.name):
            return {'CANCELLED'}
        if self.source == 'CACHE':
            return self._from_cache(context, obj)
        inputs = _common.gather_or_report(self, context, obj)
        if inputs is None:
            return {'CANCELLED'}
        problem = shape_key_problem(obj, inputs)
        if problem:
            self.report({'ERROR'}, problem)
            return {'CANCELLED'}
        return self.start_job(context, inputs)

    def _from_cache(self, context, obj):
        bake = obj.neurok.bake
        if bake.kind != 'CACHE' or not bake.cache_path:
            self.report({'ERROR'}, f"'{obj.name}' has no NeuROK Mesh Cache bake to convert.")
            return {'CANCELLED'}
        problem = records.bake_problem(obj)
        if problem:
            self.report({'ERROR'}, problem)
            return {'CANCELLED'}
        try:
            local, start, _rate = formats.read_pc2(bpy.path.abspath(bake.cache_path))
        except formats.NeurokError as e:
            self.report({'ERROR'}, str(e).rstrip(".") + ".")
            return {'CANCELLED'}
        try:
            mode, warnings = shape_keys.write_shape_keys(obj, local, bake.frame_start, self._mode(context))
        except formats.NeurokError as e:
            self.report({'ERROR'}, str(e))
            return {'CANCELLED'}
        _common.report_warnings(self, warnings)
        cache_files.remove_cache(obj)
        bake.kind = 'SHAPE_KEYS'
        self.report({'INFO'}, f"Converted {len(local)} cached frames of '{obj.name}' to {mode.lower()} shape keys.")
        return {'FINISHED'}

    def on_done(self, context, obj, job):
        inputs = job.inputs
        local = inputs.to_local(job.result)
        preview_cache.remove_preview(obj)
        mode, warnings = shape_keys.write_shape_keys(obj, local, inputs.frame_start, self._mode(context))
        _common.report_warnings(self, warnings)
        if obj.neurok.bake.kind == 'CACHE' or stack.own_modifier(obj, stack.CACHE_MODIFIER):
            cache_files.remove_cache(obj)
        records.record_bake(obj, 'SHAPE_KEYS', inputs, job.elapsed(), job.ood)
        obj.neurok.bake.frames = len(local)  # fewer than asked when a stop kept only the frames before it
        self.report({'INFO'}, f"Baked {len(local)} frames of '{obj.name}' to {mode.lower()} shape keys "
                              f"in {job.elapsed():.1f} s.")
        return {'FINISHED'}
