"""Training data (procedural shapes, generation, imports) and the training loops. Depends on core, reference, learned."""
