"""The engine choice and the run buttons, drawn by both the sidebar and Properties ▸ Physics."""
from __future__ import annotations

from .. import jobs, records, scene_settings
from ..engine_link import ENGINE_PROBLEM, learned_engine_status
from ..operators.bake_together import together_objects
from .common import PLACEHOLDER, wrapped

OOD_WORDS = {
    "ok": ("CHECKMARK", "Within what the model has seen: the motion should be trustworthy."),
    "caution": ("INFO", "Somewhat unusual for the model: check the motion before relying on it."),
    "out_of_range": ("ERROR", "Far from what the model was trained on: the motion may be wrong. "
                              "Try the Reference engine or Specialize."),
}


def draw_engine(layout, context) -> None:
    """The engine choice, and before any click why it cannot run (if it cannot)."""
    s = context.scene.neurok
    col = layout.column()
    if ENGINE_PROBLEM:  # neither engine can run in this Blender
        wrapped(col, ENGINE_PROBLEM, icon='ERROR', alert=True)
    col.prop(s, "engine", text="Engine")
    if s.engine == 'NEUROK' and not ENGINE_PROBLEM:
        if PLACEHOLDER:
            col.prop(s, "model_path", text="Model", placeholder="Bundled model")
        else:
            col.prop(s, "model_path", text="Model")
        problem = learned_engine_status(scene_settings.model_file(context))
        if problem:
            wrapped(col, problem, icon='ERROR', alert=True)


def draw_progress(layout, obj) -> None:
    job = jobs.JOBS.get(obj.name)
    if job is not None:
        row = layout.row(align=True)
        row.progress(factor=job.factor(), type='BAR', text=f"{job.kind.title()}: {job.progress_text()}")
        op = row.operator("neurok.cancel", text="", icon='X')
        op.object_name = obj.name
    previewing = job is not None and job.kind == "preview"
    layout.row(align=True).operator("neurok.preview", text="Stop Preview" if previewing else "Preview",
                                    icon='PAUSE' if previewing else 'PLAY', depress=previewing)


def draw_last_bake(layout, context, obj) -> None:
    bake = obj.neurok.bake
    if bake.kind != 'NONE':
        kind = "Mesh Cache" if bake.kind == 'CACHE' else "Shape Keys"
        layout.label(text=f"Baked: {kind}, {bake.frames} frames from {bake.frame_start} "
                          f"({bake.engine}, {bake.seconds:.1f} s)", icon='CHECKMARK')
    problem = records.bake_problem(obj)
    if problem:
        wrapped(layout, problem, icon='ERROR', alert=True)
    if bake.kind != 'NONE' and bake.note:
        wrapped(layout, f"Note: {bake.note}.", icon='INFO')
    if bake.ood_level:
        icon, words = OOD_WORDS.get(bake.ood_level, ('INFO', bake.ood_level))
        wrapped(layout, f"Model fit {bake.ood_score:.2f}: {words}", icon=icon, alert=bake.ood_level == "out_of_range")
        if bake.ood_message:
            wrapped(layout, bake.ood_message)
    elif context.scene.neurok.engine == 'REFERENCE':
        layout.label(text="Reference engine: exact, no model-fit check.", icon='INFO')


def draw_run(layout, context, obj) -> None:
    """Progress, Preview, the bakes, and what the last bake was."""
    box = layout.box()
    draw_progress(box, obj)
    row = box.row(align=True)
    row.operator("neurok.bake_cache", text="Bake Cache", icon='FILE_CACHE')
    row.operator("neurok.bake_shape_keys", text="Bake Shape Keys", icon='SHAPEKEY_DATA')
    draw_together(box, context)
    box.operator("neurok.free_bake", text="Free Bake", icon='TRASH')
    box.prop(context.scene.neurok, "keep_frames_before_stop")
    draw_last_bake(box, context, obj)


def draw_together(layout, context) -> None:
    """With two or more NeuROK objects selected: bake them as one simulation (they collide)."""
    count = len(together_objects(context))
    if count >= 2:
        layout.operator("neurok.bake_together", text=f"Bake {count} Selected Together", icon='MOD_PHYSICS')
