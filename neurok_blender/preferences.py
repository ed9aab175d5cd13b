"""Add-on preferences (Edit > Preferences > Add-ons > NeuROK)."""

import bpy
from bpy.props import EnumProperty, FloatProperty


class NeurokPreferences(bpy.types.AddonPreferences):
    bl_idname = __package__

    device: EnumProperty(
        name="Device", default='AUTO',
        items=[('AUTO', "Automatic", "The GPU (CUDA) when there is one, else the CPU"),
               ('CPU', "CPU", "Always the CPU"),
               ('CUDA', "GPU (CUDA)", "An NVIDIA GPU through CUDA")],
        description="Where the learned engine runs")
    timer_interval: FloatProperty(name="Refresh Interval", default=0.1, min=0.02, max=1.0, unit='TIME_ABSOLUTE',
                                  description="How often a running preview or bake updates the viewport (seconds)")

    def draw(self, context):
        layout = self.layout
        layout.prop(self, "device")
        layout.prop(self, "timer_interval")


def get(context=None):
    context = context or bpy.context
    addon = context.preferences.addons.get(__package__)
    return None if addon is None else addon.preferences


def device(context=None) -> str:
    prefs = get(context)
    return "auto" if prefs is None else prefs.device.lower()


def timer_interval(context=None) -> float:
    prefs = get(context)
    return 0.1 if prefs is None else prefs.timer_interval


classes = (NeurokPreferences,)
