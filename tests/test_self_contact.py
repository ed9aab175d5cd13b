"""Self-contact of sheets (engine/core/self_contact.py): the pair search finds exactly the pairs a
brute-force search finds, a substep's pairs hold every contact that comes within reach on the way
(against every pair) while a sheet that keeps its rest shape is not searched at all, two sheets
3 mm apart meet where they should and nowhere else, the
thickness layer's penalty is exact (finite differences) and convex, and a sheet dropped folded
onto itself in the reference simulator never passes through itself."""
import numpy as np
import pytest
import scipy.sparse as sp

from engine.core.errors import FormatError
from engine.core.geometry import face_edges
from engine.core.closest_points import pair_distance, point_triangle
from engine.core.self_contact import (SheetSelfContact, pair_nodes, proximity, relative_motion,
                                      self_contact_penalty)

D = 0.005       # the thickness: Blender's default Self Collision Distance


def grid(n, h, origin=(0.0, 0.0, 0.0)):
    """An n x n vertex square sheet of spacing h in the plane z = origin z; quad (i, j)'s
    triangles are (a, b, c) and (a, c, d) (diagonal a-c), a = (i, j), c = (i + 1, j + 1)."""
    u = np.arange(n) * h
    X, Y = np.meshgrid(u, u, indexing="ij")
    v = np.stack([X.ravel(), Y.ravel(), np.zeros(n * n)], axis=1) + np.asarray(origin)
    idx = np.arange(n * n).reshape(n, n)
    a, b, c, d = idx[:-1, :-1].ravel(), idx[1:, :-1].ravel(), idx[1:, 1:].ravel(), idx[:-1, 1:].ravel()
    return v, np.concatenate([np.stack([a, b, c], 1), np.stack([a, c, d], 1)]).astype(np.int64)


def two_sheets(gap=0.003, n=6, h=0.025):
    """Two parallel sheets `gap` apart, the upper one shifted by (h/3, 2h/3): each vertex of one
    over the other's interior lies above (below) the centroid of one of its triangles, 3 mm away,
    and at least 6.6 mm from every other triangle."""
    lower, faces = grid(n, h)
    upper, _ = grid(n, h, (h / 3, 2 * h / 3, gap))
    return np.vstack([lower, upper]), np.vstack([faces, faces + n * n]), n, h


def test_two_sheets_3mm_apart_meet_once_per_vertex_over_the_other_and_never_within_one():
    x, faces, n, h = two_sheets()
    vt, ee = proximity(x, faces, D)
    half, quads = n * n, (n - 1) ** 2
    sheet_of_vertex = np.arange(len(x)) >= half
    sheet_of_face = np.arange(len(faces)) >= len(faces) // 2
    edges = face_edges(faces)[0]
    assert np.all(sheet_of_vertex[vt[:, 0]] != sheet_of_face[vt[:, 1]])
    assert np.all(sheet_of_vertex[edges[ee[:, 0], 0]] != sheet_of_vertex[edges[ee[:, 1], 0]])
    assert len(ee) > 0                                    # edges crossing 3 mm apart
    # upper vertex (i, j), i, j < n - 1, lies over the lower triangle (a, c, d) of quad (i, j)
    i, j = np.meshgrid(np.arange(n - 1), np.arange(n - 1), indexing="ij")
    upper = half + (i * n + j).ravel()
    expected_upper = {(int(v), int(quads + q)) for v, q in zip(upper, (i * (n - 1) + j).ravel())}
    # lower vertex (i, j), 1 <= i, j, lies under the upper triangle (a, b, c) of quad (i - 1, j - 1)
    lower = ((i + 1) * n + (j + 1)).ravel()
    expected_lower = {(int(v), int(len(faces) // 2 + q)) for v, q in zip(lower, (i * (n - 1) + j).ravel())}
    assert {tuple(map(int, p)) for p in vt} == expected_upper | expected_lower
    assert len(vt) == 2 * quads == 50
    d, _ = pair_distance(x, *pair_nodes(vt, np.zeros((0, 2), np.int64), faces, edges))
    assert np.allclose(d, 0.003)


def test_a_flat_sheet_has_no_pairs():
    x, faces = grid(20, 0.01)
    vt, ee = proximity(x, faces, D)
    assert len(vt) == 0 and len(ee) == 0
    contact = SheetSelfContact(x, faces, D, np.full(len(x), 1e-5))
    assert len(contact.pairs(x, x + [0.0, 0.0, -0.01])) == 0


def crumpled(seed=0, n=14, h=0.02):
    """A grid sheet crumpled by random smooth folds and noise, so that many parts come near."""
    rng = np.random.default_rng(seed)
    x, faces = grid(n, h)
    u, v = x[:, 0] / (n * h), x[:, 1] / (n * h)
    x[:, 0] = 0.1 * np.sin(5 * u + 2 * v) + 0.05 * u
    x[:, 1] = 0.1 * np.cos(4 * v - u) * (0.5 + u)
    x[:, 2] = 0.05 * np.sin(7 * u * v + 3 * u)
    return x + 0.004 * rng.standard_normal(x.shape), faces


def brute_force(x, faces, distance):
    edges = face_edges(faces)[0]
    v, t = np.meshgrid(np.arange(len(x)), np.arange(len(faces)), indexing="ij")
    vt = np.stack([v.ravel(), t.ravel()], axis=1)
    vt = vt[np.all(faces[vt[:, 1]] != vt[:, :1], axis=1)]
    a, b = np.triu_indices(len(edges), 1)
    ee = np.stack([a, b], axis=1)
    ee = ee[np.all(edges[a][:, :, None] != edges[b][:, None, :], axis=(1, 2))]
    d, _ = pair_distance(x, *pair_nodes(vt, ee, faces, edges))
    return vt[d[:len(vt)] < distance], ee[d[len(vt):] < distance]


@pytest.mark.parametrize("seed", [0, 1])
def test_the_pair_search_finds_what_a_brute_force_search_finds(seed):
    x, faces = crumpled(seed)
    distance = 0.012                                      # above the sheet's edge length (~8 mm here)
    vt, ee = proximity(x, faces, distance)
    bvt, bee = brute_force(x, faces, distance)
    print(f"{len(bvt)} vertex-triangle and {len(bee)} edge-edge pairs within {distance * 1000:.0f} mm")
    assert len(bvt) > 100 and len(bee) > 100
    assert sorted(map(tuple, vt)) == sorted(map(tuple, bvt))
    assert sorted(map(tuple, ee)) == sorted(map(tuple, bee))
    # with a motion, every pair within the distance at either end is among the candidates
    rng = np.random.default_rng(seed + 10)
    x_to = x + 0.01 * rng.standard_normal(x.shape)
    cvt, cee = proximity(x, faces, distance, slack=np.linalg.norm(x_to - x, axis=1))
    for end in (x, x_to):
        for found, candidates in zip(brute_force(end, faces, distance), (cvt, cee)):
            assert set(map(tuple, found)) <= set(map(tuple, candidates))


def rolled(n=18, h=0.01, turns=1.4, gap=0.003):
    """An n x n sheet of spacing h (twice the thickness, as the bench's 10k sheet) at rest, and
    the same sheet with its first part rolled about the y axis into a spiral whose turns lie `gap`
    apart, the rest flat: folds far apart at rest meet, the flat part lies as at rest."""
    rest, faces = grid(n, h)
    length = turns * 2 * np.pi * 0.02                     # rolled about a 20 mm core
    x = rest.copy()
    on_roll = rest[:, 0] < length
    angle = rest[on_roll, 0] / 0.02                       # about one radian per 20 mm of sheet
    radius = 0.02 + gap * angle / (2 * np.pi)
    x[on_roll, 0] = length - radius * np.sin(angle)
    x[on_roll, 2] = 0.02 + gap * turns - radius * np.cos(angle)
    return rest, x, faces


def distinct_keys(nodes, weights):
    """The contact each pair holds: a vertex and the triangle's closest feature (its vertices of
    non-zero weight), or two edges."""
    keys = set()
    for k, w in zip(nodes, weights):
        if w[0] == 1.0:                                  # vertex-triangle: weights (1, -barycentric)
            keys.add((int(k[0]), tuple(sorted(int(c) for c, wc in zip(k[1:], w[1:]) if wc < 0))))
        else:
            keys.add(tuple(sorted([tuple(sorted(map(int, k[:2]))), tuple(sorted(map(int, k[2:])))])))
    return keys


@pytest.mark.parametrize("motion", ["still", "turning", "rolling on"])
def test_a_substep_s_pairs_hold_every_contact_that_comes_within_reach_on_the_way(motion):
    """Against every pair (brute force): each contact that comes within the search's reach on the
    way from x_n to the guess (sampled) is among the substep's pairs, and none that the pairs'
    rule (distance at x_n less the corners' relative motion within reach) would not take."""
    rest, x, faces = rolled()
    rng = np.random.default_rng(1)
    turn = {"still": 0.0, "turning": 0.05, "rolling on": 0.0}[motion]
    c, s = np.cos(turn), np.sin(turn)
    guess = x @ np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]]).T + [0.004, -0.002, 0.003]
    if motion == "rolling on":                          # the roll closes on itself, the flat part lifts
        guess = x + 0.003 * rng.standard_normal(x.shape) + [0.0, 0.0, 0.002] * (x[:, :1] > 0.1)
    contact = SheetSelfContact(rest, faces, D, np.full(len(x), 1e-4))
    pairs = contact.pairs(x, guess)
    edges = contact.edges
    bvt, bee = brute_force(rest, faces, np.inf)
    nodes, is_vt = pair_nodes(bvt, bee, faces, edges)
    apart = pair_distance(rest, nodes, is_vt)[0] >= contact.reach          # not excluded at rest
    nodes, is_vt = nodes[apart], is_vt[apart]
    dist, w = pair_distance(x, nodes, is_vt)
    taken = dist - relative_motion(guess - x, nodes, is_vt) < contact.reach
    nodes, is_vt, w = nodes[taken], is_vt[taken], w[taken]
    closest = np.min([pair_distance(x + f * (guess - x), nodes, is_vt)[0] for f in np.linspace(0, 1, 21)], axis=0)
    inside = is_vt | ((w[:, 1] > 0) & (w[:, 1] < 1) & (w[:, 3] < 0) & (w[:, 3] > -1))
    on_the_way = (closest < contact.reach) & inside
    found = distinct_keys(pairs.nodes, pairs.weights)
    print(f"{motion}: {len(pairs)} pairs; {int(on_the_way.sum())} pairs come within reach on the way, "
          f"{int(taken.sum())} would be taken")
    assert on_the_way.sum() > 50
    assert distinct_keys(nodes[on_the_way], w[on_the_way]) <= found
    assert found <= distinct_keys(nodes, w)


def test_a_sheet_that_moves_rigidly_or_bends_gently_is_not_searched():
    """Its patches' neighbourhoods keep their rest shape and no patches but neighbours meet: its
    candidates are all among the pairs listed at rest, none found by a search."""
    rest, faces = grid(30, 0.01)
    contact = SheetSelfContact(rest, faces, D, np.full(len(rest), 1e-4))
    c, s = np.cos(0.03), np.sin(0.03)
    turned = rest @ np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]]).T + [0.1, 0.2, 0.3]
    bent = rest.copy()                                  # wrapped about a 1 m cylinder
    bent[:, 0] = 0.15 + np.sin(rest[:, 0] - 0.15)
    bent[:, 2] = 1.0 - np.cos(rest[:, 0] - 0.15)
    for x, guess in ((rest, turned), (bent, bent + [0.0, 0.0, 0.01])):
        vt, ee = contact._candidates(x, guess - x)
        listed, is_vt = contact._listed, contact._listed_is_vt
        assert set(map(tuple, vt)) <= set(map(tuple, listed[is_vt]))
        assert set(map(tuple, ee)) <= set(map(tuple, listed[~is_vt]))
        assert len(contact.pairs(x, guess)) == 0


def pressed_together():
    """The two sheets and their contact pairs taken at 3 mm apart; then the upper sheet moved
    down by 4 mm (through the lower one) and sideways a little."""
    x, faces, n, h = two_sheets()
    mass = np.full(len(x), 2e-4)
    rest = x.copy()
    rest[n * n:, 2] += 0.05                                # apart at rest: nothing excluded
    contact = SheetSelfContact(rest, faces, D, mass)
    pairs = contact.pairs(x)
    y = x.copy()
    y[n * n:] += [0.001, -0.0007, -0.004]
    return contact, pairs, x, y


def test_penalty_gradient_is_the_energy_s_finite_difference_and_its_hessian_is_psd():
    contact, pairs, x, y = pressed_together()
    assert len(pairs) > 50
    energy, grad, H, depth = self_contact_penalty(y, pairs, D)
    assert energy > 0 and (depth > 0).sum() > 50
    # the sheets passed through each other at y (1 mm): the pairs facing each other straight
    # (3 mm apart at x) are 6 mm deep in the 5 mm layer, none came out on the other side (their
    # directions were taken at x)
    straight = np.abs(pairs.normal[:, 2]) > 1 - 1e-12
    assert straight.sum() >= 50
    assert depth[straight] == pytest.approx(np.full(straight.sum(), 0.006), abs=1e-12)
    rng = np.random.default_rng(0)
    for _ in range(5):
        u = rng.standard_normal(y.shape)
        eps = 1e-7
        fd = (self_contact_penalty(y + eps * u, pairs, D, False)[0] - self_contact_penalty(y - eps * u, pairs, D, False)[0]) / (2 * eps)
        assert fd == pytest.approx(float(np.sum(grad * u)), rel=1e-6)
    e, g, H_terms = contact.terms(y, pairs)
    assert e == energy and np.array_equal(g, grad.ravel()) and H_terms is H or (H_terms != H).nnz == 0
    Hd = H.toarray()
    # each pair's block is k (w w^T) (x) n n^T on its four vertices
    J = np.zeros((len(pairs), len(y), 3))
    direction = pairs.gaps(y)[1]
    np.add.at(J, (np.arange(len(pairs))[:, None], pairs.nodes), pairs.weights[:, :, None] * direction[:, None, :])
    J = J.reshape(len(pairs), -1)
    assert np.allclose(Hd, J.T @ ((pairs.k * (depth > 0))[:, None] * J), rtol=1e-12, atol=1e-12 * np.abs(Hd).max())
    assert np.allclose(Hd, Hd.T)
    eig = np.linalg.eigvalsh(Hd)
    assert eig.min() > -1e-9 * eig.max()
    # exact: the gradient changes by H times a small step (no pair leaves or enters the layer)
    step = 1e-7 * rng.standard_normal(y.shape)
    g2 = self_contact_penalty(y + step, pairs, D, False)[1]
    assert np.allclose((g2 - grad).ravel(), Hd @ step.ravel(), rtol=1e-6, atol=1e-9 * np.abs(Hd).max() * 1e-7)


def test_penalty_is_zero_outside_the_thickness():
    contact, pairs, x, _ = pressed_together()
    y = x.copy()
    half = len(x) // 2
    y[half:, 2] += 0.0021                                  # 5.1 mm apart
    energy, grad, H, depth = self_contact_penalty(y, pairs, D)
    assert energy == 0.0 and not grad.any() and H.count_nonzero() == 0 and not depth.any()
    e, g, H = contact.terms(y, pairs)
    assert e == 0.0 and H is None
    y[half:, 2] -= 0.0002                                  # 4.9 mm: in the layer by 0.1 mm
    straight = np.abs(pairs.normal[:, 2]) > 1 - 1e-12
    energy, _, _, depth = self_contact_penalty(y, pairs, D)
    assert depth[straight] == pytest.approx(np.full(straight.sum(), 1e-4), abs=1e-12)
    assert energy == pytest.approx(0.5 * 1e-8 * pairs.k[depth > 0].sum())


# --------------------------------------------------------------------------- the reference's cloth

def folded_strip(length=0.2, width=0.2, radius=0.02, h=0.02, lift=0.002):
    """A strip folded onto itself: a lower layer `lift` above the floor (z = 0), a half-turn of
    `radius` at x = length, and an upper layer 2 x radius above the lower, one mesh."""
    arc = np.pi * radius
    s = np.linspace(0.0, 2 * length + arc, int(round((2 * length + arc) / h)) + 1)
    y = np.linspace(0.0, width, int(round(width / h)) + 1)
    turn = np.clip((s - length) / arc, 0.0, 1.0) * np.pi
    x = np.where(s < length, s, np.where(s > length + arc, length - (s - length - arc), length + radius * np.sin(turn)))
    z = lift + radius * (1.0 - np.cos(turn))
    S, Y = np.meshgrid(np.arange(len(s)), y, indexing="ij")
    vertices = np.stack([x[S.ravel()], Y.ravel(), z[S.ravel()]], axis=1)
    m = len(y)
    idx = np.arange(len(s) * m).reshape(len(s), m)
    a, b, c, d = idx[:-1, :-1].ravel(), idx[1:, :-1].ravel(), idx[1:, 1:].ravel(), idx[:-1, 1:].ravel()
    return vertices, np.concatenate([np.stack([a, b, c], 1), np.stack([a, c, d], 1)]).astype(np.int64)


def drop_folded(self_collision, frames=12, engine="reference"):
    from engine.api import open_engine
    from engine.core.formats import Mesh
    from engine.core.scene import setup_from_scene
    from engine.evaluation.plausibility import crossing_triangle_pairs
    from engine.reference.simulator import ReferenceSimulator
    vertices, faces = folded_strip()
    scene = {"format": "neurok.scene/1", "frames": frames, "dt": 1 / 24, "material": {"preset": "cloth"},
             "floor": {"z": 0.0}}
    if self_collision is not None:
        scene["self_collision"] = self_collision
    setup = setup_from_scene(Mesh(vertices, faces), scene)
    if engine == "reference":
        xs = list(ReferenceSimulator(setup).iter_frames())
    else:
        run = open_engine("neurok").prepare(setup)
        assert run.layer is not None                    # a small sheet at Medium: its full-space layer on
        xs = list(np.asarray(run.bake()))
    return xs, [crossing_triangle_pairs(x, faces) for x in xs]


def test_a_sheet_dropped_folded_onto_itself_never_passes_through_with_self_collision():
    free, free_crossings = drop_folded(None)
    held, held_crossings = drop_folded({"distance": D})
    away = held[0][:, 0] < 0.15                         # the layers away from the fold
    lower, upper = away & (held[0][:, 2] < 0.01), away & (held[0][:, 2] > 0.01)
    gap = [float(x[upper, 2].min() - x[lower, 2].max()) for x in held]
    print(f"crossing pairs a frame without self-collision {free_crossings}, with it {held_crossings}; "
          f"the layers' least gap away from the fold: {[round(g * 1000, 2) for g in gap]} mm")
    assert sum(free_crossings) > 0                      # the scene does drive the sheet through itself
    assert free[-1][upper, 2].max() < 0.002             # without it the upper layer lies on the floor
    assert held_crossings == [0] * len(held)
    assert 0.0045 < gap[-1] < D                         # with it the upper layer rests on the lower's 5 mm layer


def test_the_learned_engine_s_sheet_layer_keeps_the_folds_apart_too():
    free, free_crossings = drop_folded(None, engine="neurok")
    held, held_crossings = drop_folded({"distance": D}, engine="neurok")
    print(f"learned engine: crossing pairs a frame without self-collision {free_crossings}, with it {held_crossings}")
    assert sum(free_crossings) > 0
    assert held_crossings == [0] * len(held)


def test_self_collision_scene_key():
    from engine.core.formats import Mesh
    from engine.core.scene import setup_from_scene, validate_scene
    mesh = Mesh(*grid(3, 0.1))
    base = {"format": "neurok.scene/1", "frames": 2, "material": {"preset": "cloth"}}
    assert setup_from_scene(mesh, base).self_collision is None
    assert "self_collision" not in validate_scene(base)          # an old scene keeps its digest
    assert setup_from_scene(mesh, dict(base, self_collision=True)).self_collision == D
    assert setup_from_scene(mesh, dict(base, self_collision=False)).self_collision is None
    assert setup_from_scene(mesh, dict(base, self_collision={"distance": 0.01})).self_collision == 0.01
    assert setup_from_scene(mesh, dict(base, self_collision=True)).self_friction == 0.5     # cloth on cloth
    assert setup_from_scene(mesh, dict(base, self_collision={"friction": 0.2})).self_friction == 0.2
    for bad in ({"distance": -1}, {"distance": "5mm"}, {"thickness": 0.01}, {"friction": -0.1}, 0.005, "yes"):
        with pytest.raises(FormatError, match="self_collision"):
            setup_from_scene(mesh, dict(base, self_collision=bad))


def test_a_recorded_sequence_replays_with_its_self_collision(tmp_path):
    from engine.core.formats import Mesh, read_sequence, write_sequence
    from engine.core.scene import setup_from_scene, setup_from_sequence
    mesh = Mesh(*grid(3, 0.1))
    base = {"format": "neurok.scene/1", "frames": 2, "material": {"preset": "cloth"}}
    for key, distance in ((None, None), ({"distance": 0.01, "friction": 0.3}, 0.01)):
        setup = setup_from_scene(mesh, base if key is None else dict(base, self_collision=key))
        write_sequence(tmp_path / "seq.npz", setup.to_sequence(np.stack([setup.x0, setup.x0])))
        replay = setup_from_sequence(read_sequence(tmp_path / "seq.npz"))
        assert replay.self_collision == distance
        assert distance is None or replay.self_friction == 0.3
    # one recorded before the layers had friction replays without it, as it was made
    seq = setup.to_sequence(np.stack([setup.x0, setup.x0]))
    del seq.meta["self_friction"]
    assert setup_from_sequence(seq).self_friction == 0.0


def pressed(self_collision, engine, frames=16, top=0.008):
    """The folded strip between two boxes: it lies on one (its top face at z = 0) while the other
    comes down from above onto its upper layer, away from the fold, and stops with its face `top`
    above the lower box: room for both layers and the thickness between them."""
    from engine.api import open_engine
    from engine.core.formats import Mesh
    from engine.core.scene import setup_from_scene
    from engine.evaluation.plausibility import crossing_triangle_pairs
    from engine.evaluation.scenes import box_collider
    from engine.reference.simulator import ReferenceSimulator
    vertices, faces = folded_strip()
    below = box_collider((-0.1, -0.1, -0.1), (0.4, 0.3, 0.0), thickness=0.001, name="below")
    above = box_collider((-0.1, -0.1, 0.0), (0.15, 0.3, 0.1), thickness=0.001, name="above")
    lowest = np.array(above.pop("vertices"))
    heights = np.minimum(0.06, np.maximum(top, 0.06 - 0.006 * np.arange(frames)))   # down 6 mm a frame, then held
    above["positions"] = [(lowest + [0.0, 0.0, z]).tolist() for z in heights]
    scene = {"format": "neurok.scene/1", "frames": frames, "dt": 1 / 24, "material": {"preset": "cloth"},
             "colliders": [below, above]}
    if self_collision is not None:
        scene["self_collision"] = self_collision
    setup = setup_from_scene(Mesh(vertices, faces), scene)
    xs = list(ReferenceSimulator(setup).iter_frames()) if engine == "reference" else \
        list(np.asarray(open_engine("neurok").prepare(setup).bake()))
    away = vertices[:, 0] < 0.1                         # under the pressing box, away from the fold
    lower, upper = away & (vertices[:, 2] < 0.01), away & (vertices[:, 2] > 0.01)
    gaps = [float(x[upper, 2].min() - x[lower, 2].max()) for x in xs]
    return [crossing_triangle_pairs(x, faces) for x in xs], gaps, xs[-1][upper, 2].max()


@pytest.mark.parametrize("engine", ["reference", "neurok"])
def test_a_folded_sheet_pressed_between_two_colliders_never_passes_through(engine):
    crossings, gaps, upper_top = pressed({"distance": D}, engine)
    print(f"{engine}: crossing pairs a frame {crossings}; least gap between the layers "
          f"{[round(1000 * g, 1) for g in gaps]} mm; the upper layer's top at the end {1000 * upper_top:.1f} mm")
    assert crossings == [0] * len(crossings)
    assert upper_top < 0.008                            # pressed: the moving box came down onto the upper layer
    # the layers held apart by their thickness (the learned engine's 20 iterations a substep leave the
    # penalty partly compressed)
    assert min(gaps[-4:]) > (0.9 if engine == "reference" else 0.5) * D


# --------------------------------------------------------------------------- friction between the layers

SLOPE = np.radians(25.0)
G = 9.81


def sheet_on_a_sheet(mu, engine, frames=13):
    """A 0.1 m square of cloth dropped from 2 cm onto a 0.6 x 0.3 m sheet held flat by its pins, under gravity
    tilted by 25 degrees (the slope seen in its own frame, as tests/test_friction.py's ramp), the
    layers' friction `mu`: the square's mean path down the slope [frames + 1] (metres)."""
    from engine.api import open_engine
    from engine.core.formats import Mesh
    from engine.core.scene import setup_from_scene
    from engine.reference.simulator import ReferenceSimulator
    lower, lower_faces = grid(31, 0.02)
    upper, upper_faces = grid(6, 0.02, (0.01 + 0.02 / 3, 0.1 + 0.04 / 3, 4 * D))     # dropped onto it
    vertices, faces = np.vstack([lower, upper]), np.vstack([lower_faces, upper_faces + len(lower)])
    held = (np.arange(len(vertices)) < len(lower)).astype(float)
    scene = {"format": "neurok.scene/1", "frames": frames, "dt": 1 / 24,
             "material": {"preset": "cloth", "air_damping": 0.0},
             "gravity": [G * np.sin(SLOPE), 0.0, -G * np.cos(SLOPE)],
             "pins": [{"select": {"weights": held.tolist()}}],
             "self_collision": {"distance": D, "friction": mu}}
    setup = setup_from_scene(Mesh(vertices, faces), scene)
    xs = (np.stack(list(ReferenceSimulator(setup).iter_frames())) if engine == "reference"
          else np.asarray(open_engine("neurok").prepare(setup).bake()))
    square = held == 0
    return xs[:, square, 0].mean(axis=1) - xs[0, square, 0].mean(), xs[:, square, 2].min(axis=1)


@pytest.mark.parametrize("mu", [0.0, 0.3, 0.6])
def test_a_sheet_slides_on_a_sheet_as_coulomb_says(mu):
    """In the reference: frictionless, the square slides down at g sin 25 = 4.15 m/s^2 (the layer
    has no edges to climb); with mu = 0.3 at g (sin - mu cos) = 1.48 m/s^2; with mu = 0.6 it
    stays where it landed (static friction: < 1 mm in 0.4 s)."""
    path, lowest = sheet_on_a_sheet(mu, "reference")
    t = np.arange(len(path)) / 24
    late = t >= 0.25                                    # landed at 0.06 s; the first contact settled
    accel = 2.0 * np.polyfit(t[late], path[late], 2)[0]
    print(f"mu {mu}: path {np.round(1000 * path, 1).tolist()} mm, acceleration {accel:.3f} m/s^2, "
          f"lowest {1000 * lowest.min():.2f} mm")
    assert lowest.min() > 0.9 * D                        # on the lower sheet's layer throughout
    if mu < np.tan(SLOPE):
        assert accel == pytest.approx(G * (np.sin(SLOPE) - mu * np.cos(SLOPE)), rel=0.05)
    else:
        assert abs(path[-1] - path[t >= 0.125][0]) < 1e-3


def test_friction_between_the_layers_is_exact_and_opposes_the_slide():
    """The layers' friction potential: its gradient is its energy's finite difference, its
    Hessian positive semi-definite, it pulls the two layers against their relative slide with
    mu lambda per touching pair while they slide, and it moves no momentum (each pair's forces sum
    to zero)."""
    from engine.core.self_contact import LayerFriction
    contact, pairs, x, _ = pressed_together()
    y = x.copy()
    half = len(x) // 2
    y[half:, 2] -= 0.001                                # 2 mm apart: 3 mm into the layer
    friction = LayerFriction.of(pairs, y, D, 0.4)
    assert friction is not None and len(friction.weight) > 50
    straight = np.abs(friction.normal[:, 2]) > 1 - 1e-12
    assert straight.sum() >= 50
    assert friction.weight[straight] == pytest.approx(0.4 * pairs.k[pairs.gaps(y)[0] < D][straight] * 0.003, rel=1e-9)
    h = 1 / 96
    slid = y.copy()
    slid[half:] += [0.002, 0.001, 0.0]                  # the upper layer slides 2.2 mm: sliding regime
    energy, grad, H = friction.terms(slid, y, h)
    assert np.allclose(grad.sum(axis=0), 0.0, atol=1e-12 * np.abs(grad).max())
    along = np.array([2.0, 1.0, 0.0]) / np.sqrt(5.0)
    pull = grad[half:].sum(axis=0)                      # the friction force on the upper layer is -pull
    assert pull @ along == pytest.approx(friction.weight.sum(), rel=1e-6)
    rng = np.random.default_rng(1)
    for _ in range(3):
        u = rng.standard_normal(y.shape)
        eps = 1e-9
        fd = (friction.terms(slid + eps * u, y, h, False)[0] - friction.terms(slid - eps * u, y, h, False)[0]) / (2 * eps)
        assert fd == pytest.approx(float(np.sum(grad * u)), rel=1e-5)
    eig = np.linalg.eigvalsh(H.toarray())
    assert eig.min() > -1e-9 * eig.max()


def test_the_gap_is_continuous_where_a_vertex_passes_beside_a_triangle_s_edge():
    """A vertex whose closest point is on a triangle's edge has no plane to measure against: its
    gap is its distance from that point, negative once it has crossed the triangle's plane. Where
    it passes beside the edge, level with the plane, the gap (and the penalty's energy) must not
    jump: signed by the side alone it went from +3 mm to -3 mm there, and every line search that
    met such a pair stalled (the bench's 10k sheet with self-collision gave up on 23 of its 46
    substeps). It is positive above the plane and negative below it, as before."""
    from engine.core.self_contact import GAP_WEDGE, ContactPairs
    triangle = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    up = np.array([[0.0, 0.0, 1.0]])
    # the vertex 3 mm beside the edge (0,0,0)-(1,0,0), its closest point the edge's middle
    pairs = ContactPairs.build(np.array([[3, 0, 1, 2]]), np.array([[1.0, -0.5, -0.5, 0.0]]), up, np.array([1e4]), 4)
    assert not pairs.inside[0]
    heights = np.linspace(0.002, -0.002, 4001)
    x = np.repeat(np.vstack([triangle, [[0.5, -0.003, 0.0]]])[None], len(heights), axis=0)
    x[:, 3, 2] = heights
    gap = np.array([pairs.gaps(xi)[0][0] for xi in x])
    assert np.abs(np.diff(gap)).max() <= np.abs(np.diff(heights)).max() / GAP_WEDGE * (1 + 1e-9)
    assert (gap[heights > 0] > 0).all() and (gap[heights < 0] < 0).all()
    assert gap[0] == pytest.approx(np.hypot(0.002, 0.003))          # well above the plane: the distance
    energy = np.array([self_contact_penalty(xi, pairs, D, False)[0] for xi in x])
    assert np.abs(np.diff(energy)).max() < 1e-3 * energy.max()
