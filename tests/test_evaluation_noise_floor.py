"""The resolution noise floor (engine/evaluation/noise_floor.py): the reference at the default
resolution against itself at twice the resolution, as the evaluation reads it."""
import numpy as np

from engine.core.formats import Mesh
from engine.core.scene import setup_from_scene
from engine.evaluation.noise_floor import noise_floor, subdivide
from engine.training.shapes import _box_lattice


def _scene(material, frames=7, pins=()):
    return {"format": "neurok.scene/1", "frames": frames, "dt": 1 / 24, "material": material, "pins": list(pins),
            "forces": [{"select": {"box": {"min": [0.5, 0, 0], "max": [1, 1, 1]}}, "accel": [0, 0, 20.0],
                        "profile": {"type": "impulse", "start": 1, "end": 3}}]}


def test_solid_noise_floor_reports_rel_l2_and_ratio_to_hold_still():
    unit, faces = _box_lattice((3, 2, 2))
    mesh = Mesh((unit + 1) / 2 * np.array([0.4, 0.2, 0.2]), faces)
    pin = {"select": {"box": {"min": [0, 0, 0], "max": [0.1, 1, 1]}}}
    report = noise_floor(setup_from_scene(mesh, _scene({"preset": "rubber"}, pins=[pin])), lattice_cells=2)
    print(f"\n[noise floor] solid, 2 vs 4 cells, 6 frames: rel_l2 mean {report['rel_l2']['mean']:.2e}, "
          f"ratio to hold-still {report['ratio_to_hold_still']['mean']:.3f}")
    assert report["kind"] == "solid" and report["frames"] == 7
    assert report["coarse"] == {"lattice_cells": 2} and report["fine"] == {"lattice_cells": 4}
    assert set(report["rel_l2"]) == {"1", "mean"} and len(report["per_frame_rel_l2"]) == 7
    assert report["per_frame_rel_l2"][0] < 1e-9, "both start from the same frame 0"
    assert 0 < report["rel_l2"]["mean"] < report["hold_still_rel_l2"]["mean"]
    assert 0 < report["ratio_to_hold_still"]["mean"] < 1


def test_cloth_noise_floor_compares_the_original_vertices_of_a_subdivided_mesh():
    x, y = np.meshgrid(np.linspace(0, 0.3, 5), np.linspace(0, 0.3, 5))
    verts = np.stack([x.ravel(), np.zeros(25), y.ravel()], axis=1)
    faces = [(j * 5 + i, j * 5 + i + 1, (j + 1) * 5 + i + 1) for j in range(4) for i in range(4)]
    faces += [(j * 5 + i, (j + 1) * 5 + i + 1, (j + 1) * 5 + i) for j in range(4) for i in range(4)]
    mesh = Mesh(verts, np.array(faces))
    fine, fine_faces, _ = subdivide(mesh.vertices, mesh.faces)
    assert len(fine) == 25 + 56 and len(fine_faces) == 4 * 32
    np.testing.assert_array_equal(fine[:25], mesh.vertices)
    pin = {"select": {"box": {"min": [0, 0, 0.99], "max": [1, 1, 1]}}}
    report = noise_floor(setup_from_scene(mesh, _scene({"preset": "cloth"}, pins=[pin])))
    print(f"[noise floor] cloth, 25 vs 81 vertices: rel_l2 mean {report['rel_l2']['mean']:.2e}, "
          f"ratio to hold-still {report['ratio_to_hold_still']['mean']:.3f}")
    assert report["kind"] == "cloth" and report["fine"] == {"vertices": 81}
    assert np.isfinite(report["rel_l2"]["mean"]) and report["rel_l2"]["mean"] < report["hold_still_rel_l2"]["mean"]
