"""A learned decoder residual as the sheet layer's starting guess (issue 53, item 3): does it save
iterations and milliseconds at equal quality?

Each substep the sheet layer (`learned/sheet_layer.py`) runs L-BFGS from the guess
`runtime.NeurokRun._layer_substep` builds (the latent step's move decoded, plus inertia). The
residual is what the iterations add to that guess, x1 - guess, per vertex. This script

1. runs the learned engine with its layer on training sheets (data/train_cloth, train split, at
   most --max-vertices vertices, --train-frames frames each) and records at every substep the guess,
   the layer's result and local features that exist at run time;
2. fits two models of the residual, both equivariant (the residual is sum_k c_k f_k over vector
   features f_k [N,3]: the guess's move, h v, the external forces' h^2 a, the incremental
   potential's gradient at the guess over the vertex's inertia (and pin) and over its Jacobi diagonal,
   those smoothed over 1, 2 and 4 rings, the guess's umbrella Laplacian, the pins' pull):
   "linear" (constant c_k, least squares) and "mlp" (c_k from a small MLP of rotation invariants:
   the features' Gram matrix, the pin weight and the distance to the pins, per vertex);
3. on the held-out flag_wind, grid and drape (the evaluation's scenes, against the reference
   simulator, computed once and kept in --out) bakes the layer as shipped (2 x 20 iterations from the
   plain guess), from guess + predicted residual with 20 iterations, and both with fewer iterations;
   prints the distance to the reference x hold-still, mean edge strain (reference's), the far edge's
   fall / overhang, ms per frame (best of --repeats bakes, prediction included) and the mean
   gradient norm after the iterations relative to the shipped run's; and on the shipped run's
   own substeps, the incremental potential after k iterations from either start, as the share of
   the plain guess's gap to a 100-iteration solve that is left (the convergence at equal states).

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python experiments/decoder_residual.py
        [--train 16] [--train-frames 24] [--scenes flag_wind grid drape] [--iterations 5 10 15]
        [--out eval_out/decoder_residual]

About 10 minutes on one core (the reference's three scenes about 2.5 of them, kept for a rerun).
Writes `<out>/results.json`.
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

SCENE_FRAMES = {"flag_wind": 36, "grid": 36, "drape": 48}     # as experiments/sheet_layer_designs.py
VECTOR_NAMES = ("move", "h v", "h^2 a", "grad/inertia", "grad/jacobi", "grad/jacobi 1-ring",
                "grad/jacobi 2-ring", "grad/jacobi 4-ring", "grad/inertia 2-ring", "grad/inertia 4-ring",
                "laplacian", "pin pull")
GRAM = (0, 1, 2, 3, 4, 6, 10)            # the vectors whose dot products the MLP reads


# --------------------------------------------------------------------------- features

class MeshFeatures:
    """What a sheet's features need from its rest mesh, once: the 1-ring averaging matrix, the
    Jacobi diagonal's springs, the pins and each vertex's distance to them over the mesh."""

    def __init__(self, layer):
        import scipy.sparse as sp
        from scipy.sparse.csgraph import dijkstra
        rest, springs = layer.rest, layer.springs
        n, e = len(rest), springs.edges
        adj = sp.coo_matrix((np.ones(2 * len(e)), (np.r_[e[:, 0], e[:, 1]], np.r_[e[:, 1], e[:, 0]])), (n, n)).tocsr()
        self.ring = (sp.diags(1.0 / np.maximum(np.asarray(adj.sum(1)).ravel(), 1)) @ adj).tocsr()
        self.spring_diag = np.bincount(e.ravel(), weights=np.repeat(springs.k, 2), minlength=n)
        self.diagonal = float(np.linalg.norm(np.ptp(rest, axis=0))) or 1.0
        weight = np.asarray(layer.setup.pin_weight, np.float64)
        self.pinned = (weight > 0).astype(np.float64)
        if self.pinned.any():
            lengths = sp.coo_matrix((np.r_[springs.rest_length, springs.rest_length],
                                     (np.r_[e[:, 0], e[:, 1]], np.r_[e[:, 1], e[:, 0]])), (n, n)).tocsr()
            dist = dijkstra(lengths, indices=np.nonzero(self.pinned)[0], min_only=True)
            self.pin_distance = np.where(np.isfinite(dist), dist, self.diagonal) / self.diagonal
        else:
            self.pin_distance = np.ones(n)

    def smooth(self, f, rings):
        for _ in range(rings):
            f = self.ring @ f
        return f


def features(layer, mf: MeshFeatures, frame, x_n, v_n, h, guess, grad):
    """(vectors [N,K,3] in metres, scalars [N,S]) at a substep's guess (`VECTOR_NAMES`), from the
    incremental potential's gradient there (which the iterations evaluate first anyway)."""
    inertia = layer.mass / h ** 2
    held = inertia + layer.pin_k
    by_inertia = -grad / held[:, None]
    jacobi = -grad / (held + layer.air * layer.mass / h + mf.spring_diag)[:, None]
    j1 = mf.smooth(jacobi, 1)
    j2 = mf.smooth(j1, 1)
    i2 = mf.smooth(by_inertia, 2)
    target = np.asarray(layer.setup.pin_target(frame + 1), dtype=np.float64)
    vectors = np.stack([guess - x_n, h * v_n, h ** 2 * layer.forces(frame, x_n, v_n) / layer.mass[:, None],
                        by_inertia, jacobi, j1, j2, mf.smooth(j2, 2), i2, mf.smooth(i2, 2),
                        mf.ring @ guess - guess, mf.pinned[:, None] * (target - guess)], axis=1)
    return vectors, invariants(vectors, mf)


def invariants(vectors, mf):
    """Per vertex: the Gram matrix of `GRAM` vectors over the substep's scale, log-compressed; the
    pin weight and the distance to the pins."""
    g = vectors[:, GRAM]
    scale = float(np.sqrt(np.mean(np.sum(g * g, axis=2)))) + 1e-12
    gram = np.einsum("nki,nli->nkl", g, g) / scale ** 2
    iu = np.triu_indices(len(GRAM))
    gram = gram[:, iu[0], iu[1]]
    return np.concatenate([np.sign(gram) * np.log1p(np.abs(gram)), mf.pinned[:, None], mf.pin_distance[:, None]], axis=1)


# --------------------------------------------------------------------------- models

class Linear:
    """residual = sum_k c_k f_k, one c per vector feature."""
    name = "linear"

    def __init__(self, c):
        self.c = np.asarray(c, np.float64)

    def __call__(self, vectors, scalars):
        return np.einsum("nki,k->ni", vectors, self.c)


class MLP:
    """residual = sum_k c_k(invariants) f_k, c from a two-layer MLP (numpy at run time)."""
    name = "mlp"

    def __init__(self, weights, mean, std):
        self.w = [np.asarray(w, np.float64) for w in weights]
        self.mean, self.std = mean, std

    def coefficients(self, scalars):
        w1, b1, w2, b2, w3, b3 = self.w
        z = np.tanh(((scalars - self.mean) / self.std) @ w1 + b1)
        z = np.tanh(z @ w2 + b2)
        return z @ w3 + b3

    def __call__(self, vectors, scalars):
        return np.einsum("nki,nk->ni", vectors, self.coefficients(scalars))


def sample_weights(records):
    """Per vertex row: 1 / (its substep's mean squared residual), so every substep counts alike."""
    return np.concatenate([np.full(len(r["target"]), 1.0 / (np.mean(np.sum(r["target"] ** 2, 1)) + 1e-30))
                           for r in records])


def fit_linear(records):
    V = np.concatenate([r["vectors"] for r in records])            # [R,K,3]
    T = np.concatenate([r["target"] for r in records])
    w = np.sqrt(sample_weights(records))
    A = (V * w[:, None, None]).transpose(0, 2, 1).reshape(-1, V.shape[1])
    c, *_ = np.linalg.lstsq(A, (T * w[:, None]).ravel(), rcond=None)
    return Linear(c)


def fit_mlp(records, linear, steps, hidden=32, batch=4096, seed=0):
    import torch
    torch.manual_seed(seed)
    V = torch.tensor(np.concatenate([r["vectors"] for r in records]), dtype=torch.float32)
    S = np.concatenate([r["scalars"] for r in records])
    mean, std = S.mean(0), S.std(0) + 1e-6
    S = torch.tensor((S - mean) / std, dtype=torch.float32)
    T = torch.tensor(np.concatenate([r["target"] for r in records]), dtype=torch.float32)
    w = sample_weights(records)
    W = torch.tensor(w / w.mean(), dtype=torch.float32)
    # each vector feature scaled to unit size against the residual (the MLP's coefficients O(1))
    scale = torch.sqrt((W[:, None] * (V ** 2).sum(2)).mean(0) / (W * (T ** 2).sum(1)).mean()) + 1e-30
    V = V / scale[None, :, None]
    net = torch.nn.Sequential(torch.nn.Linear(S.shape[1], hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, hidden),
                              torch.nn.Tanh(), torch.nn.Linear(hidden, V.shape[1]))
    with torch.no_grad():                 # starts as the linear fit
        net[4].weight.mul_(0.01)
        net[4].bias.copy_(torch.tensor(linear.c, dtype=torch.float32) * scale)
    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(steps, 1))
    for _ in range(steps):
        idx = torch.randint(len(T), (batch,))
        pred = torch.einsum("nki,nk->ni", V[idx], net(S[idx]))
        loss = (W[idx] * ((pred - T[idx]) ** 2).sum(1)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    with torch.no_grad():                 # back to the unscaled features
        net[4].weight.div_(scale[:, None])
        net[4].bias.div_(scale)
    weights = [p.detach().numpy().T if p.ndim == 2 else p.detach().numpy() for p in net.parameters()]
    return MLP(weights, mean, std)


def explained(model, records):
    """1 - |r - pred|^2 / |r|^2 per substep, mean over substeps (1: the residual exactly; 0: no better
    than the plain guess; below 0: worse)."""
    return float(np.mean([1 - np.sum((r["target"] - model(r["vectors"], r["scalars"])) ** 2)
                          / max(np.sum(r["target"] ** 2), 1e-30) for r in records]))


# --------------------------------------------------------------------------- runs

def solver(log=None, before=None, timer=None):
    """`quasi_newton.quasi_newton` itself, with two additions: `before(x, grad)` (at the start, with
    the potential's gradient there) may return another start, whose potential is then evaluated
    (`timer`, a list of one float, sums the seconds of that); `log` gets (the energy after each
    iteration, |grad| at the end) per call, from the solver's own trace (for the convergence measures;
    costs nothing)."""
    from engine.learned.quasi_newton import quasi_newton as shipped

    def quasi_newton(potential, x, precondition, iterations, memory, history):
        first = potential(x)
        if before is not None:
            t = time.perf_counter()
            start = before(x, first[1])
            if start is not None:
                x, first = start, potential(start)
            if timer is not None:
                timer[0] += time.perf_counter() - t
        given = {"x": x, "value": first}

        def evaluated_once(y):                  # the start's potential is not evaluated twice
            if given and y is given["x"]:
                return given.pop("value")
            return potential(y)
        trace = [] if log is not None else None
        x = shipped(evaluated_once, x, precondition, iterations, memory, history, trace)
        if log is not None:
            log.append(([energy for energy, _ in trace], float(np.linalg.norm(trace[-1][1]))))
        return x
    return quasi_newton


def new_run(model, setup, iterations, predictor=None, record=None, timer=None, log=None):
    """A learned run with its layer at `iterations` per substep; with `predictor` the layer starts
    from guess + predictor's residual (where it starts from the guess: not in contact); with
    `record` (a list) each substep's state, features and result are appended; `timer` and `log`:
    `solver`'s."""
    from engine.learned import sheet_layer
    from engine.learned.runtime import NeurokRun
    run = NeurokRun(model.model, setup, "cpu", "matched", model.meta, sheet_layer="on")
    layer = run.layer
    layer.iterations = iterations
    mf = MeshFeatures(layer)
    original = layer.step
    context = {}

    def before(x, grad):
        if not np.array_equal(x, context["guess"]):        # the layer started from inertia (contact)
            context["from_inertia"] = True
            return None
        vectors, scalars = features(layer, mf, context["frame"], context["x_n"], context["v_n"], context["h"], x, grad)
        context.update(vectors=vectors, scalars=scalars)
        return None if predictor is None else x + predictor(vectors, scalars)

    solve = solver(log, before if predictor is not None or record is not None else None, timer)

    def step(frame, end, x_n, v_n, h, guess=None, history=()):
        x_n, v_n, guess = (np.asarray(a, np.float64) for a in (x_n, v_n, guess))
        context.clear()
        context.update(frame=frame, x_n=x_n, v_n=v_n, h=h, guess=guess, from_inertia=False)
        shipped, sheet_layer.quasi_newton = sheet_layer.quasi_newton, solve
        try:
            x1, v1, new_history = original(frame, end, x_n, v_n, h, guess, history)
        finally:
            sheet_layer.quasi_newton = shipped
        if record is not None:
            record.append(dict(frame=frame, end=end, x_n=x_n, v_n=v_n, h=h, guess=guess, history=history,
                               from_inertia=context["from_inertia"], target=x1 - guess,
                               vectors=context.get("vectors"), scalars=context.get("scalars")))
        return x1, v1, new_history
    layer.step = step
    return run


def training_records(model, files, frames):
    """Substep records of the layer's runs on the training sequences (substeps that started from
    inertia, in contact, left out: the guess is not used there)."""
    from engine.core.formats import read_sequence
    from engine.core.scene import setup_from_sequence
    records = []
    for f in files:
        setup = setup_from_sequence(read_sequence(f))
        setup = replace(setup, frames=min(frames, setup.frames))
        rec = []
        run = new_run(model, setup, _layer_iterations(), record=rec)
        try:
            run.bake()
        except Exception as stopped:              # noqa: BLE001 - the guard stopped it: keep what ran
            print(f"  {f.name}: stopped ({type(stopped).__name__})", flush=True)
        records += [r for r in rec if r["vectors"] is not None]
        print(f"  {f.name}: {setup.num_vertices} vertices, {len(rec)} substeps", flush=True)
    return records


def _layer_iterations():
    from engine.learned.sheet_layer import LAYER_ITERATIONS
    return LAYER_ITERATIONS


def pick_training(root, count, max_vertices):
    """`count` training sequences of at most `max_vertices`, spread over the scenarios."""
    index = json.loads((root / "index.json").read_text())["sequences"]
    pool = [s for s in index if s["split"] == "train" and s["kind"] == "cloth" and s["vertices"] <= max_vertices]
    by = {}
    for s in pool:
        by.setdefault(s["scenario"], []).append(s)
    picked = []
    while len(picked) < count and any(by.values()):
        for scenario in sorted(by):
            if by[scenario] and len(picked) < count:
                picked.append(by[scenario].pop(0))
    return [root / s["file"] for s in picked]


# --------------------------------------------------------------------------- measures

def sheet_measures(xs, ref, setup, name) -> dict:
    """`scene_eval.sheet_summary`'s figures as numbers."""
    from engine.core.measures import MeshMeasures
    from engine.evaluation.distances import bbox_diagonal, rel_l2_curve
    from engine.evaluation.scene_eval import _fall_and_tilt
    diagonal = bbox_diagonal(ref[0])
    distance = lambda a: float(rel_l2_curve(a, ref, diagonal)[1:].mean())
    mm = MeshMeasures(np.asarray(setup.rest), np.asarray(setup.faces))
    strain = lambda a: 100 * float(np.mean([np.abs(mm.edge_strain(x)).mean() for x in a[1:]]))
    out = dict(hold_still=distance(xs) / distance(np.repeat(ref[:1], len(ref), 0)), strain=strain(xs),
               strain_reference=strain(ref))
    shape = _fall_and_tilt({"model": xs, "reference": ref}, setup, name)
    if "far_edge_fall_4" in shape:
        out["fall_mm"] = 1000 * shape["far_edge_fall_4"]["model"]
        out["fall_mm_reference"] = 1000 * shape["far_edge_fall_4"]["reference"]
    if "overhang_tilt" in shape:
        out["tilt_deg"] = shape["overhang_tilt"]["model"]
        out["tilt_deg_reference"] = shape["overhang_tilt"]["reference"]
    return out


def solve_from(layer, r, start, iterations):
    """(energies after 0..`iterations` iterations, seconds, iterations taken) of the substep `r` (a
    record) solved from `start`, as `SheetLayer.step` does."""
    from engine.learned import sheet_layer
    log = []
    original, saved = sheet_layer.quasi_newton, layer.iterations
    sheet_layer.quasi_newton, layer.iterations = solver(log), iterations
    try:
        t = time.perf_counter()
        layer.step(r["frame"], r["end"], r["x_n"], r["v_n"], r["h"], guess=start, history=r["history"])
        seconds = time.perf_counter() - t
    finally:
        sheet_layer.quasi_newton, layer.iterations = original, saved
    energies = log[0][0]
    return np.array(energies + [energies[-1]] * (iterations + 1 - len(energies))), seconds, len(energies) - 1


def convergence_at_equal_states(setup, records, predictors, iterations=20, converged=100):
    """On the shipped run's own substeps (those that start from the guess): per start, the share of
    the plain guess's energy gap to a `converged`-iteration solve left after k iterations, mean over
    substeps [k]; the iterations each start needs to reach the plain guess's gap at `iterations`;
    ms per iteration (from the difference of the two solves' times) and per prediction (the
    potential at the guess, the features, the model)."""
    from engine.learned.sheet_layer import SheetLayer
    layer = SheetLayer(setup)
    mf = MeshFeatures(layer)
    left = {name: [] for name in ["plain"] + list(predictors)}
    cost = {"iteration": [], **{name: [] for name in predictors}}
    for r in records:
        if r["vectors"] is None:
            continue
        long, t_long, n_long = solve_from(layer, r, r["guess"], converged)
        plain, t_plain, n_plain = solve_from(layer, r, r["guess"], iterations)
        if n_long > n_plain:
            cost["iteration"].append((t_long - t_plain) / (n_long - n_plain))
        best = long[-1]
        gap = plain[0] - best
        if gap <= 1e-12 * abs(best):
            continue
        left["plain"].append((plain - best) / gap)
        potential = layer.incremental_potential(r["frame"], r["x_n"], r["v_n"], r["h"])
        for name, p in predictors.items():
            t = time.perf_counter()
            _, grad = potential(r["guess"])
            vectors, scalars = features(layer, mf, r["frame"], r["x_n"], r["v_n"], r["h"], r["guess"], grad)
            start = r["guess"] + p(vectors, scalars)
            cost[name].append(time.perf_counter() - t)
            left[name].append((solve_from(layer, r, start, iterations)[0] - best) / gap)
    curves = {k: np.mean(v, axis=0) for k, v in left.items() if v}
    target = curves["plain"][-1]
    return {"gap_left": {k: v.tolist() for k, v in curves.items()},
            "iterations_to_shipped_gap": {k: int(np.argmax(v <= target * (1 + 1e-9))) if (v <= target * (1 + 1e-9)).any()
                                          else None for k, v in curves.items()},
            "ms_per_iteration": 1000 * float(np.median(cost["iteration"])) if cost["iteration"] else None,
            "ms_per_prediction": {k: 1000 * float(np.median(cost[k])) for k in predictors if cost[k]}}


def bake(model, setup, iterations, predictor, repeats):
    """(frames, best ms per frame, ms per frame of the prediction in that bake, mean |grad| after
    the iterations)."""
    best, xs = None, None
    for _ in range(repeats):
        timer, log = [0.0], []
        run = new_run(model, setup, iterations, predictor, timer=timer, log=log)
        start = time.perf_counter()
        xs = np.asarray(run.bake())
        seconds = time.perf_counter() - start
        if best is None or seconds < best[0]:
            best = (seconds, timer[0], float(np.mean([g for _, g in log])))
    frames = len(xs) - 1
    return xs, 1000 * best[0] / frames, 1000 * best[1] / frames, best[2]


def reference(setup, name, frames, out: Path):
    from engine.evaluation.scene_eval import reference_rollout
    path = out / f"reference_{name}_{frames}_{setup.num_vertices}.npz"
    if path.is_file():
        return np.load(path)["frames"]
    ref = reference_rollout(setup)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, frames=ref)
    return ref


# --------------------------------------------------------------------------- main

def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", type=int, default=16, help="training sequences")
    p.add_argument("--train-frames", type=int, default=24)
    p.add_argument("--max-vertices", type=int, default=1000)
    p.add_argument("--steps", type=int, default=3000, help="the MLP's Adam steps (batches of 4,096 vertices)")
    p.add_argument("--scenes", nargs="*", default=list(SCENE_FRAMES), choices=list(SCENE_FRAMES))
    p.add_argument("--iterations", type=int, nargs="*", default=[5, 10, 15], help="the fewer iterations tried")
    p.add_argument("--repeats", type=int, default=2, help="bakes per variant (the fastest is timed)")
    p.add_argument("--out", default="eval_out/decoder_residual")
    args = p.parse_args(argv)
    import tempfile
    import torch
    from engine.api import open_engine
    from engine.core.errors import NeurokError
    from engine.core.scene import setup_from_scene
    from engine.evaluation.scenes import evaluation_scenes
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    root = Path(__file__).resolve().parent.parent
    model = open_engine("neurok", device="cpu")
    shipped = _layer_iterations()

    t0 = time.perf_counter()
    files = pick_training(root / "data" / "train_cloth", args.train, args.max_vertices)
    print(f"training records from {len(files)} sequences:", flush=True)
    records = training_records(model, files, args.train_frames)
    t1 = time.perf_counter()
    linear = fit_linear(records)
    mlp = fit_mlp(records, linear, args.steps)
    t2 = time.perf_counter()
    predictors = {"linear": linear, "mlp": mlp}
    result = {"training": {"sequences": [f.name for f in files], "substeps": len(records),
                           "vertex_rows": int(sum(len(r["target"]) for r in records)),
                           "record_seconds": t1 - t0, "fit_seconds": t2 - t1,
                           "linear_coefficients": dict(zip(VECTOR_NAMES, linear.c.tolist())),
                           "explained": {k: explained(m, records) for k, m in predictors.items()}},
              "scenes": {}}
    print(f"{len(records)} substeps in {t1 - t0:.0f} s, fitted in {t2 - t1:.0f} s; residual explained on the "
          f"training substeps: " + ", ".join(f"{k} {v:.3f}" for k, v in result["training"]["explained"].items()), flush=True)

    with tempfile.TemporaryDirectory() as meshes:
        cases = []
        for name in args.scenes:
            cases += evaluation_scenes([name], SCENE_FRAMES[name], meshes)[0]
    variants = [(f"plain guess, 2 x {shipped} (ships)", shipped, None)]
    variants += [(f"guess + {k}, 2 x {shipped}", shipped, k) for k in predictors]
    for n in args.iterations:
        variants += [(f"plain guess, 2 x {n}", n, None)] + [(f"guess + {k}, 2 x {n}", n, k) for k in predictors]
    for name, _, mesh, scene, _ in cases:
        setup = setup_from_scene(mesh, scene)
        ref = reference(setup, name, SCENE_FRAMES[name], out)
        rec = []
        new_run(model, setup, shipped, record=rec).bake()            # the shipped run's substeps
        held = [r for r in rec if r["vectors"] is not None]
        row = {"vertices": setup.num_vertices, "frames": len(ref), "substeps_from_guess": len(held),
               "substeps": len(rec), "explained": {k: explained(m, held) for k, m in predictors.items()},
               "convergence": convergence_at_equal_states(setup, rec, predictors, shipped), "variants": {}}
        print(f"\n{name}: {setup.num_vertices} vertices, {len(held)} of {len(rec)} substeps start from the guess; "
              f"residual explained " + ", ".join(f"{k} {v:.3f}" for k, v in row["explained"].items()), flush=True)
        print("  energy gap left after k iterations (share of the plain guess's gap to 100 iterations), "
              "on the shipped run's substeps:")
        conv = row["convergence"]
        for k, curve in conv["gap_left"].items():
            print(f"    {k:>6}: " + "  ".join(f"k={i}: {curve[i]:.4f}" for i in (0, 1, 2, 5, 10, 15, 20) if i < len(curve))
                  + f" | {conv['iterations_to_shipped_gap'][k]} iterations to the plain guess's gap at {shipped}"
                  + (f" | prediction {conv['ms_per_prediction'][k]:.2f} ms a substep" if k in predictors else ""))
        print(f"  one iteration {conv['ms_per_iteration']:.2f} ms (median over substeps)")
        base_grad = None
        for label, iterations, which in variants:
            try:
                xs, ms, ms_predict, grad = bake(model, setup, iterations, predictors.get(which), args.repeats)
            except NeurokError as stopped:            # the guard stopped it: say where
                row["variants"][label] = {"stopped": str(stopped)}
                print(f"  {label:<28} stopped ({stopped})", flush=True)
                continue
            m = sheet_measures(xs, ref, setup, name)
            base_grad = grad if base_grad is None else base_grad
            m.update(ms_frame=ms, ms_prediction=ms_predict, grad_norm=grad, grad_vs_shipped=grad / base_grad,
                     iterations_per_frame=2 * iterations)
            row["variants"][label] = m
            shape = (f"fall {m['fall_mm']:.0f} mm (ref {m['fall_mm_reference']:.0f})" if "fall_mm" in m
                     else f"tilt {m.get('tilt_deg', float('nan')):.0f} deg (ref {m.get('tilt_deg_reference', float('nan')):.0f})")
            print(f"  {label:<28} {m['hold_still']:.3f}x hold-still | strain {m['strain']:.2f} % (ref "
                  f"{m['strain_reference']:.2f}) | {shape} | {ms:5.1f} ms/frame (prediction {ms_predict:.1f}) | "
                  f"|grad| {m['grad_vs_shipped']:.2f}x shipped", flush=True)
        result["scenes"][name] = row
        (out / "results.json").write_text(json.dumps(result, indent=1))
    print(f"\nwritten {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
