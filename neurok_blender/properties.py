"""Settings stored in the .blend: `Object.neurok` (material, pins, painted forces, bake record)
and `Scene.neurok` (engine, floor, frame range). Nothing about a running job is stored here."""

import os
import zlib

import bpy
from bpy.props import (BoolProperty, CollectionProperty, EnumProperty, FloatProperty, FloatVectorProperty,
                       IntProperty, PointerProperty, StringProperty)

from . import engine_link as _link
from .engine_link import scene as _scene

PRESETS = _scene.MATERIAL_PRESETS      # built in; `preset_values` also knows the learned ones
BUILT_IN_ITEMS = [
    ("jelly", "Jelly", "Very soft, wobbly solid (3 kPa)", 0),
    ("rubber", "Rubber", "Firm, bouncy solid (100 kPa)", 1),
    ("foam", "Foam", "Light, squashy solid that keeps little volume", 2),
    ("plush", "Plush", "Soft toy: light and well damped", 3),
    ("cloth", "Cloth", "Thin sheet: cotton-like cloth", 4),
    ("leather", "Leather", "Thin sheet: heavy, stiff to bend", 5),
]
CUSTOM_ITEM = ('CUSTOM', "Custom", "The sliders no longer match a preset (save them with the preset menu)", 6)
_ITEMS = []          # Blender keeps no reference to a dynamic enum's strings: they must live here
_MODEL_TABLES = {}   # model file -> (modified time, its learned materials)


def learned_presets(context) -> dict:
    """The learned materials of this scene's model (or the bundled one): name -> material. A model file's
    table is read once per change of the file; they also become nameable in scenes."""
    if _link.api is None:
        return {}
    path = _scene_model(context)
    try:
        stamp = os.path.getmtime(path) if path else 0.0
        if _MODEL_TABLES.get(path, (None,))[0] != stamp:
            _MODEL_TABLES[path] = (stamp, _link.api.learned_presets(path or None))
    except (OSError, _link.NeurokError):   # a missing or unreadable model file: the panel says so elsewhere
        return {}
    return _MODEL_TABLES[path][1]


def refresh_learned_presets(context) -> None:
    """Read the scene's model file again (after Learn Material from Bake wrote it)."""
    _MODEL_TABLES.pop(_scene_model(context), None)
    learned_presets(context)


def _scene_model(context) -> str:
    scene = getattr(context, "scene", None)
    path = scene.neurok.model_path if scene is not None and hasattr(scene, "neurok") else ""
    return bpy.path.abspath(path) if path else ""


def preset_values(name: str) -> dict | None:
    return PRESETS.get(name) or _scene.LEARNED_PRESETS.get(name)


def preset_items(self, context):
    learned = [(name, name.replace("_", " ").title(), f"Learned from data: {m.get('kind', 'solid')} "
                f"(in this scene's model)", 100 + zlib.crc32(name.encode()) % 1_000_000)
               for name, m in sorted(learned_presets(context).items()) if name not in PRESETS]
    _ITEMS[:] = BUILT_IN_ITEMS + learned + [CUSTOM_ITEM]
    return _ITEMS


# Blender 5.0 warns when a FILE_PATH property holds a "//" path unless it says it supports them.
REL_PATH = {'PATH_SUPPORTS_BLEND_RELATIVE'} if bpy.app.version >= (5, 0, 0) else set()

SLIDERS = ("stiffness", "density", "poisson", "damping", "air_damping", "bending")
_APPLYING = []  # set while a preset fills the sliders (their update callbacks must not call it Custom)


def preset_kind(name: str) -> str:
    return (preset_values(name) or {}).get("kind", "solid")


def _apply_preset(self, context):
    values = preset_values(self.preset)
    if not values:
        return
    _APPLYING.append(True)
    try:
        self.kind = values.get("kind", "solid").upper()
        for key in SLIDERS:
            if key in values:
                target = "areal_density" if key == "density" and self.kind == 'CLOTH' else key
                setattr(self, target, float(values[key]))
    finally:
        _APPLYING.pop()


def preset_matches(settings) -> bool:
    """Whether every slider still holds the chosen preset's value."""
    values = preset_values(settings.preset)
    if not values or preset_kind(settings.preset).upper() != settings.kind:
        return False
    for key in SLIDERS:
        if key not in values:
            continue
        target = "areal_density" if key == "density" and settings.kind == 'CLOTH' else key
        if abs(getattr(settings, target) - float(values[key])) > 1e-6 * max(1.0, abs(float(values[key]))):
            return False
    return True


def _slider_moved(self, context):
    """A slider moved away from the preset: the preset name must not lie, so it becomes Custom."""
    if _APPLYING or self.preset == 'CUSTOM':
        return
    if not preset_matches(self):
        _APPLYING.append(True)
        try:
            self.preset = 'CUSTOM'
        finally:
            _APPLYING.pop()


def _get_stiffness_log(self):
    import math
    return math.log10(max(self.stiffness, 1e-3))


def _set_stiffness_log(self, value):
    self.stiffness = float(10.0 ** value)


class NeurokForce(bpy.types.PropertyGroup):
    """One painted force: a vertex group pushed with an acceleration over time."""
    enabled: BoolProperty(name="Enabled", default=True, description="Apply this force")
    vertex_group: StringProperty(
        name="Vertex Group",
        description="Where the force acts: the group's weights scale it per vertex (paint them in Weight Paint mode)")
    strength: FloatProperty(
        name="Strength", default=10.0, soft_min=-200.0, soft_max=200.0, unit='ACCELERATION',
        description="Acceleration in m/s² at weight 1 (gravity is 9.81). With the Keyframed profile, "
                    "key this value (I over the field) and NeuROK samples its curve every frame")
    direction_mode: EnumProperty(
        name="Direction", default='VECTOR',
        items=[('VECTOR', "Vector", "A fixed direction in world space"),
               ('OBJECT', "Object Axis", "An axis of another object (follows its animated rotation), "
                                         "like aiming a Wind field")])
    direction: FloatVectorProperty(name="Vector", size=3, default=(1.0, 0.0, 0.0), subtype='XYZ',
                                   description="Direction of the force in world space (its length is ignored)")
    direction_object: PointerProperty(name="Object", type=bpy.types.Object,
                                      description="Object whose axis gives the direction, frame by frame")
    axis: EnumProperty(name="Axis", default='POS_Z',
                       items=[('POS_X', "+X", ""), ('POS_Y', "+Y", ""), ('POS_Z', "+Z", ""),
                              ('NEG_X', "-X", ""), ('NEG_Y', "-Y", ""), ('NEG_Z', "-Z", "")])
    profile: EnumProperty(
        name="Profile", default='CONSTANT',
        items=[('CONSTANT', "Constant", "Full strength from Start to End"),
               ('IMPULSE', "Impulse", "A short push lasting Duration frames from Start (a poke)"),
               ('SINE', "Sine", "Strength × sin(2π·frequency·time) from Start to End (gusts, shaking)"),
               ('KEYFRAMED', "Keyframed", "Strength follows its own F-curve: key the Strength value over time")])
    frame_start: IntProperty(name="Start", default=1, description="First frame the force acts (scene frame)")
    frame_end: IntProperty(name="End", default=250, description="Frame the force stops (scene frame)")
    duration: IntProperty(name="Duration", default=1, min=1, description="Frames an impulse lasts")
    frequency: FloatProperty(name="Frequency", default=1.0, min=0.001, soft_max=10.0,
                             description="Oscillations per second for the Sine profile")


class NeurokBake(bpy.types.PropertyGroup):
    """What the last bake wrote (read back to free it, to detect topology changes, to show the OOD score)."""
    kind: EnumProperty(name="Bake", default='NONE',
                       items=[('NONE', "None", ""), ('CACHE', "Mesh Cache", ""), ('SHAPE_KEYS', "Shape Keys", "")])
    cache_path: StringProperty(name="Cache File", subtype='FILE_PATH', options=REL_PATH,
                               description="PC2 file written by the last Mesh Cache bake")
    frame_start: IntProperty(name="First Frame")
    frames: IntProperty(name="Frames")
    vertex_count: IntProperty(name="Vertices")
    topology: StringProperty(name="Topology Hash")
    engine: StringProperty(name="Engine")
    seconds: FloatProperty(name="Seconds")
    owns_basis: BoolProperty(name="Owns Basis", description="NeuROK created the Basis shape key")
    shape_key_mode: StringProperty(name="Shape Key Mode")
    action_name: StringProperty(name="Action", description="Action NeuROK created for its shape-key curves")
    ood_score: FloatProperty(name="OOD Score", default=-1.0)
    ood_level: StringProperty(name="OOD Level")
    ood_message: StringProperty(name="OOD Message")
    note: StringProperty(name="Note", description="What the engine noted about the setup (e.g. a solid held at a point)")


class NeurokFieldWeights(bpy.types.PropertyGroup):
    """Like Cloth ▸ Field Weights: how much each kind of force field (and gravity) acts on this object."""
    gravity: FloatProperty(name="Gravity", default=1.0, min=0.0, max=1.0, subtype='FACTOR',
                           description="Share of the scene's gravity that acts on this object")
    all: FloatProperty(name="All", default=1.0, min=0.0, max=1.0, subtype='FACTOR', description="Scales every field")
    force: FloatProperty(name="Force", default=1.0, min=0.0, max=1.0, subtype='FACTOR')
    wind: FloatProperty(name="Wind", default=1.0, min=0.0, max=1.0, subtype='FACTOR')
    vortex: FloatProperty(name="Vortex", default=1.0, min=0.0, max=1.0, subtype='FACTOR')
    turbulence: FloatProperty(name="Turbulence", default=1.0, min=0.0, max=1.0, subtype='FACTOR')
    drag: FloatProperty(name="Drag", default=1.0, min=0.0, max=1.0, subtype='FACTOR')
    harmonic: FloatProperty(name="Harmonic", default=1.0, min=0.0, max=1.0, subtype='FACTOR')
    charge: FloatProperty(name="Charge", default=1.0, min=0.0, max=1.0, subtype='FACTOR')


FIELD_WEIGHT_NAMES = ("force", "wind", "vortex", "turbulence", "drag", "harmonic", "charge")


class NeurokObjectSettings(bpy.types.PropertyGroup):
    enabled: BoolProperty(
        name="NeuROK", default=False,
        description="NeuROK physics on this object (Properties ▸ Physics ▸ NeuROK); its place in the modifier stack "
                    "is the 'NeuROK Cache' modifier")
    preset: EnumProperty(name="Material", items=preset_items, default=1, update=_apply_preset,   # 1: rubber
                         description="Starting point for the sliders below (choosing one resets them; moving a "
                                     "slider makes it Custom)")
    kind: EnumProperty(name="Kind", default='SOLID', update=_slider_moved,
                       items=[('SOLID', "Solid", "A volume (its surface mesh is filled): soft bodies, jelly, rubber"),
                              ('CLOTH', "Cloth", "A thin sheet: cloth, leather, flags")],
                       description="Whether the mesh is a filled volume or a thin sheet")
    detail: EnumProperty(
        name="Detail", default='MEDIUM',
        items=[('LOW', "Low", "Half the handles the shape asks for: stiffer folds and bends, about twice as fast; "
                              "cloth skips the full-space layer (it bends as a smooth card)"),
               ('MEDIUM', "Medium", "As many handles as the shape asks for: a compact solid 8, a square of cloth "
                                    "32, a slender beam about 40; cloth also takes the full-space layer that "
                                    "lets it crease, hinge at its pins and hang, on a "
                                    f"{_link.SHEET_PROXY_VERTICES:,}-vertex proxy of a finer cloth (folds as "
                                    "fine as the proxy's edges)"),
               ('HIGH', "High", "Twice the handles (up to 64): finer folds, ripples and bends, 2-4x slower per "
                                "frame and a longer first preparation; cloth takes the full-space layer on "
                                f"every vertex (about {_link.SHEET_LAYER_MS_PER_1000_VERTICES} ms a frame per "
                                "1,000 vertices)")],
        description="How finely the learned engine lets the shape bend and fold (its number of handles); "
                    "the reference engine ignores it")
    self_collision: BoolProperty(
        name="Self Collision", default=True,
        description="Cloth: keep the sheet's folds apart by a thickness layer, so no part passes through another "
                    "(both engines; like Cloth ▸ Shape ▸ Self Collisions). Costs a search for close pairs once a "
                    "substep, most where the sheet lies in many layers (about 1.6x the frame on a 10k-vertex "
                    "sheet in a gust): turn it off for a sheet that never folds onto itself")
    self_distance: FloatProperty(
        name="Distance", default=_scene.DEFAULT_SELF_DISTANCE, min=1e-4, soft_max=0.05, precision=4, subtype='DISTANCE', unit='LENGTH',
        description="Cloth self collision: the thickness layer no other part of the sheet may enter (Blender's "
                    "Self Collision Distance)")
    self_friction: FloatProperty(
        name="Friction", default=_scene.SELF_FRICTION, min=0.0, soft_max=1.5, precision=2,
        description="Cloth self collision: Coulomb's coefficient between the sheet's layers where they touch "
                    "(0: they slide freely; cotton on cotton about 0.5). The layers stick below the slope whose "
                    "tangent it is")
    stiffness: FloatProperty(
        name="Stiffness", default=PRESETS["rubber"]["stiffness"], min=1e-3, soft_min=10.0, soft_max=1e7, precision=0,
        update=_slider_moved,
        description="Resistance to stretching. Solids: Young's modulus in Pa (jelly 3 kPa, rubber 100 kPa); cloth: "
                    "stretch stiffness in N/m. Like Cloth Tension/Compression or Soft Body Edges Pull/Push, but "
                    "physical: doubling it halves the sag and wobbles √2 faster")
    stiffness_log: FloatProperty(
        name="Stiffness (log₁₀)", get=_get_stiffness_log, set=_set_stiffness_log, min=-3.0, max=10.0,
        soft_min=1.0, soft_max=7.0, precision=2, step=5, subtype='NONE',
        description="The same stiffness on a logarithmic slider: 3 = 1 kPa, 5 = 100 kPa, 7 = 10 MPa "
                    "(each step right is ten times stiffer)")
    density: FloatProperty(
        name="Density", default=PRESETS["rubber"]["density"], min=1e-4, soft_min=10.0, soft_max=5000.0, precision=1,
        update=_slider_moved,
        description="Solids: mass per volume in kg/m³ (water 1000, rubber 1100, foam 120). Replaces Soft Body Mass; "
                    "heavier means slower wobbles, not faster falling")
    areal_density: FloatProperty(
        name="Areal Density", default=PRESETS["cloth"]["density"], min=1e-5, soft_min=0.01, soft_max=5.0, precision=3,
        update=_slider_moved,
        description="Cloth: mass per area in kg/m² (silk 0.05, cotton 0.2, denim 0.4, leather 0.8). Replaces Cloth "
                    "Vertex Mass, but does not change when you subdivide")
    poisson: FloatProperty(
        name="Volume Preservation", default=PRESETS["rubber"]["poisson"], min=0.0, max=0.495, precision=3,
        update=_slider_moved,
        description="Poisson ratio: 0 lets the volume shrink when squashed (foam), 0.45+ keeps it (rubber, jelly bulge "
                    "sideways). Plays the part of Soft Body/Cloth pressure and volume options")
    damping: FloatProperty(
        name="Damping", default=PRESETS["rubber"]["damping"], min=0.0, soft_max=0.2, precision=4, step=0.1,
        unit='TIME_ABSOLUTE', update=_slider_moved,
        description="Internal damping in seconds (stiffness-proportional): how fast wobbles die out. "
                    "Like Cloth Damping Tension/Compression or Soft Body Edges Damp")
    air_damping: FloatProperty(
        name="Air Viscosity", default=PRESETS["rubber"].get("air_damping", 0.0), min=0.0, soft_max=10.0, precision=3,
        update=_slider_moved,
        description="Damping of all motion (1/s), like Cloth Physical Properties > Air Viscosity")
    bending: FloatProperty(
        name="Bending", default=1e-4, min=0.0, soft_max=0.1, precision=6, step=0.001, update=_slider_moved,
        description="Cloth only: resistance to folding in N·m, like Cloth Stiffness > Bending (leather high, silk low)")

    pin_group: StringProperty(
        name="Pin Group",
        description="Vertex group that holds vertices in place (weight 1 = held), like Cloth Shape > Pin Group "
                    "or Soft Body Goal")
    pin_strength: FloatProperty(
        name="Pin Strength", default=1.0, min=0.001, soft_max=10.0,
        description="1 is a firm pin, larger is stiffer, smaller lets pinned vertices sag (like Pin Stiffness)")
    pin_target: PointerProperty(
        name="Pin Target", type=bpy.types.Object,
        description="Optional object whose animated location moves the pinned vertices (its motion from the first "
                    "frame is added to them), like hooking the pin group to an empty")

    forces: CollectionProperty(type=NeurokForce)
    active_force: IntProperty(name="Active Force", default=0)

    use_force_fields: BoolProperty(
        name="Force Fields", default=True,
        description="Apply the scene's force field objects (like Cloth Field Weights)")
    field_collection: PointerProperty(
        name="Effector Collection", type=bpy.types.Collection,
        description="Only force fields in this collection act (empty: every field in the scene), like Cloth ▸ "
                    "Field Weights ▸ Effector Collection")
    field_weights: PointerProperty(type=NeurokFieldWeights)
    use_colliders: BoolProperty(
        name="Collisions", default=True,
        description="Objects with Blender's Collision physics push this object (their evaluated, possibly animated "
                    "meshes, with Thickness Outer and Friction)")
    collision_collection: PointerProperty(
        name="Collision Collection", type=bpy.types.Collection,
        description="Only collision objects in this collection act (empty: every Collision object in the scene)")
    field_influence: FloatProperty(
        name="Field Influence", default=1.0, min=0.0, soft_max=10.0,
        description="Scales every force field's effect on this object; a field's Strength is read as m/s²")
    initial_velocity: FloatVectorProperty(name="Initial Velocity", size=3, subtype='VELOCITY', unit='VELOCITY',
                                          description="Velocity of every vertex at the first frame (world space, m/s)")

    bake: PointerProperty(type=NeurokBake)


class NeurokSceneSettings(bpy.types.PropertyGroup):
    engine: EnumProperty(
        name="Engine", default='NEUROK',
        items=[('NEUROK', "Learned (NeuROK)", "The learned latent engine: fast, approximate; shows how far the "
                                             "setup is from what it was trained on"),
               ('REFERENCE', "Reference (exact, slow)", "The full finite-element / cloth simulator the learned "
                                                        "engine was trained against")])
    model_path: StringProperty(name="Model", subtype='FILE_PATH', options=REL_PATH,
                               description="Checkpoint of the learned engine; empty uses the bundled model")
    use_floor: BoolProperty(name="Floor", default=False, description="A ground plane objects cannot fall through")
    floor_height: FloatProperty(name="Height", default=0.0, unit='LENGTH', description="Floor height (world Z)")
    floor_friction: FloatProperty(name="Friction", default=_scene.FLOOR_FRICTION, min=0.0, soft_max=1.5,
                                  description="The floor's Coulomb friction coefficient: a body sliding on it slows "
                                              "by this times g; it stays on slopes up to this steepness")
    use_scene_range: BoolProperty(name="Scene Frame Range", default=True,
                                  description="Simulate the scene's frame range; off: use the range below")
    frame_start: IntProperty(name="Start", default=1, min=0)
    frame_end: IntProperty(name="End", default=120, min=1)
    shape_key_mode: EnumProperty(
        name="Shape Keys", default='ABSOLUTE',
        items=[('ABSOLUTE', "Absolute", "One shape key per frame played by a single linear Evaluation Time curve "
                                        "(fast; only when the mesh has no shape keys of its own)"),
               ('RELATIVE', "Relative", "One relative key per frame keyed 0/1/0 (mixes with your own keys; slow "
                                        "beyond a few hundred frames)")])
    specialize_minutes: FloatProperty(name="Minutes", default=1.0, min=0.1, soft_max=30.0,
                                      description="Time spent fine-tuning the model on this object")
    keep_frames_before_stop: BoolProperty(
        name="Keep Frames Before a Stop", default=False,
        description="When a bake stops because the simulation became implausible or unstable, keep the frames "
                    "computed before that point as a complete, shorter bake (off: nothing is written)")


classes = (NeurokForce, NeurokBake, NeurokFieldWeights, NeurokObjectSettings, NeurokSceneSettings)


def register():
    for cls in classes:
        bpy.utils.register_class(cls)
    bpy.types.Object.neurok = PointerProperty(type=NeurokObjectSettings)
    bpy.types.Scene.neurok = PointerProperty(type=NeurokSceneSettings)


def unregister():
    del bpy.types.Scene.neurok
    del bpy.types.Object.neurok
    for cls in reversed(classes):
        bpy.utils.unregister_class(cls)
