"""The plausibility guard (engine/core/guard.py, applied in core/run.py): no run of either engine
hands out a frame that has visibly exploded without saying so (issue 14).

- the guard's measures: rigid motion never trips it; the three failures seen with the bundled
  model (a body grown 18x, a body turned inside out, cloth stretched 375%) always do;
- real runs: a deliberately unstable checkpoint (model v2 at its softest Lame scales)
  on the three failure setups stop with one line naming the frame and the limit, and the good
  frames they keep all pass the guard; `neurok simulate` then exits 2 and writes nothing, or the
  good frames with --keep-good-frames;
- false alarms: the reference simulator on the demo scenes (short runs) and on generated,
  training-like sequences never trips the guard.
"""
import json

import numpy as np
import pytest
import torch

from engine.api import SimulationFault, open_engine
from engine.cli import main
from engine.core.formats import Mesh, read_mesh, read_sequence, write_obj
from engine.core.guard import Guard, GuardLimits, ImplausibleFrame, limits_for
from engine.core.scene import read_scene, setup_from_scene, setup_from_sequence
from engine.learned.checkpoint import default_model_path, save_checkpoint
from engine.learned.model import NeurokModel
from engine.reference.engine import ReferenceRun
from engine.training.shapes import make_sample, make_shape

ASSETS = default_model_path().parent


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def box(lo, hi):
    return {"box": {"min": lo, "max": hi}}


def scene(frames, material, pins=(), forces=(), floor=None):
    return {"format": "neurok.scene/1", "frames": frames, "material": material, "pins": list(pins),
            "forces": list(forces), "floor": floor}


ALL = box([0, 0, 0], [1, 1, 1])


def cylinder_push(frames=48, push=15.0):
    """A pinned capsule pushed sideways (the issue's cylinder)."""
    mesh = make_shape("capsule", np.random.default_rng(3), 400)
    return mesh, scene(frames, {"preset": "rubber"}, [{"select": box([0, 0, 0], [1, 1, 0.15])}],
                       [{"select": ALL, "accel": [push, 0, 0], "profile": {"type": "constant", "start": 0, "end": 20}}])


def cone_shake(frames=48, shake=25.0):
    """A blunt superquadric pinned at its base and shaken (the issue's cone)."""
    mesh = make_shape("superquadric", np.random.default_rng(4), 400)
    return mesh, scene(frames, {"preset": "jelly"}, [{"select": box([0, 0, 0], [1, 1, 0.15])}],
                       [{"select": ALL, "accel": [shake, 0, 0], "profile": {"type": "sine", "frequency": 2.0}}])


def cloth_corners(frames=36):
    """The bundled flag hung by its two top corners (the issue's cloth)."""
    mesh = make_sample("flag")
    return mesh, scene(frames, {"preset": "cloth"}, [{"select": box([0, 0, 0.95], [0.05, 1, 1])},
                                                     {"select": box([0.95, 0, 0.95], [1, 1, 1])}])


FAILURE_CASES = {"cylinder_push": cylinder_push, "cone_shake": cone_shake, "cloth_corners": cloth_corners}


@pytest.fixture(scope="module")
def untrained_ckpt(tmp_path_factory):
    """A deliberately unstable checkpoint: model v2 with its learned Lame scales at the softest it
    allows (exp(-2), a material 7x softer than asked for); on the issue's solid setups with 10x
    their forces it stretches past the caps of the limits within a few frames."""
    torch.manual_seed(0)
    model = NeurokModel()
    with torch.no_grad():
        model.energy.scales[-1].weight.zero_()
        model.energy.scales[-1].bias.fill_(-50.0)
    path = tmp_path_factory.mktemp("unstable") / "soft.ckpt"
    save_checkpoint(path, model)
    return path


# --------------------------------------------------------------------------- the measures

def rotation(axis, angle):
    axis = np.asarray(axis, float) / np.linalg.norm(axis)
    K = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K


def guard_for(mesh, sc):
    return Guard(setup_from_scene(mesh, sc))


@pytest.mark.parametrize("case", list(FAILURE_CASES))
def test_rigid_motion_never_trips_the_guard(case):
    mesh, sc = FAILURE_CASES[case]()
    guard = guard_for(mesh, sc)
    x = np.asarray(mesh.vertices, float)
    for angle in (0.3, 1.7, 3.0):
        moved = (x - x.mean(0)) @ rotation([1, 2, 3], angle).T + [5.0, -2.0, 40.0]
        assert guard.check(3, moved) is None


def test_the_three_failures_of_the_issue_trip_the_guard():
    mesh, sc = cylinder_push()
    x = np.asarray(mesh.vertices, float)
    grown = (x - x.mean(0)) * 18.0
    v = guard_for(mesh, sc).check(40, grown)
    assert v is not None and v.measure in ("growth", "volume_high") and "frame 40" in v.message()

    mesh, sc = cone_shake()
    x = np.asarray(mesh.vertices, float)
    inside_out = x * [-1.0, 1.0, 1.0]          # a mirror image: every triangle turned inside out
    v = guard_for(mesh, sc).check(12, inside_out)
    assert v is not None and v.measure == "volume_low" and v.value < 0 and "inside out" in v.message()

    mesh, sc = cloth_corners()
    x = np.asarray(mesh.vertices, float)
    stretched = x * [4.75, 1.0, 1.0]           # 375% stretch along the flag
    v = guard_for(mesh, sc).check(7, stretched)
    assert v is not None and v.measure in ("growth", "edge_strain_mean")
    assert "\n" not in v.message() and "frame 7" in v.message()


def test_cloth_limits_are_much_tighter_than_solid_limits():
    cloth = Guard(setup_from_scene(*cloth_corners())).limits
    solid = Guard(setup_from_scene(*cylinder_push())).limits
    assert cloth.edge_strain_mean <= 0.5 * solid.edge_strain_mean
    assert cloth.volume_low is None and cloth.flipped_share is None      # cloth folds and is open
    assert solid.volume_low is not None and 0.2 <= solid.volume_low < 1.0 < solid.volume_high


def test_limits_widen_with_the_forces_and_stay_capped():
    mesh, sc = cylinder_push()
    calm = limits_for(setup_from_scene(mesh, dict(sc, forces=[])), 1.0)
    pushed = limits_for(setup_from_scene(mesh, sc), 1.0)
    sc_hard = json.loads(json.dumps(sc))
    sc_hard["forces"][0]["accel"] = [1e6, 0, 0]
    hard = limits_for(setup_from_scene(mesh, sc_hard), 1.0)
    assert calm.edge_strain_mean <= pushed.edge_strain_mean <= hard.edge_strain_mean <= 1.0
    assert hard.growth <= 3.0 and hard.edge_strain_max <= 8.0 and hard.volume_low >= 0.2


def test_a_deformed_first_frame_is_accepted():
    """A replayed sequence may start deformed: that is the user's input, not the engine's doing."""
    mesh, sc = cloth_corners()
    setup = setup_from_scene(mesh, sc)
    setup.x0 = np.asarray(mesh.vertices, float) * [1.3, 1.0, 1.0]
    guard = Guard(setup)
    assert guard.check(1, setup.x0) is None


# --------------------------------------------------------------------------- real runs that must stop

def assert_clean_stop(run, setup):
    with pytest.raises(ImplausibleFrame) as info:
        run.bake()
    fault = info.value
    msg = str(fault)
    assert isinstance(fault, SimulationFault) and "\n" not in msg
    assert f"frame {fault.frame}" in msg and fault.violation.measure in msg.replace(" ", "_") or "limit" in msg
    assert 1 <= fault.frame < setup.frames and len(fault.positions) == fault.frame
    guard = Guard(setup)
    assert all(guard.check(t, x) is None for t, x in enumerate(fault.positions) if t > 0)
    return fault


@pytest.mark.parametrize("case", ["cylinder_push", "cone_shake"])
def test_unstable_checkpoint_stops_cleanly_on_solids(case, untrained_ckpt):
    mesh, sc = FAILURE_CASES[case](24, 150.0) if case == "cylinder_push" else FAILURE_CASES[case](24, 250.0)
    setup = setup_from_scene(mesh, sc)
    fault = assert_clean_stop(open_engine("neurok", untrained_ckpt, device="cpu").prepare(setup), setup)
    assert fault.violation.measure in ("growth", "volume_low", "volume_high", "edge_strain_mean",
                                       "edge_strain_max", "flipped_share")


def test_hung_cloth_either_stops_cleanly_or_stays_within_the_limits(untrained_ckpt):
    """The v1 bundled model stretched this cloth by 22% and was stopped at frame 3; the v2 models
    (exact membrane energy, bounded scales) stay within the limits. Either way no frame that breaks
    them is handed out."""
    mesh, sc = cloth_corners()
    setup = setup_from_scene(mesh, sc)
    for ckpt in (untrained_ckpt, None):
        run = open_engine("neurok", ckpt, device="cpu").prepare(setup)
        try:
            frames = run.bake()
        except ImplausibleFrame as fault:
            assert "cloth" in str(fault) and len(fault.positions) == fault.frame
            frames = fault.positions
        guard = Guard(setup)
        assert all(guard.check(t, x) is None for t, x in enumerate(frames) if t > 0)


def test_preview_stream_stops_at_the_same_frame(untrained_ckpt):
    mesh, sc = cone_shake(24, 250.0)
    setup = setup_from_scene(mesh, sc)
    engine = open_engine("neurok", untrained_ckpt, device="cpu")
    seen = []
    with pytest.raises(ImplausibleFrame) as info:
        for t, x in engine.prepare(setup).frames():
            seen.append(t)
    assert seen == list(range(info.value.frame))


def test_cli_writes_nothing_or_only_the_good_frames(tmp_path, capsys, untrained_ckpt):
    mesh, sc = cone_shake(24, 250.0)
    mesh_path, scene_path = tmp_path / "cone.obj", tmp_path / "shake.json"
    write_obj(mesh_path, mesh)
    scene_path.write_text(json.dumps(sc))
    out = tmp_path / "o.npz"
    argv = ["simulate", "--mesh", str(mesh_path), "--scene", str(scene_path), "--engine", "neurok",
            "--model", str(untrained_ckpt), "--device", "cpu", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "implausible result at frame" in err and "nothing was written" in err and "Traceback" not in err
    assert not out.exists()
    pc2 = tmp_path / "o.pc2"
    assert main(argv[:-1] + [str(pc2)]) == 2 and not pc2.exists()
    capsys.readouterr()
    assert main(argv + ["--keep-good-frames"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    frame = int(err.split("implausible result at frame ")[1].split(":")[0])
    seq = read_sequence(out)
    assert seq.frames == frame and f"{frame} frames before it were written" in err


def test_evaluation_counts_a_guard_stop_as_a_failure(untrained_ckpt):
    from engine.evaluation.metrics import predict, sequence_metrics
    mesh, sc = cone_shake(24, 250.0)
    setup = setup_from_scene(mesh, sc)
    pred, fault, err, _ = predict(open_engine("neurok", untrained_ckpt, device="cpu"), setup)
    assert fault is not None and err.startswith("implausible result at frame")
    rec = sequence_metrics(pred, np.repeat(np.asarray(setup.x0, np.float32)[None], setup.frames, 0), setup, fault,
                           with_chamfer=False)
    assert rec["unstable"] and rec["unstable_frame"] == fault


# --------------------------------------------------------------------------- the retry hook

def small_cloth(frames):
    mesh = make_shape("sheet", np.random.default_rng(2), 80)
    return setup_from_scene(mesh, scene(frames, {"preset": "cloth"}, [{"select": box([0, 0, 0.8], [1, 1, 1])}],
                                        [{"select": ALL, "accel": [0, 20, 0]}]))

def test_reference_retry_recomputes_the_frame_and_continues():
    """`ReferenceRun._retry_frame` redoes a frame with more substeps from the state before it,
    and the run continues from there: same result as a run with that many substeps."""
    setup = small_cloth(frames=4)
    run = ReferenceRun(setup)
    it = run._iter_frames()
    next(it), next(it)
    again = run._retry_frame(1, 2)
    fine = ReferenceRun(setup)
    fine.sim.substeps *= 2
    fine.sim.h = setup.dt / fine.sim.substeps
    expected = list(fine.sim.iter_frames())
    np.testing.assert_allclose(again, expected[1], atol=1e-6)
    assert run.sim.substeps * 2 == fine.sim.substeps                  # restored after the retry
    assert run._retry_frame(3, 2) is None                            # only the frame just yielded


def test_a_guard_stop_of_the_reference_retries_then_names_the_limit():
    """With a limit no run can meet, the reference engine retries (4x, 16x substeps) and then
    stops at frame 1 with the limit in the message; frame 0 is kept."""
    setup = small_cloth(frames=3)
    run = open_engine("reference").prepare(setup)
    run._guard = Guard(setup, GuardLimits(growth=10.0, edge_strain_mean=1e-9, edge_strain_max=10.0))
    with pytest.raises(ImplausibleFrame) as info:
        run.bake()
    assert info.value.frame == 1 and len(info.value.positions) == 1
    assert "on average" in str(info.value) and "frame 1" in str(info.value)


# --------------------------------------------------------------------------- false alarms

JELLY_V1 = pytest.mark.skip(reason="the v1 corotated reference collapses a poked jelly to 14% of its volume "
                                   "(DESIGN.md section 3), which the guard rightly stops; re-enable with the "
                                   "neo-Hookean reference")
DEMOS = [("sheet", "flag_wind"), ("sphere", "jelly_poke"), ("blob", "toy_drop")]


@pytest.mark.parametrize("family, scene_name", DEMOS)
def test_reference_on_demo_scenes_gives_no_false_alarm(family, scene_name):
    """The demo scenes, 12 frames (the jelly is poked at frames 6-8) on small procedural meshes
    (the bundled samples take minutes in the reference; `docs/RELIABILITY.md` has their counts)."""
    sc = read_scene(ASSETS / "scenes" / f"{scene_name}.json")
    sc["frames"] = 12
    setup = setup_from_scene(make_shape(family, np.random.default_rng(1), 250), sc)
    frames_ = open_engine("reference").prepare(setup).bake()      # raises ImplausibleFrame on a false alarm
    assert len(frames_) == 12


@pytest.mark.parametrize("case", ["cylinder_push", "cloth_corners"])
def test_reference_on_the_failure_setups_gives_no_false_alarm(case):
    mesh, sc = FAILURE_CASES[case](frames=12)
    setup = setup_from_scene(mesh, sc)
    assert len(open_engine("reference").prepare(setup).bake()) == 12


@pytest.mark.parametrize("index", [0, 1, 2])
def test_generated_training_sequences_pass_the_guard(index):
    """Training-like sequences (random shape, scenario and material, simulated by the reference)
    replayed through the guard: no frame trips it."""
    from engine.training.generate import make_sequence
    seq, entry = make_sequence(14, index, frames=16, target_vertices=(200, 300))
    setup = setup_from_sequence(seq)
    guard = Guard(setup)
    bad = [(t, guard.check(t, x).message()) for t, x in enumerate(seq.positions) if t and guard.check(t, x)]
    assert not bad, (entry, bad[:1])


# --------------------------------------------------------------------------- checks between two full ones

def _stretch_once(run, frames, factor=2.5):
    """Steps from `frames` end, the first time each is computed, with the body stretched `factor`
    times about its centre (steps gone wrong; computed again, they come out right)."""
    real, calls = run._frame, {}
    stretched = run.scene.encode(run.scene.sub.rest * factor)

    def step(f, state, substeps):
        calls[f] = calls.get(f, 0) + 1
        state = real(f, state, substeps)
        return state._replace(q=state.q + stretched) if f in frames and calls[f] == 1 else state

    run._frame = step
    return calls


def _learned_run(frames=12):
    torch.manual_seed(0)
    model = NeurokModel().eval()
    mesh = make_shape("box", np.random.default_rng(1), 300)
    setup = setup_from_scene(mesh, scene(frames, {"preset": "rubber"}, [{"select": box([0, 0, 0], [0.2, 1, 1])}]))
    from engine.learned.runtime import NeurokRun
    return NeurokRun(model, setup)


def test_a_bad_frame_between_two_full_checks_is_recomputed_and_the_run_goes_on_from_it():
    """The learned engine checks every frame on a small sample and in full every 8th frame, and
    holds the frames in between until then. A frame that goes wrong in between (frame 4, the
    step from frame 3) is found by the quick check, recomputed, and the frames after it are
    computed again from there: no frame handed out breaks a limit, and every frame number comes
    once, in order."""
    run = _learned_run()
    assert run.retry_window == 8
    calls = _stretch_once(run, {3})
    seen = list(run.frames())
    assert [t for t, _ in seen] == list(range(12))
    assert calls[3] == 2 and run.guard_retries == 1
    check = Guard(run.setup)
    assert all(check.check(t, x) is None for t, x in seen[1:])
    clean = _learned_run().bake()
    assert np.abs(np.array([x for _, x in seen]) - clean).max() < 0.02 * np.ptp(clean[0], axis=0).max()   # finer steps at frame 4


def test_what_the_quick_check_misses_the_full_check_finds_in_the_held_frames():
    """Where the quick check's sample misses a fault (here: it is switched off) and the fault lasts
    to the next full check (frames 4-8 wrong until computed again), the full check at frame 8
    goes back over the held frames from the oldest, and frame 4 is recomputed and the run goes on
    from it. (A fault the quick sample misses that is gone again by the next full check is not
    caught: docs/RELIABILITY.md.)"""
    run = _learned_run()
    full = run.guard.check
    run.guard.check = lambda t, x, quick=False: None if quick else full(t, x)
    calls = _stretch_once(run, set(range(3, 8)))
    seen = list(run.frames())
    assert [t for t, _ in seen] == list(range(12))
    assert calls[3] == 2 and run.guard_retries == 1
    check = Guard(run.setup)
    assert all(check.check(t, x) is None for t, x in seen[1:])
