"""The learned engine at run time: a `LatentScene` stepped frame by frame and decoded (`NeurokRun`)."""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

try:  # optional: limits numpy's BLAS threads too (see README, Dependencies)
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover
    threadpool_limits = None

from ..core.errors import SimulationFault
from ..core.physics import substeps_per_frame
from ..core.run import Engine, Run
from ..core.setup import Setup
from .checkpoint import load_checkpoint
from .ik import solve_ik
from .integrators import NEWTON_ITERATIONS, matched_theta, step as integrator_step
from .latent_scene import LatentScene
from .strain_energy import DTYPE
from .ood import ood_report
from .sheet_layer import SheetLayer, layer_wanted
from .sheet_proxy import SheetProxy, proxy_wanted
from .solid_layer import SolidLayer
from .terms import elastic

SUBSTEP = 1.0 / 48.0      # longest latent step (s) of a sheet, and of every body with plain backward Euler
# A solid's longest step under the default "matched" scheme: the theta method at 1/24 s with the
# theta that damps as the reference's backward Euler at its 1/48 s step (the training data's,
# `training.generate.GENERATOR_SUBSTEP`; `integrators.matched_theta`). Half the steps of backward
# Euler at 1/48 for the same motion: the pinned beam rings at 1.569 Hz with damping ratio 0.105
# (reference 1.568 Hz, 0.106; backward Euler at 1/48: 1.586, 0.107; at 1/24: 1.528, 0.210).
# Sheets keep 1/48: a flag in wind moved 1.5x as far from the reference at 1/24 (docs/MODEL_CARD.md).
SOLID_STEP = 1.0 / 24.0
DATA_STEP = 1.0 / 48.0
SCHEMES = ("matched", "backward_euler", "implicit_midpoint")
SOLID_LAYER_CHOICES = ("off", "on")
GUARD_FULL_CHECK_EVERY = 8   # frames between two full plausibility checks (quick checks between)


@contextlib.contextmanager
def single_threaded():
    """A latent step is many small matrix operations, where worker threads only wait for each
    other (on a busy 2-core machine a frame measured several times slower with 2 threads).
    Entered once per run (threadpoolctl rescans the loaded libraries on every call, about 1 ms)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if threadpool_limits is None:
            yield
        else:
            with threadpool_limits(1):
                yield
    finally:
        torch.set_num_threads(before)


def blended(q, blend, rest) -> np.ndarray:
    """rest + the handles' affine maps of q blended at each vertex (`handle_blend`), metres, float32."""
    weights, y, transform = blend
    z = (transform @ q.detach().cpu().numpy()).reshape(-1, 12)        # each handle's A (row-major), b
    maps = np.concatenate([z[:, :9].reshape(-1, 3, 3).transpose(0, 2, 1), z[:, None, 9:]], axis=1)
    P = (weights @ maps.reshape(-1, 12).astype(np.float32)).reshape(-1, 4, 3)   # [N,4,3]
    x = rest + P[:, 3]
    for c in range(3):
        x += y[c] * P[:, c]
    return x


def handle_blend(sub):
    """A sheet's vertices are its nodes, so its basis has vertices x 3 x coordinates entries (a
    10k-vertex sheet: 32 MB, read again every frame). Blending the handles' affine maps reads
    one weight per vertex and handle instead: x = rest + sum_h w_h (A_h Xc + b_h)
    (`subspace.handle_jacobian`), computed as P = w [A_h^T; b_h^T] (the blended maps [N,4,3]),
    then x = rest + (Xc, 1) P. Returns (w [N,H] in metres, float32; (Xc, 1) as four columns
    [4,N,1]; the handles' coordinates of q, T [12H,d]), or None for solids, whose vertices
    already decode through their few lattice nodes."""
    if sub.kind != "cloth" or sub.handle_transform is None:
        return None
    xc = sub.nodes - sub.centre
    y = np.concatenate([xc, np.ones((len(xc), 1))], axis=1).T[:, :, None]            # [4,N,1]
    return (sub.norm.scale * sub.weights).astype(np.float32), y.astype(np.float32), sub.handle_transform


@dataclass(frozen=True)
class RunConfig:
    """How a learned run steps, decided once when it is prepared (`run_config`)."""
    scheme: str          # the latent step: "theta" (a solid's matched scheme), "backward_euler", "implicit_midpoint"
    substeps: int        # latent steps per frame
    sheet_layer: bool    # a sheet's full-space layer corrects each latent step (`sheet_layer.py`)
    layer_proxy: bool    # ... iterating on a coarse proxy of the sheet (`sheet_proxy.py`)
    solid_layer: bool    # a solid's fine level on its lattice corrects each latent step (`solid_layer.py`)
    latent_follows: bool     # the latent velocity is the layer's, projected (a sheet's layer: `NeurokRun._layer_substep`)
    # the learned closures act (`LatentScene.closures`). They make up for a locked sheet's latent
    # step on its own; under the layer they only bent its prediction away (`neurok prior-vs-trained`:
    # 1.06x the prior's distance, docs/MODEL_CARD.md), so they are off there
    closures: bool


def run_config(setup: Setup, kind: str, integrator: str, sheet_layer: str, solid_layer: str = "off") -> RunConfig:
    """The `RunConfig` of a body of `kind` ("solid", "cloth") under `integrator` (`SCHEMES`), the
    `sheet_layer` choice (`core.setup.SHEET_LAYER_CHOICES`) and the `solid_layer` one ("on",
    "off"). A solid with its fine level steps at the reference's 1/48 s (backward Euler, the
    reference's scheme), the latent step's theta matched to that step."""
    if integrator not in SCHEMES:
        raise ValueError(f"unknown integrator '{integrator}' ({', '.join(SCHEMES)})")
    if solid_layer not in SOLID_LAYER_CHOICES:
        raise ValueError(f"unknown solid layer choice '{solid_layer}' ({', '.join(SOLID_LAYER_CHOICES)})")
    fine = kind == "solid" and solid_layer == "on"
    matched_solid = integrator == "matched" and kind == "solid"
    layer = kind == "cloth" and layer_wanted(sheet_layer, setup)
    return RunConfig(scheme="theta" if matched_solid else ("backward_euler" if integrator == "matched" else integrator),
                     substeps=substeps_per_frame(setup.dt, SOLID_STEP if matched_solid and not fine else SUBSTEP),
                     sheet_layer=layer, layer_proxy=layer and sheet_layer != "full" and proxy_wanted(setup),
                     solid_layer=fine, latent_follows=layer, closures=not layer)


class RunState(NamedTuple):
    """A learned run's state at a frame: the latent state (q, q'), and with a sheet's full-space
    layer its vertices' positions and velocities (metres, [N,3]; its proxy's [P,3] where it has one,
    `sheet_proxy.py`; a solid's fine level: its lattice nodes' [n,3], `solid_layer.py`) and the
    layer's curvature pairs (`quasi_newton.quasi_newton`); x, v None and history empty without it."""
    q: torch.Tensor
    qd: torch.Tensor
    x: np.ndarray | None = None
    v: np.ndarray | None = None
    history: tuple = ()


MAX_RETRY_SPLITS = 3      # a rejected step is retried with 2, 4, 8 substeps


class NeurokRun(Run):
    """Steps a `LatentScene` with the chosen integrator; a step that fails (NaN, no convergence)
    is retried as two half steps, up to MAX_RETRY_SPLITS times. The latent states of the last
    `retry_window` frames are kept, so the guard can check in full every 8th frame and still
    recompute any frame it rejects (`core.run.Run.frames`)."""

    retry_window = GUARD_FULL_CHECK_EVERY

    def __init__(self, model, setup: Setup, device="cpu", integrator="matched", meta=None, subspace=None,
                 sheet_layer="auto", solid_layer="off"):
        """`subspace`: this one instead of the mesh's cached one (`LatentScene`). `sheet_layer`
        ("auto", "on", "off", "full"): whether a sheet also takes the full-space layer's iterations
        (`sheet_layer.py`; "auto": but at low detail), and "full": on the full mesh, never a proxy.
        `solid_layer` ("off", "on"): whether a solid takes its fine level (`solid_layer.py`,
        experimental). How the run steps is decided here, once: `config` (`RunConfig`)."""
        super().__init__(setup)
        t0 = time.perf_counter()
        kind = setup.material.kind if subspace is None else subspace.kind
        self.config = run_config(setup, kind, integrator, sheet_layer, solid_layer)
        # one thread here too: the fit's many mid-sized products ran 9x slower on 2 busy cores
        with torch.no_grad(), single_threaded():
            self.scene = LatentScene(model, setup, subspace=subspace, device=device, closures=self.config.closures)
        self.model, self.integrator = model, integrator
        # decoding goes through the nodes: q -> node displacements (n x d) -> vertices by the
        # sparse interpolation W (8 nodes per vertex for solids), O(N) instead of O(N d); in
        # metres and float32 from the start (the normalisation folded into the basis)
        sub = self.scene.sub
        self._rest_m = sub.norm.inverse(sub.rest).astype(np.float32)
        self._blend = handle_blend(sub)
        if self._blend is None:
            self._node_basis_m = (sub.norm.scale * sub.node_basis.reshape(-1, self.scene.dims)).astype(np.float32)
            self._W = sub.W.astype(np.float32).tocsr()
        self._states, self._resume = {}, None
        # a fine sheet's layer iterates on a coarse proxy of it at medium detail (`sheet_proxy.py`)
        self.proxy = SheetProxy(setup) if self.config.layer_proxy else None
        self.layer = (SheetLayer(setup if self.proxy is None else self.proxy.setup)
                      if self.config.sheet_layer else None)
        self._encode_layer_velocity = (self.scene.encode_velocity if self.proxy is None
                                       else self.scene.velocity_encoder(self.proxy.embedding.matrix))
        if self.config.solid_layer:     # a solid's fine level: the layer's state is its lattice's nodes
            self.layer = SolidLayer(setup, self.scene)
            self._encode_layer_velocity = self.scene.velocity_encoder(self.layer.W)
            self._node_move_m = sub.norm.scale * sub.node_basis.reshape(-1, self.scene.dims)
        if self.proxy is not None and self._blend is not None:     # the latent move at the proxy's vertices only
            weights, y, transform = self._blend
            keep = self.proxy.keep
            self._layer_blend, self._layer_rest = (weights[keep], y[:, keep], transform), self._rest_m[keep]
        self.encode_seconds = time.perf_counter() - t0
        with single_threaded():      # BLAS products: see `guard`
            self.ood = ood_report(self.scene, meta or {})

    def _advance(self, frame, q, qd, h, splits=0):
        # a retried step may also take more Newton iterations (a blow far outside the training
        # range needs 50-60 where ordinary steps take 2-5)
        q1, qd1, ok = integrator_step(self.scene, frame, q, qd, h, self.config.scheme, fast=True,
                                      iterations=NEWTON_ITERATIONS << splits, theta=matched_theta(h, DATA_STEP))
        if ok and bool(torch.all(torch.isfinite(q1))):
            return q1, qd1
        if splits >= MAX_RETRY_SPLITS:
            raise SimulationFault(f"the latent step could not be solved at frame {frame + 1} "
                                  f"(no converged state even with {2 ** splits} substeps)", frame + 1, None)
        q, qd = self._advance(frame, q, qd, 0.5 * h, splits + 1)
        return self._advance(frame, q, qd, 0.5 * h, splits + 1)

    def _frame(self, frame, state, substeps):
        """The `RunState` after `frame` -> frame + 1, in `substeps` steps."""
        h = self.setup.dt / substeps
        with torch.no_grad():
            for k in range(substeps):
                if self.layer is None:
                    q, qd = self._advance(frame, state.q, state.qd, h)
                    state = state._replace(q=q, qd=qd)
                else:
                    state = self._layer_substep(frame, frame + (k + 1) / substeps, state, h)
        return state

    def _layer_substep(self, frame, end, state, h):
        """A sheet's substep. The latent step (the learned dynamics carry the global motion)
        predicts how the part of the sheet the subspace holds moves, and inertia the rest (the
        sheet's velocity less its projection on the subspace); the full-space layer corrects that
        prediction. The layer's curvature pairs are part of the state, so a frame the guard
        computes again starts from the accepted state's. With a proxy, x and v are the proxy's
        vertices'; a solid's fine level takes the same substep on its lattice's nodes.

        A sheet's latent state follows the full-space one in velocity: after a substep that
        touched nothing, q' is the layer's velocity projected on the subspace (`_held_velocity`),
        so the next latent step starts moving as the sheet does and its move beyond inertia is
        what the learned forces add (when q' ran its own course, its drift from the sheet's
        velocity joined every prediction, and the hanging grid stretched 1.9x the reference's).
        Its position runs its own course: a fold projected on the smooth subspace is a stretched
        latent state (the flag then moved 3x further from the reference). Where the sheet touches
        the floor or a collider the layer starts from inertia, and the latent step runs on its
        own, as cheap as it was (following there doubled its cost on the drape: friction's
        contacts kept sliding). A solid's fine level (experimental) keeps the latent state's own
        velocity, as it was measured. Figures: docs/DESIGN_NOTES.md, "Sheets"."""
        q, qd, x, v = state.q, state.qd, state.x, state.v
        q1, qd1 = self._advance(frame, q, qd, h)
        held_velocity = qd if self.config.latent_follows else self._held_velocity(v)
        # decode is affine: the latent move less the held part of inertia, decoded once
        guess = x + h * v + self._layer_move(q1 - q - h * held_velocity)
        x1, v1, history = self.layer.step(frame, end, x, v, h, guess=guess, history=state.history)
        if self.config.latent_follows and not self.layer.touching:
            qd1 = self._held_velocity(v1)
        return RunState(q1, qd1, x1, v1, history)

    def _held_velocity(self, v):
        """The latent velocity of the layer's velocities v (metres per second): their projection on
        the subspace."""
        return self._encode_layer_velocity(v / self.scene.sub.norm.scale)

    def _initial_state(self):
        if self.config.solid_layer:     # the lattice's nodes where the latent state puts them
            x, v = self.layer.rest + self._layer_move(self.scene.q0), self._layer_move(self.scene.qd0)
        elif self.layer is not None:
            x, v = np.asarray(self.layer.setup.x0, np.float64), np.asarray(self.layer.setup.v0, np.float64)
        else:
            x, v = None, None
        qd = self._held_velocity(v) if self.config.latent_follows else self.scene.qd0
        return RunState(self.scene.q0, qd, x, v, ())

    def states(self):
        """The `RunState` per frame, frame 0 first."""
        state = self._initial_state()
        self._states = {0: state}
        yield state
        frame = 0
        with single_threaded():
            while frame < self.setup.frames - 1:
                state = self._frame(frame, state, self.config.substeps)
                frame += 1
                self._states[frame] = state
                self._states.pop(frame - self.retry_window - 1, None)
                yield state
                if self._resume is not None:     # the guard recomputed a frame with more substeps
                    frame, state = self._resume
                    self._resume = None

    def latent_frames(self):
        """Latent state (q, q') per frame, frame 0 first."""
        for state in self.states():
            yield state.q, state.qd

    @property
    def guard(self):
        """`Run.guard`, made on one thread: its first measures are BLAS products, and two BLAS
        threads left the second spinning through the next 0.1 s of the bake (the bench read
        twice the CPU time of its wall time)."""
        if self._guard is None and self.check_plausibility:
            with single_threaded():
                return Run.guard.fget(self)
        return Run.guard.fget(self)

    def _retry_frame(self, t, factor):
        """The guard's retry: frame t again from the state before it, with `factor` x the substeps;
        the frames after it are then computed again from there."""
        if t - 1 not in self._states:
            return None
        state = self._frame(t - 1, self._states[t - 1], self.config.substeps * factor)
        self._states = {s: v for s, v in self._states.items() if s < t}
        self._states[t] = state
        self._resume = (t, state)
        return self._positions(state)

    def _positions(self, state) -> np.ndarray:
        if state.x is None:
            return self.decode(state.q)
        if self.config.solid_layer:
            return self.layer.positions(state.x).astype(np.float32)
        return (state.x if self.proxy is None else self.proxy.positions(state.x)).astype(np.float32)

    def decode(self, q) -> np.ndarray:
        """Vertex positions (metres, float32) of latent q."""
        if self._blend is not None:
            return blended(q, self._blend, self._rest_m)
        qn = q.detach().cpu().numpy().astype(np.float32)
        return self._rest_m + self._W @ (self._node_basis_m @ qn).reshape(-1, 3)

    def _layer_move(self, dq) -> np.ndarray:
        """The displacement [N,3] (or the proxy's vertices' [P,3], a solid's lattice nodes' [n,3])
        of the latent change dq."""
        if self.config.solid_layer:
            return self.layer.latent_moves @ (self._node_move_m @ dq.detach().cpu().numpy()).reshape(-1, 3)
        if self.proxy is None:
            return self.decode(dq) - self._rest_m
        if self._blend is None:
            return self.proxy.restrict(self.decode(dq) - self._rest_m)
        return blended(dq, self._layer_blend, self._layer_rest) - self._layer_rest

    def _iter_frames(self):
        first = True
        for state in self.states():
            if first:  # frame 0 is the given initial state, not its projection
                first = False
                yield np.asarray(self.setup.x0, dtype=np.float32)
                continue
            yield self._positions(state)


class NeurokEngine(Engine):
    """The learned engine with one loaded checkpoint."""
    name = "neurok"

    def __init__(self, model_path, device="cpu", integrator="matched"):
        self.model, self.meta = load_checkpoint(model_path, device)
        self.model_path, self.device, self.integrator = str(model_path), device, integrator
        for p in self.model.parameters():
            p.requires_grad_(False)

    def prepare(self, setup: Setup, sheet_layer: str = "auto", solid_layer: str = "off") -> NeurokRun:
        """`sheet_layer`: "auto", "on", "off" or "full"; `solid_layer`: "off" or "on" (`NeurokRun`)."""
        return NeurokRun(self.model, setup, self.device, self.integrator, self.meta, sheet_layer=sheet_layer,
                         solid_layer=solid_layer)

    def sample_pose(self, setup: Setup, seed=0, temperature=1.0) -> np.ndarray:
        """A plausible deformed pose: a draw from the Boltzmann distribution of the learned elastic
        energy around rest (q ~ N(0, T H^-1)), rigid motion removed. `temperature` scales its size."""
        with torch.no_grad():
            scene = LatentScene(self.model, setup, device=self.device)
            q0 = torch.zeros(scene.dims, dtype=DTYPE)
            H = elastic(q0, None, scene).hess
            vals, vecs = torch.linalg.eigh(H)
            soft = vals > 1e-6 * vals.max()
            g = torch.Generator(device="cpu").manual_seed(int(seed))
            z = torch.randn(int(soft.sum()), generator=g, dtype=DTYPE)
            # typical strain energy 1e-3 of the stiffness per unit volume: a visible, elastic pose
            amplitude = temperature * math.sqrt(2e-3 * scene.w0sq / max(int(soft.sum()), 1))
            q = vecs[:, soft] @ (amplitude * z / torch.sqrt(vals[soft]))
            return scene.decode_metres(q).astype(np.float32)

    def solve_ik(self, setup: Setup, handles, targets, regularization=1e-3, iterations=50) -> np.ndarray:
        """Inverse kinematics: positions of the whole mesh when vertices `handles` are dragged to
        `targets` [H,3] (metres), the rest following with the least elastic energy."""
        return solve_ik(self, setup, handles, targets, regularization, iterations)
