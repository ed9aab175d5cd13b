"""Errors, formats, scenes, geometry, physics constants, mesh checks: what every other layer builds on."""
