"""Reliability: bad input gives one clear line, numerical faults never reach an output file."""
from dataclasses import replace

import numpy as np
import pytest
import torch

from engine.api import SimulationFault, open_engine
from engine.learned.checkpoint import save_checkpoint
from engine.core.checks import MAX_VERTICES, check_mesh, inspect_mesh
from engine.cli import main
from engine.core.formats import FormatError, Mesh, read_sequence, write_obj
from engine.learned.model import NeurokModel
from engine.core.scene import setup_from_scene
from engine.training.shapes import make_sample, make_shape


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("model") / "tiny.ckpt"
    save_checkpoint(path, NeurokModel())
    return path


def levels(mesh):
    return {(f.level, f.message.split(" ")[1] if f.message[0].isdigit() else f.message) for f in inspect_mesh(mesh)}


def test_good_meshes_have_no_findings():
    for name in ("soft_toy", "flag", "jelly"):
        assert inspect_mesh(make_sample(name)) == []


@pytest.mark.parametrize("mesh, words", [
    (Mesh(np.zeros((0, 3)), np.zeros((0, 3))), "no vertices"),
    (Mesh([[0, 0, 0], [1, np.nan, 0], [0, 1, 0]], [[0, 1, 2]]), "NaN"),
    (Mesh([[0, 0, 0], [1, 0, 0], [0, 1, 0]], np.zeros((0, 3))), "no faces"),
    (Mesh([[0, 0, 0], [1, 0, 0], [2, 0, 0]], [[0, 1, 2]]), "degenerate"),
    (Mesh([[0, 0, 0], [0, 0, 0], [0, 0, 0]], [[0, 1, 2]]), "same point"),
])
def test_unusable_meshes_are_refused_in_one_line(mesh, words):
    with pytest.raises(FormatError) as err:
        check_mesh(mesh, "m.obj")
    assert words in str(err.value) and "\n" not in str(err.value)


def test_suspicious_meshes_give_warnings_and_still_run():
    base = make_sample("jelly")
    n = len(base.vertices)
    loose = Mesh(np.vstack([base.vertices, [[5.0, 5.0, 5.0]]]), base.faces)
    twin = Mesh(np.vstack([base.vertices, base.vertices + [1.0, 0, 0]]), np.vstack([base.faces, base.faces + n]))
    dup = Mesh(np.vstack([base.vertices, base.vertices[:1]]), np.vstack([base.faces, [[n, 1, 2]]]))
    nonmanifold = Mesh(np.vstack([base.vertices, [[0.0, 0.0, 0.5]]]),
                       np.vstack([base.faces, [[base.faces[0][0], base.faces[0][1], n]]]))
    expectations = {"loose": loose, "separate parts": twin, "duplicate": dup, "non-manifold": nonmanifold}
    for words, mesh in expectations.items():
        warnings = check_mesh(mesh)
        assert any(words in w for w in warnings), (words, warnings)
    thin = Mesh([[0, 0, 0], [1, 0, 0], [0, 1e-6, 0], [0, 0, 1e-6]], [[0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]])
    assert any("aspect ratio" in w for w in check_mesh(thin))


def test_too_many_vertices_is_refused_with_the_number():
    huge = Mesh(np.random.default_rng(0).random((MAX_VERTICES + 1, 3)), [[0, 1, 2]])
    with pytest.raises(FormatError, match=f"{MAX_VERTICES + 1:,}"):
        check_mesh(huge)


def test_cli_bad_inputs_exit_2_with_one_line(tmp_path, capsys, tiny_model):
    empty = tmp_path / "empty.obj"
    empty.write_text("# nothing\n")
    scene = tmp_path / "s.json"
    scene.write_text('{"format": "neurok.scene/1", "frames": 3}')
    bad_scene = tmp_path / "bad.json"
    bad_scene.write_text('{"format": "neurok.scene/1", "frames": "many"}')
    good = tmp_path / "good.obj"
    write_obj(good, make_shape("box", np.random.default_rng(0), 200))
    broken_ckpt = tmp_path / "broken.ckpt"
    broken_ckpt.write_bytes(tiny_model.read_bytes()[:1000])
    cases = [
        ["simulate", "--mesh", str(empty), "--scene", str(scene), "--engine", "reference", "--out", str(tmp_path / "o.npz")],
        ["simulate", "--mesh", str(good), "--scene", str(bad_scene), "--engine", "reference", "--out", str(tmp_path / "o.npz")],
        ["simulate", "--mesh", str(good), "--scene", str(scene), "--engine", "reference", "--out", str(tmp_path / "o.txt")],
        ["simulate", "--replay", str(scene), "--engine", "reference", "--out", str(tmp_path / "o.npz")],
        ["simulate", "--replay", str(scene), "--scene", str(scene), "--engine", "reference", "--out", str(tmp_path / "o.npz")],
        ["simulate", "--mesh", str(good), "--scene", str(scene), "--engine", "neurok", "--model", str(broken_ckpt), "--out", str(tmp_path / "o.npz")],
        ["simulate", "--mesh", str(good), "--scene", str(scene), "--engine", "neurok", "--lattice-cells", "12", "--out", str(tmp_path / "o.npz")],
        ["simulate", "--mesh", str(good), "--scene", str(scene), "--engine", "reference", "--lattice-cells", "0", "--out", str(tmp_path / "o.npz")],
    ]
    for argv in cases:
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "error" in err and "Traceback" not in err, err
    assert not (tmp_path / "o.npz").exists()


def test_the_reference_runs_at_the_lattice_asked_for(tmp_path):
    """`simulate --engine reference --lattice-cells N`: a user checking a bake against a converged
    reference gets that resolution (the evaluation's ground truth uses 12 cells)."""
    from engine.reference.lattice import Lattice
    mesh = make_shape("box", np.random.default_rng(0), 200)
    setup = setup_from_scene(mesh, {"format": "neurok.scene/1", "frames": 2})
    runs = {c: open_engine("reference", lattice_cells=c).prepare(setup) for c in (2, 5)}
    for c, run in runs.items():
        expected = Lattice(np.asarray(setup.rest), np.asarray(setup.faces), c)
        assert len(run.sim.lattice.cell_ids) == len(expected.cell_ids)
    assert len(runs[5].sim.lattice.cell_ids) > len(runs[2].sim.lattice.cell_ids)
    out = tmp_path / "box.npz"
    write_obj(tmp_path / "box.obj", mesh)
    (tmp_path / "s.json").write_text('{"format": "neurok.scene/1", "frames": 2}')
    assert main(["simulate", "--mesh", str(tmp_path / "box.obj"), "--scene", str(tmp_path / "s.json"),
                 "--engine", "reference", "--lattice-cells", "3", "--out", str(out)]) == 0 and out.exists()


def extreme_setup(frames, accel=2000.0):
    mesh = make_shape("box", np.random.default_rng(1), 200)
    scene = {"format": "neurok.scene/1", "frames": frames, "material": {"preset": "rubber"},
             "pins": [{"select": {"box": {"min": [0, 0, 0], "max": [0.2, 1, 1]}}}],
             "forces": [{"select": {"box": {"min": [0.5, 0, 0], "max": [1, 1, 1]}}, "accel": [0, accel, accel],
                         "profile": {"type": "sine", "frequency": 3.0}}],
             "floor": {"z": float(mesh.vertices[:, 2].min())}}
    return setup_from_scene(mesh, scene)


def test_three_hundred_frames_under_extreme_forces_never_give_nan(tiny_model):
    """100x a normal push for 300 frames (the evaluation suite runs 1,000): every frame is finite (a run that cannot recover
    stops at its last good frame with SimulationFault, never with NaN). The plausibility guard is
    off here: this is about numerical robustness, not about what the guard would show a user."""
    setup = extreme_setup(300)
    setup.material = replace(setup.material, stiffness=1e6)  # 100x force on stiff rubber: large but finite strain
    run = open_engine("neurok", tiny_model).prepare(setup)
    run.check_plausibility = False
    try:
        frames = run.bake()
    except SimulationFault as fault:
        frames = fault.positions
        assert fault.frame >= 1
    assert np.all(np.isfinite(frames))
    assert len(frames) == 300


def test_reference_survives_extreme_forces_and_stiffness():
    setup = extreme_setup(12)
    setup.material = replace(setup.material, stiffness=1e9)
    frames = open_engine("reference").prepare(setup).bake()
    assert np.all(np.isfinite(frames))


def test_fault_mid_run_keeps_good_frames_in_the_output(tmp_path, tiny_model, capsys):
    """The command line writes the good frames and says which frame failed."""
    mesh_path, scene_path = tmp_path / "m.obj", tmp_path / "s.json"
    write_obj(mesh_path, make_shape("box", np.random.default_rng(1), 200))
    scene_path.write_text('{"format": "neurok.scene/1", "frames": 8}')
    import engine.learned.runtime as runtime
    original = runtime.integrator_step

    def failing(scene, frame, *rest, **options):   # a step that gives NaN from frame 4 on
        q1, qd1, ok = original(scene, frame, *rest, **options)
        return (q1 * np.nan, qd1, ok) if frame >= 4 else (q1, qd1, ok)

    runtime.integrator_step = failing
    try:
        code = main(["simulate", "--mesh", str(mesh_path), "--scene", str(scene_path), "--engine", "neurok",
                     "--model", str(tiny_model), "--out", str(tmp_path / "o.npz"), "--keep-good-frames"])
    finally:
        runtime.integrator_step = original
    assert code == 2
    assert "frame 5" in capsys.readouterr().err
    seq = read_sequence(tmp_path / "o.npz")
    assert seq.frames == 5 and np.all(np.isfinite(seq.positions))
