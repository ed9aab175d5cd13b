"""The learned engine: model, latent dynamics, integrators, runtime. Depends on core only."""
