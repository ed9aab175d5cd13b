"""NeuROK engine: learned latent Lagrangian dynamics for meshes (pure Python + torch, no bpy)."""
__version__ = "0.1.0"
