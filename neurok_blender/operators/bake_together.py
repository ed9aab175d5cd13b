"""neurok.bake_together: bake the selected NeuROK objects as one simulation, so that they collide
with each other instead of passing through (each object feels the others as moving colliders,
engine/core/coupling.py); every object gets its Mesh Cache as with Bake to Mesh Cache."""

import bpy

from .. import cache_files, jobs, mesh_data, objects, preview_cache, records, shape_keys
from ..engine_link import NeurokError, SimulationFault, api
from . import _common


def together_objects(context) -> list:
    """The selected mesh objects with NeuROK physics, the active one first."""
    obs = [ob for ob in context.selected_objects if ob.type == 'MESH' and ob.neurok.enabled]
    active = context.active_object
    if active in obs:
        obs.remove(active)
        obs.insert(0, active)
    return obs


class NEUROK_OT_bake_together(_common.JobOperator, bpy.types.Operator):
    """Bake the selected NeuROK objects as one simulation, so they collide with each other instead of passing
    through; each gets its own Mesh Cache"""
    bl_idname = "neurok.bake_together"
    bl_label = "Bake Selected Together"
    bl_options = {'REGISTER', 'UNDO'}

    job_kind = "bake"
    _names: tuple = ()

    def execute(self, context):
        obs = together_objects(context)
        if len(obs) < 2:
            self.report({'ERROR'}, "Select two or more objects with NeuROK physics to bake them together.")
            return {'CANCELLED'}
        if any(_common.busy_or_report(self, ob.name) for ob in obs):
            return {'CANCELLED'}
        group = []
        for ob in obs:
            inputs = _common.gather_or_report(self, context, ob)
            if inputs is None:
                return {'CANCELLED'}
            group.append(inputs)
        names = [inputs.obj_name for inputs in group]
        for inputs in group:  # the others are simulated partners now, not static or baked colliders
            inputs.setup.colliders = [c for c in inputs.setup.colliders if c.name not in names]
        lead = group[0]

        def task(job):
            engine = jobs.get_engine(lead.engine, lead.model, job.device)
            job._emit("stage", "Preparing")
            together = api.prepare_together([inputs.setup for inputs in group], engine, names=names)
            job._emit("stage", "Simulating")
            try:
                return together.bake(progress=job._progress, cancel=job.cancel)
            except SimulationFault as fault:
                fault.positions = None  # one object's stop ends the bake of all: nothing is kept
                raise

        self._group, self._names = group, tuple(names[1:])
        result = self.start_job(context, lead, task=task, total=lead.frames)
        if result == {'RUNNING_MODAL'}:  # the partners are busy too, and show the same progress
            for name in self._names:
                jobs.JOBS[name] = self._job
        return result

    def _release(self):
        for name in self._names:
            if jobs.JOBS.get(name) is getattr(self, "_job", None):
                del jobs.JOBS[name]

    def finish(self, context, job):
        self._release()
        return super().finish(context, job)

    def cancel(self, context):
        self._release()
        super().cancel(context)

    def on_done(self, context, obj, job):
        written = []
        for inputs, frames in zip(self._group, job.result):
            ob = objects.find_object(inputs.obj_name, inputs.obj_uid)
            if ob is None or ob.type != 'MESH' or len(ob.data.vertices) != inputs.data_vertices \
                    or mesh_data.topology_hash(ob.data) != inputs.topology:
                raise NeurokError(f"'{inputs.obj_name}' was deleted or edited while NeuROK was running; nothing was "
                                  "written for it")
            written.append((ob, inputs, inputs.to_local(frames)))
        for ob, inputs, local in written:  # every check first: all objects are written, or none
            cache_files.write_cache(ob, local, inputs.frame_start)
            preview_cache.remove_preview(ob)
            if ob.neurok.bake.kind == 'SHAPE_KEYS':
                shape_keys.remove_shape_keys(ob)
            records.record_bake(ob, 'CACHE', inputs, job.elapsed(), None)
            ob.neurok.bake.frames = len(local)
        self.report({'INFO'}, f"Baked {len(written[0][2])} frames of {len(written)} objects together "
                              f"in {job.elapsed():.1f} s.")
        return {'FINISHED'}
