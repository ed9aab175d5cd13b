"""Shared operator plumbing: start a job (thread + timer modal, or inline in background mode),
drain its queue on TIMER events, and finish on the main thread with fresh bpy lookups."""

import os

import bpy

from .. import cache_files, gather, jobs, mesh_data, objects, preferences, scene_settings
from ..engine_link import NeurokError, learned_engine_status


def beside_blend(suffix: str, temp_name: str) -> tuple[str, str]:
    """(absolute path, path to store) of a file `<blend name>.<suffix>` next to the saved .blend (stored
    relative), or `temp_name` in the temporary cache folder for an unsaved file."""
    if bpy.data.filepath:
        stem = os.path.splitext(os.path.basename(bpy.data.filepath))[0]
        path = os.path.join(os.path.dirname(bpy.data.filepath), f"{stem}.{suffix}")
        return path, bpy.path.relpath(path)
    path = str(cache_files.temp_cache_dir() / temp_name)
    return path, path


def report_warnings(op, warnings) -> None:
    for w in dict.fromkeys(warnings):
        op.report({'WARNING'}, w)


MODEL_JOBS = ("specialize", "learn_material")   # they write a model file, not the object: its edits do not matter
ADVICE = "try more damping, a stiffer material or the Reference engine"
ADVICE_REFERENCE = "try weaker forces or a stiffer material"  # the reference itself stopped (guard or work budget)


def good_frames(job) -> int:
    """How many plausible frames a stopped run computed before its fault (0 when none were kept)."""
    return 0 if job.partial is None else len(job.partial)


def fault_sentence(job, kept: int | None = None, preview: bool = False) -> str:
    """The engine's own one line (the same as `neurok simulate`: the frame and the limit it broke), with the scene
    frame, and what became of the frames before it."""
    where = "" if job.fault_frame is None else f" at scene frame {job.inputs.frame_start + int(job.fault_frame)}"
    what = (job.message or "the simulation became unstable").strip().rstrip(".")
    if preview:
        tail = "the preview shows the frames before it"
    elif kept:
        tail = (f"kept the {kept} frames before it as a shorter bake "
                f"(scene frames {job.inputs.frame_start}–{job.inputs.frame_start + kept - 1})")
    else:
        n = good_frames(job)
        tail = "nothing was written" + (f" (turn on Keep Frames Before a Stop to keep the {n} good frames)" if n > 1 else "")
    advice = ADVICE_REFERENCE if getattr(job.inputs, "engine", None) == "reference" else ADVICE
    return f"NeuROK stopped{where}: {what}; {tail}; {advice}."


class JobOperator:
    """Mixin for operators that run a `jobs.Job`. Subclasses set `job_kind` and implement `on_done`."""
    job_kind = "bake"
    stream = False
    cancelled_message = "Bake cancelled; nothing was changed."

    _timer = None
    _obj_name = ""

    def start_job(self, context, inputs, task=None, total=None):
        job = jobs.Job(self.job_kind, inputs, device=preferences.device(context), stream=self.stream,
                       task=task, total=total)
        job.handler = self.on_message
        jobs.JOBS[inputs.obj_name] = job
        self._obj_name = inputs.obj_name
        self._job = job
        if jobs.synchronous(context):
            try:
                job.run_sync()
            finally:
                jobs.JOBS.pop(inputs.obj_name, None)
            return self.finish(context, job)
        job.start()
        wm = context.window_manager
        self._timer = wm.event_timer_add(preferences.timer_interval(context), window=context.window)
        wm.modal_handler_add(self)
        jobs.tag_redraw(context)
        return {'RUNNING_MODAL'}

    def _stop_timer(self, context):
        if self._timer is not None:
            context.window_manager.event_timer_remove(self._timer)
            self._timer = None

    def modal(self, context, event):
        mine = getattr(self, "_job", None)
        if mine is not None:  # the object may have been renamed: follow it
            jobs.follow_rename(mine)
            self._obj_name = mine.obj_name
        job = jobs.JOBS.get(self._obj_name)
        if job is None:  # the job was dropped (file loaded, add-on disabled)
            self._stop_timer(context)
            return {'CANCELLED'}
        if event.type == 'ESC' and event.value == 'PRESS':
            job.cancel.set()
            return {'RUNNING_MODAL'}
        if event.type == 'TIMER':
            job.drain()
            self.on_tick(context, job)
            jobs.tag_redraw(context)
            if job.finished:
                self._stop_timer(context)
                if jobs.JOBS.get(self._obj_name) is job:
                    del jobs.JOBS[self._obj_name]
                result = self.finish(context, job)
                jobs.tag_redraw(context)
                return result
        return {'PASS_THROUGH'}

    def cancel(self, context):  # Blender calls this when the modal is killed (file load, quit)
        job = jobs.JOBS.pop(self._obj_name, None)
        if job is not None:
            job.cancel.set()
        self._stop_timer(context)

    # hooks -------------------------------------------------------------
    def on_message(self, job, msg):
        pass

    def on_tick(self, context, job):
        pass

    def on_done(self, context, obj, job):
        raise NotImplementedError

    keeps_partial = False  # operators that can write the frames before a stop as a shorter bake

    def _finish_fault(self, context, job):
        """A run stopped by the guard or an unsolvable step: nothing is written unless the user chose Keep Frames
        Before a Stop; then the good frames become a complete, shorter bake through the operator's own `on_done`
        (the cache file is written atomically: never half a file)."""
        keep = self.keeps_partial and context.scene.neurok.keep_frames_before_stop and good_frames(job) > 1
        obj = jobs.follow_rename(job) if keep else None
        if keep and (obj is None or obj.type != 'MESH' or len(obj.data.vertices) != job.inputs.data_vertices
                     or mesh_data.topology_hash(obj.data) != job.inputs.topology):
            keep = False
        if not keep:
            self.report({'ERROR'}, fault_sentence(job))
            return {'CANCELLED'}
        job.result = job.partial
        try:
            self.on_done(context, obj, job)
        except NeurokError as e:
            self.report({'ERROR'}, str(e))
            return {'CANCELLED'}
        except OSError as e:
            where = f" ({e.filename})" if getattr(e, "filename", None) else ""
            self.report({'ERROR'}, f"Could not write the result{where}: {e.strerror or e}.")
            return {'CANCELLED'}
        self.report({'WARNING'}, fault_sentence(job, kept=len(job.partial)))
        return {'FINISHED'}

    def finish(self, context, job):
        if job.status == "cancelled":
            self.report({'WARNING'}, self.cancelled_message)
            return {'CANCELLED'}
        if job.status == "fault":
            return self._finish_fault(context, job)
        if job.status == "error":
            msg = job.message.strip() or "The engine failed."
            self.report({'ERROR'}, msg if msg.endswith(".") else msg + ".")
            return {'CANCELLED'}
        obj = jobs.follow_rename(job)
        if obj is None or obj.type != 'MESH':
            self.report({'ERROR'}, f"'{job.obj_name}' was deleted while NeuROK was running; nothing was written.")
            return {'CANCELLED'}
        if job.kind not in MODEL_JOBS and (len(obj.data.vertices) != job.inputs.data_vertices
                                         or mesh_data.topology_hash(obj.data) != job.inputs.topology):
            self.report({'ERROR'}, f"'{obj.name}' was edited while NeuROK was running, so nothing was written; run it again.")
            return {'CANCELLED'}
        try:
            return self.on_done(context, obj, job)
        except NeurokError as e:
            self.report({'ERROR'}, str(e))
            return {'CANCELLED'}
        except OSError as e:
            where = f" ({e.filename})" if getattr(e, "filename", None) else ""
            self.report({'ERROR'}, f"Could not write the result{where}: {e.strerror or e}.")
            return {'CANCELLED'}


def gather_or_report(op, context, obj, check_engine=True):
    try:
        inputs = gather.gather(context, obj, check_engine=check_engine)
    except NeurokError as e:
        op.report({'ERROR'}, str(e))
        return None
    report_warnings(op, inputs.warnings)
    return inputs


def target_or_report(op, context, name=""):
    try:
        return objects.target_object(context, name)
    except NeurokError as e:
        op.report({'ERROR'}, str(e))
        return None


def busy_or_report(op, obj_name) -> bool:
    job = jobs.JOBS.get(obj_name)
    if job is None:
        return False
    if job.kind == "preview":  # a bake takes over from a running preview
        job.cancel.set()
        jobs.JOBS.pop(obj_name, None)
        return False
    op.report({'ERROR'}, f"NeuROK is already running a {job.kind} on '{obj_name}'; wait for it or press Esc.")
    return True


class LearnedOnly:
    """Mixin for what only the learned engine does (Sample Pose, Specialize): greyed out, with the reason,
    while it cannot run. `why_learned` starts the reason ("" for the engine's own sentence alone)."""
    why_learned = ""

    @classmethod
    def unavailable_reason(cls, context) -> str | None:
        problem = learned_engine_status(scene_settings.model_file(context))
        if problem and cls.why_learned:
            return f"{cls.why_learned}: {problem[0].lower()}{problem[1:]}"
        return problem

    @classmethod
    def poll(cls, context):
        reason = cls.unavailable_reason(context)
        if reason:
            cls.poll_message_set(reason)
        return reason is None

    def refused(self, context) -> bool:
        """True (and the reason reported) when the learned engine cannot run."""
        reason = self.unavailable_reason(context)
        if reason:
            self.report({'ERROR'}, reason)
        return reason is not None
