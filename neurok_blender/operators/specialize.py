"""neurok.specialize: fine-tune the learned model on this object (reference-simulated for a few minutes)."""

import os

import bpy
from bpy.props import FloatProperty, StringProperty

from .. import bridge, jobs
from ..engine_link import has_module, learned_engine_status, module
from . import _common


def unavailable_reason(context) -> str | None:
    if not has_module("specialize"):
        return "Per-object specialization is not part of this build yet (engine/specialize.py is missing)."
    s = context.scene.neurok
    problem = learned_engine_status(bpy.path.abspath(s.model_path) if s.model_path else "")
    if problem:
        return "Specialization fine-tunes the learned model: " + problem[0].lower() + problem[1:]
    return None


def output_path(obj) -> tuple[str, str]:
    name = bpy.path.clean_name(obj.name)
    if bpy.data.filepath:
        path = os.path.join(os.path.dirname(bpy.data.filepath),
                            f"{os.path.splitext(os.path.basename(bpy.data.filepath))[0]}.{name}.neurok.ckpt")
        return path, bpy.path.relpath(path)
    path = str(bridge.temp_cache_dir() / f"specialized_{os.getpid()}_{name}.neurok.ckpt")
    return path, path


def specialize_arguments(fn, inputs, minutes, path, model) -> dict:
    """Keyword arguments for engine.specialize.specialize, following its signature."""
    import inspect
    params = inspect.signature(fn).parameters
    kwargs = {"minutes": float(minutes)}
    first = next(iter(params))
    kwargs[first] = inputs.mesh  # the mesh, world space (what the bake simulates)
    for name in ("out", "out_path", "output"):
        if name in params:
            kwargs[name] = path
            break
    if "scene" in params:
        kwargs["scene"] = inputs.scene
    if "model" in params and model:
        kwargs["model"] = model
    if "kind" in params:
        kwargs["kind"] = inputs.setup.material.get("kind")
    if "quiet" in params:
        kwargs["quiet"] = True
    return kwargs


class NEUROK_OT_specialize(_common.JobOperator, bpy.types.Operator):
    """Fine-tune the learned model on this object: simulate it with the reference engine for a while and train
    on that; the result becomes this scene's model file"""
    bl_idname = "neurok.specialize"
    bl_label = "Specialize Model"
    bl_options = {'REGISTER', 'UNDO'}

    object_name: StringProperty(name="Object", options={'SKIP_SAVE', 'HIDDEN'})
    minutes: FloatProperty(name="Minutes", default=0.0, min=0.0, options={'SKIP_SAVE'},
                           description="Training time (0: the NeuROK panel's Minutes setting)")

    job_kind = "specialize"
    cancelled_message = "Specialization cancelled; the model was not changed."

    @classmethod
    def poll(cls, context):
        reason = unavailable_reason(context)
        if reason:
            cls.poll_message_set(reason)
            return False
        return True

    def execute(self, context):
        reason = unavailable_reason(context)
        if reason:
            self.report({'ERROR'}, reason)
            return {'CANCELLED'}
        obj = _common.target_or_report(self, context, self.object_name)
        if obj is None or _common.busy_or_report(self, obj.name):
            return {'CANCELLED'}
        inputs = _common.gather_or_report(self, context, obj, check_engine=False)
        if inputs is None:
            return {'CANCELLED'}
        minutes = self.minutes or context.scene.neurok.specialize_minutes
        path, stored = output_path(obj)
        self._stored = stored
        model = bpy.path.abspath(context.scene.neurok.model_path) if context.scene.neurok.model_path else None
        kwargs = specialize_arguments(module("specialize").specialize, inputs, minutes, path, model)
        fn = module("specialize").specialize

        def task(job):
            def progress(*args):
                # engine.specialize reports progress(fraction, message); (done, total) is accepted too
                if args and isinstance(args[0], float) and (len(args) == 1 or isinstance(args[1], str)):
                    if len(args) > 1 and args[1]:
                        job._emit("stage", str(args[1]).capitalize())
                    job._progress(int(round(1000 * min(max(args[0], 0.0), 1.0))), 1000)
                elif len(args) >= 2:
                    job._progress(int(args[0]), int(args[1]))
            return fn(progress=progress, cancel=job.cancel, **kwargs)

        return self.start_job(context, inputs, task=task, total=1000)

    def on_done(self, context, obj, job):
        s = context.scene.neurok
        result = str(job.result) if job.result else bpy.path.abspath(self._stored)
        s.model_path = bpy.path.relpath(result) if bpy.data.filepath else result
        s.engine = 'NEUROK'
        jobs.forget_engines()
        self.report({'INFO'}, f"Specialized the model on '{obj.name}' in {job.elapsed():.0f} s; it is now this scene's model.")
        return {'FINISHED'}
