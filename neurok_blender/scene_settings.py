"""The scene's settings as engine numbers: frame range, time step, gravity, material, engine."""
from __future__ import annotations

import bpy

from .engine_link import ENGINE_PROBLEM, learned_engine_status
from .engine_link import scene as escene
from .objects import UserError


def frame_range(scene) -> tuple[int, int]:
    s = scene.neurok
    if s.use_scene_range:
        return scene.frame_start, scene.frame_end
    return s.frame_start, s.frame_end


def scene_dt(scene) -> float:
    return float(scene.render.fps_base) / float(scene.render.fps)


def scene_gravity(scene) -> list[float]:
    if not scene.use_gravity:
        return [0.0, 0.0, 0.0]
    return [float(x) for x in scene.gravity]


def material_dict(settings) -> dict:
    """The scene's material: the preset's name when the sliders still match it, explicit values always."""
    cloth = settings.kind == 'CLOTH'
    out = {"kind": "cloth" if cloth else "solid", "stiffness": settings.stiffness,
           "density": settings.areal_density if cloth else settings.density,
           "poisson": settings.poisson, "damping": settings.damping, "air_damping": settings.air_damping,
           "bending": settings.bending}
    if settings.preset in escene.MATERIAL_PRESETS or settings.preset in escene.LEARNED_PRESETS:
        out = {"preset": settings.preset, **out}
    return out


def model_file(context) -> str:
    """The scene's model file as an absolute path; "" for the bundled model."""
    path = context.scene.neurok.model_path
    return bpy.path.abspath(path) if path else ""


def choose_engine(context) -> tuple[str, str | None]:
    s = context.scene.neurok
    if ENGINE_PROBLEM:  # both engines run inside the engine package, which needs torch and scipy
        raise UserError(ENGINE_PROBLEM)
    if s.engine == 'REFERENCE':
        return "reference", None
    model = model_file(context)
    problem = learned_engine_status(model)
    if problem:
        raise UserError(problem)
    return "neurok", (model or None)
