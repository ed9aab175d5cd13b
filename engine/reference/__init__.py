"""The full-space reference simulator: ground truth, training data, speed baseline. Depends on core only."""
