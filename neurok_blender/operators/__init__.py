"""NeuROK operators, one per file; `classes` is what the add-on registers."""
from .bake_cache import NEUROK_OT_bake_cache
from .bake_shape_keys import NEUROK_OT_bake_shape_keys
from .bake_together import NEUROK_OT_bake_together
from .cancel_job import NEUROK_OT_cancel
from .export_scene import NEUROK_OT_export_scene
from .force_add import NEUROK_OT_force_add
from .force_remove import NEUROK_OT_force_remove
from .free_bake import NEUROK_OT_free_bake
from .learn_material import NEUROK_OT_learn_material
from .physics import NEUROK_OT_material_preset_add, NEUROK_OT_physics_add, NEUROK_OT_physics_remove
from .preview import NEUROK_OT_preview
from .sample_pose import NEUROK_OT_sample_pose
from .show_physics import NEUROK_OT_show_physics
from .specialize import NEUROK_OT_specialize

classes = (
    NEUROK_OT_preview,
    NEUROK_OT_bake_cache,
    NEUROK_OT_bake_shape_keys,
    NEUROK_OT_bake_together,
    NEUROK_OT_free_bake,
    NEUROK_OT_cancel,
    NEUROK_OT_specialize,
    NEUROK_OT_learn_material,
    NEUROK_OT_sample_pose,
    NEUROK_OT_export_scene,
    NEUROK_OT_force_add,
    NEUROK_OT_force_remove,
    NEUROK_OT_physics_add,
    NEUROK_OT_physics_remove,
    NEUROK_OT_material_preset_add,
    NEUROK_OT_show_physics,
)
