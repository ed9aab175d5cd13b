"""Any engine's rollout of a setup, with its failures read into frames (`predict`): what the
evaluation compares, for the learned engine, the oracle and the baselines alike."""
from __future__ import annotations

import time

import numpy as np


def predict(engine, setup):
    """(frames [T,N,3], fault frame or None, error text or None, ms per frame) of any engine
    behind the `Engine`/`Run` interface."""
    from ..api import SimulationFault
    try:
        run = engine.prepare(setup)
        t1 = time.perf_counter()
        pred = run.bake()
        ms = 1000.0 * (time.perf_counter() - t1) / max(1, setup.frames - 1)
        return pred, None, None, ms
    except SimulationFault as fault:   # a stop of the plausibility guard (ImplausibleFrame) included: a failure
        good = fault.positions if fault.positions is not None and len(fault.positions) else np.asarray(setup.x0)[None]
        pred = np.repeat(good[-1:], setup.frames, axis=0)
        pred[:len(good)] = good
        return pred.astype(np.float32), len(good), str(fault), None
    except (RuntimeError, ValueError, FloatingPointError, np.linalg.LinAlgError) as e:  # a numerical failure in a step
        pred = np.repeat(np.asarray(setup.x0, np.float32)[None], setup.frames, axis=0)
        return pred, 1, f"{type(e).__name__}: {str(e)[:200]}", None


def predict_neurok(engine, setup):
    """The learned engine's rollout: (frames, fault frame or None, error text or None, ms/frame)."""
    return predict(engine, setup)
