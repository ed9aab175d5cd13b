"""Force fields: the objects whose field acts on the body (Effector Collection, Field Weights) ->
engine `Effector`s with their world matrix and strength every frame. Nothing is evaluated here:
both engines evaluate the effectors on the deformed surface every step (engine/core/fields.py)."""
from __future__ import annotations

from .. import fields


def field_objects(context, obj) -> list:
    """Objects carrying a force field that acts on `obj`: the Effector Collection's when one is set (like
    Cloth ▸ Field Weights ▸ Effector Collection), else the scene's; visible in the view layer."""
    coll = obj.neurok.field_collection
    pool = coll.all_objects if coll is not None else context.scene.objects
    layer_objects = context.view_layer.objects
    return [ob for ob in pool if ob != obj and ob.field is not None and ob.field.type != 'NONE'
            and not ob.hide_viewport and ob.name in layer_objects]


def gather_field_params(context, obj, warnings: list) -> list[dict]:
    """`fields.describe()` parameters of the fields acting on `obj` (none when Force Fields is off);
    the settings NeuROK does not follow go to `warnings`."""
    settings = obj.neurok
    out = []
    for ob in field_objects(context, obj) if settings.use_force_fields else []:
        params, problems = fields.describe(ob, settings.field_weights)
        warnings.extend(problems)
        if params is not None:
            out.append(params)
    return out


def gather_effectors(field_params, sampled: dict, influence: float) -> list:
    return [fields.effector(p, sampled[p["name"]]["matrix"], sampled[p["name"]]["strength"], influence)
            for p in field_params]
