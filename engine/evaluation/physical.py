"""Physical quantities, model against reference (and the oracle): a beam pinned at one end
sagging and ringing under gravity, and Blender's bar hanging from its top face (`hanging_bar`).

From the vertical displacement s(t) of its free tip (the vertices within 2% of the length of
the free end, mean z minus rest):
- static sag: the mean of s over the second half of the rollout (the beam rings about its
  equilibrium, and damping settles it there); the same estimator on every engine;
- first frequency: the peak of the FFT of s minus its equilibrium (the transient decays, so no
  window; zero-padded 16x, parabolic interpolation of the peak);
- damping ratio: a least-squares fit of A exp(-zeta w t) cos(w_d t + phi) + c to s, started
  from the FFT peak (w = w_d / sqrt(1 - zeta^2)).
Relative errors are |model - reference| / |reference|.
"""
from __future__ import annotations

import math

import numpy as np


def tip_signal(frames, rest, share=0.02) -> np.ndarray:
    rest = np.asarray(rest, np.float64)
    x = rest[:, 0]
    tip = x >= x.max() - share * np.ptp(x)
    frames = np.asarray(frames, np.float64)
    return frames[:, tip, 2].mean(axis=1) - rest[tip, 2].mean()


def fft_frequency(signal, dt, pad=16) -> float | None:
    s = np.asarray(signal, np.float64)
    if len(s) < 8 or not np.all(np.isfinite(s)):
        return None
    s = s - s[len(s) // 2:].mean()           # about the equilibrium: a decaying transient, no window needed
    n = pad * len(s)
    spec = np.abs(np.fft.rfft(s, n))
    freqs = np.fft.rfftfreq(n, dt)
    lo = max(1, int(np.searchsorted(freqs, 2.0 / (len(signal) * dt))))    # two periods in the window at least
    if lo >= len(spec) - 1:
        return None
    k = lo + int(np.argmax(spec[lo:]))
    if spec[k] <= 1e-12 * max(spec.max(), 1e-30):
        return None
    if 0 < k < len(spec) - 1:
        a, b, c = np.log(spec[k - 1:k + 2] + 1e-300)
        shift = 0.5 * (a - c) / (a - 2 * b + c) if (a - 2 * b + c) != 0 else 0.0
        return float(freqs[k] + shift * (freqs[1] - freqs[0]))
    return float(freqs[k])


def damped_fit(signal, dt, f0) -> dict:
    """{"frequency", "damping_ratio", "fit_rms"} of a damped cosine fitted to the signal."""
    from scipy.optimize import curve_fit
    s = np.asarray(signal, np.float64)
    t = np.arange(len(s)) * dt
    if f0 is None or not np.all(np.isfinite(s)):
        return {"frequency": None, "damping_ratio": None, "fit_rms": None}

    def model(t, A, sigma, wd, phi, c):
        return A * np.exp(-sigma * t) * np.cos(wd * t + phi) + c

    c0 = s[len(s) // 2:].mean()
    best = None
    for phi in (0.0, math.pi / 2, math.pi, -math.pi / 2):
        try:
            p, _ = curve_fit(model, t, s, p0=[s[0] - c0 or 1e-3, 0.5, 2 * math.pi * f0, phi, c0], maxfev=4000)
        except (RuntimeError, ValueError):
            continue
        rms = float(np.sqrt(np.mean((model(t, *p) - s) ** 2)))
        if best is None or rms < best[1]:
            best = (p, rms)
    if best is None:
        return {"frequency": None, "damping_ratio": None, "fit_rms": None}
    (A, sigma, wd, phi, c), rms = best
    wd = abs(wd)
    zeta = sigma / math.sqrt(sigma ** 2 + wd ** 2) if wd > 0 else None
    return {"frequency": wd / (2 * math.pi), "damping_ratio": zeta, "fit_rms": rms}


def beam_quantities(frames, rest, dt) -> dict:
    s = tip_signal(frames, rest)
    if not np.all(np.isfinite(s)):
        return {"sag": None, "frequency_fft": None, "frequency": None, "damping_ratio": None, "signal": s}
    sag = float(-s[len(s) // 2:].mean())
    f = fft_frequency(s, dt)
    fit = damped_fit(s, dt, f)
    return {"sag": sag, "frequency_fft": f, "frequency": fit["frequency"], "damping_ratio": fit["damping_ratio"],
            "fit_rms": fit["fit_rms"], "signal": s}


def relative_error(value, reference):
    if value is None or reference is None or not math.isfinite(value) or abs(reference) < 1e-12:
        return None
    return abs(value - reference) / abs(reference)


def compare(quantities: dict, reference="reference") -> dict:
    """{engine: {quantity: relative error vs the reference}} for every engine but the reference."""
    ref = quantities[reference]
    return {name: {k: relative_error(q.get(k), ref.get(k)) for k in ("sag", "frequency_fft", "frequency", "damping_ratio")}
            for name, q in quantities.items() if name != reference}


# --------------------------------------------------------------------------- a hanging bar

BAR = {"size": (0.1, 0.1, 1.0), "stiffness": 1.0e5, "density": 1000.0, "poisson": 0.3}


def hanging_bar(frames=96, gravity=9.81):
    """Blender's 0.1 x 0.1 x 1 m bar (its 8-vertex cube, scaled) pinned at its top face, E = 100 kPa,
    rho = 1000, nu = 0.3, heavily mass-damped (20 /s) so a 4 s run settles: a `Setup`."""
    from ..core.formats import Mesh
    from ..core.scene import setup_from_scene
    corners = np.array([[x, y, z] for x in (0, 1) for y in (0, 1) for z in (0, 1)], float) * BAR["size"]
    faces = np.array([[0, 2, 3], [0, 3, 1], [4, 5, 7], [4, 7, 6], [0, 1, 5], [0, 5, 4],
                      [2, 6, 7], [2, 7, 3], [0, 4, 6], [0, 6, 2], [1, 3, 7], [1, 7, 5]])
    material = {"kind": "solid", "stiffness": BAR["stiffness"], "density": BAR["density"], "poisson": BAR["poisson"],
                "damping": 0.0, "air_damping": 20.0}
    scene = {"format": "neurok.scene/1", "frames": frames, "dt": 1.0 / 24.0, "gravity": [0.0, 0.0, -gravity],
             "material": material, "pins": [{"select": {"box": {"min": [0, 0, 1 - 1e-6], "max": [1, 1, 1]}}}]}
    return setup_from_scene(Mesh(corners, faces, "bar"), scene)


def bar_stretch(setup, x) -> float:
    """How far the bar's bottom face has dropped (m)."""
    bottom = setup.rest[:, 2] < 1e-9
    return -float((np.asarray(x)[bottom, 2] - setup.rest[bottom, 2]).mean())


def bar_theory(gravity=9.81) -> float:
    """rho g L^2 / 2E: a hanging column's stretch (nu = 0)."""
    return BAR["density"] * gravity * BAR["size"][2] ** 2 / (2.0 * BAR["stiffness"])


def calibration_bar(model=None, trained: bool = False) -> dict:
    """Stiffness in Pa means Pa (`neurok calibration-bar`): how far the hanging bar's bottom face drops (m)
    in the learned engine with the checkpoint's learned layers zeroed (the classical prior in the model's
    subspace, fitted cubature and all; `trained`: also the checkpoint as it is), in the reference
    simulator (static solve), and by rho g L^2 / (2E), the textbook figure for a hanging column (nu = 0)."""
    from ..learned.checkpoint import default_model_path, load_checkpoint
    from ..learned.runtime import NeurokRun
    from ..reference.simulator import ReferenceSimulator
    setup = hanging_bar()
    path = model or default_model_path()
    out = {"reference": bar_stretch(setup, ReferenceSimulator(setup).solve_static()),
           "prior": bar_stretch(setup, NeurokRun(load_checkpoint(path)[0].classical_prior(), setup).bake()[-1]),
           "theory": bar_theory()}
    if trained:
        out["trained"] = bar_stretch(setup, NeurokRun(load_checkpoint(path)[0], setup).bake()[-1])
    return out


def calibration_bar_command(model=None, trained: bool = False) -> int:
    r = calibration_bar(model, trained)
    print("hanging bar 0.1x0.1x1 m, E 100 kPa, rho 1000, nu 0.3: its bottom drops")
    print(f"  learned engine, classical prior: {1e3 * r['prior']:.1f} mm "
          f"({100 * (r['prior'] / r['reference'] - 1):+.1f} % of the reference)")
    if "trained" in r:
        print(f"  learned engine, checkpoint as trained: {1e3 * r['trained']:.1f} mm "
              f"({100 * (r['trained'] / r['reference'] - 1):+.1f} %)")
    print(f"  reference simulator (static): {1e3 * r['reference']:.1f} mm")
    print(f"  rho g L^2 / 2E: {1e3 * r['theory']:.1f} mm")
    return 0
