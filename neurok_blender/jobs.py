"""Running simulations without freezing Blender.

A `Job` owns a worker thread that sees only numpy arrays and an engine `Setup`; it talks back
through a `queue.Queue` that the operator drains on TIMER events (main thread), where all bpy
writes happen. In background mode (`bpy.app.background`, no window) timers and modal operators
never fire, so the same work runs inline and messages are handled as they are produced.

State lives only here, at run time, keyed by object name: nothing about a running job is saved
in the .blend, and no bpy object is kept between timer ticks.
"""
from __future__ import annotations

import queue
import threading
import time
import traceback

import bpy

from . import objects
from .engine_link import Cancelled, NeurokError, SimulationFault, api, missing_module_sentence

JOBS: dict[str, "Job"] = {}
# Callables (job, done, total) run on the main thread after each progress step; tests use them to
# cancel a synchronous bake part-way.
progress_hooks: list = []

_ENGINES: dict = {}
_ENGINE_LOCK = threading.Lock()


def get_engine(name: str, model: str | None, device: str):
    """Open an engine once per (name, model, device) and reuse it (loading a checkpoint is slow)."""
    key = (name, model or "", device)
    with _ENGINE_LOCK:
        if key not in _ENGINES:
            _ENGINES[key] = api.open_engine(name, model=model, device=device)
        return _ENGINES[key]


def forget_engines() -> None:
    with _ENGINE_LOCK:
        _ENGINES.clear()


def synchronous(context) -> bool:
    return bool(bpy.app.background) or getattr(context, "window", None) is None


class Job:
    """One run: a bake (all frames at the end), a preview (frames streamed) or a custom task."""

    def __init__(self, kind: str, inputs, device: str = "auto", stream: bool = False, task=None, total: int | None = None):
        self.kind = kind
        self.inputs = inputs
        self.obj_name = inputs.obj_name
        self.device = device
        self.stream = stream
        self.task = task
        self.cancel = threading.Event()
        self.queue: queue.Queue = queue.Queue()
        self.total = total if total is not None else inputs.frames
        self.done = 0
        self.within = 0.0  # share of the frame being computed (engines with slow frames report substeps)
        self.created = time.perf_counter()
        self.first_progress = None
        self.finished_at = None
        self.status = "running"  # running | done | cancelled | fault | error
        self.message = ""
        self.stage = "Starting"
        self.result = None
        self.ood = None
        self.fault_frame = None
        self.partial = None  # after a fault: the good frames before it (world space), from `Run.bake`
        self.thread: threading.Thread | None = None
        self.sync = False
        self.handler = None

    # ------------------------------------------------------------------ worker side
    def _emit(self, *msg) -> None:
        self.queue.put(msg)
        if self.sync:
            self.drain()

    def _progress(self, done: int, total: int) -> None:
        self._emit("progress", done, total)

    def _fraction(self, fraction: float) -> None:
        """Progress of a task that reports a fraction (training), in thousandths."""
        self._progress(int(round(1000 * min(max(fraction, 0.0), 1.0))), 1000)

    def _substep(self, frame: int, share: float) -> None:
        self._emit("substep", frame, share)

    def work(self) -> None:
        try:
            if self.task is not None:
                self._emit("stage", "Working")
                result = self.task(self)
                self._emit("done", result)
                return
            self._emit("stage", "Preparing")
            engine = get_engine(self.inputs.engine, self.inputs.model, self.device)
            run = engine.prepare(self.inputs.setup)
            run.on_substep = self._substep
            self._emit("ood", getattr(run, "ood", None))
            self._emit("stage", "Simulating")
            if self.stream:
                for t, x in run.frames(self.cancel):
                    self._emit("frame", t, self.inputs.to_local(x, t))
                    self._progress(t + 1, self.total)
                self._emit("done", None)
            else:
                frames = run.bake(progress=self._progress, cancel=self.cancel)
                if self.cancel.is_set():
                    raise Cancelled("cancelled")
                self._emit("done", frames)
        except Cancelled:
            self._emit("cancelled")
        except SimulationFault as e:
            self._emit("fault", str(e), getattr(e, "frame", None), getattr(e, "positions", None))
        except NeurokError as e:
            self._emit("error", str(e))
        except ImportError as e:
            self._emit("error", missing_module_sentence(e))
        except Exception as e:  # an engine bug: keep Blender alive, say it in one line, log the traceback
            traceback.print_exc()
            self._emit("error", f"The engine failed ({type(e).__name__}: {e}).")

    # ------------------------------------------------------------------ main-thread side
    def start(self) -> None:
        self.thread = threading.Thread(target=self.work, name=f"neurok-{self.kind}-{self.obj_name}", daemon=True)
        self.thread.start()

    def run_sync(self) -> None:
        self.sync = True
        self.work()
        self.drain()

    @property
    def finished(self) -> bool:
        return self.status != "running"

    def drain(self) -> int:
        """Handle queued messages on the main thread; returns how many were handled."""
        count = 0
        while True:
            try:
                msg = self.queue.get_nowait()
            except queue.Empty:
                break
            count += 1
            kind = msg[0]
            if kind == "progress":
                self.done, self.total, self.within = int(msg[1]), int(msg[2]), 0.0
                if self.first_progress is None:
                    self.first_progress = (time.perf_counter(), self.done)
            elif kind == "substep":
                self.within = float(msg[2]) if int(msg[1]) == self.done else 0.0
            elif kind == "stage":
                self.stage = msg[1]
            elif kind == "ood":
                self.ood = msg[1]
            elif kind == "done":
                self.status, self.result = "done", msg[1]
            elif kind == "cancelled":
                self.status = "cancelled"
            elif kind == "fault":
                self.status, self.message, self.fault_frame = "fault", msg[1], msg[2]
                self.partial = msg[3] if len(msg) > 3 else None
            elif kind == "error":
                self.status, self.message = "error", msg[1]
            if kind in ("done", "cancelled", "fault", "error"):
                self.finished_at = time.perf_counter()
            if self.handler is not None:
                self.handler(self, msg)
            if kind == "progress":
                for hook in list(progress_hooks):
                    hook(self, self.done, self.total)
        return count

    def elapsed(self) -> float:
        return (self.finished_at or time.perf_counter()) - self.created

    def eta(self) -> float | None:
        if self.first_progress is None or self.done >= self.total:
            return None
        t0, d0 = self.first_progress
        if self.done <= d0:
            return None
        rate = (time.perf_counter() - t0) / (self.done - d0)
        return rate * (self.total - self.done)

    def factor(self) -> float:
        return 0.0 if self.total <= 0 else min(1.0, (self.done + self.within) / self.total)

    def progress_text(self) -> str:
        if self.cancel.is_set() and not self.finished:
            return "Cancelling…"
        eta = self.eta()
        if self.kind == "specialize":
            text = f"{self.stage} {100.0 * self.factor():.0f}%"
        elif self.done == 0:
            return f"{self.stage}…"
        else:
            text = f"Frame {self.done}/{self.total}"
            if 0.0 < self.within < 1.0:  # a slow frame: its substeps show that it is working
                text += f" · frame {self.done + 1} {100.0 * self.within:.0f}%"
        if eta is not None:
            text += f" · {format_seconds(eta)} left"
        return text


def format_seconds(s: float) -> str:
    if s < 60:
        return f"{s:.0f} s"
    m, s = divmod(int(round(s)), 60)
    return f"{m} min {s:02d} s"


def running(obj_name: str, kind: str | None = None) -> Job | None:
    job = JOBS.get(obj_name)
    if job is None or (kind is not None and job.kind != kind):
        return None
    return job


def follow_rename(job: "Job"):
    """The job's object, found by its session uid if it was renamed meanwhile (the job is then re-keyed under
    the new name, so the panel, the modal operator and the result all follow the object). None if deleted."""
    obj = objects.find_object(job.obj_name, getattr(job.inputs, "obj_uid", None))
    if obj is not None and obj.name != job.obj_name:
        old = job.obj_name
        if JOBS.get(old) is job:
            del JOBS[old]
            JOBS[obj.name] = job
        job.obj_name = obj.name
        job.inputs.obj_name = obj.name
    return obj


def cancel_all(wait: float = 0.0) -> None:
    for job in list(JOBS.values()):
        job.cancel.set()
    if wait:
        deadline = time.perf_counter() + wait
        for job in list(JOBS.values()):
            if job.thread is not None:
                job.thread.join(max(0.0, deadline - time.perf_counter()))
    JOBS.clear()


def tag_redraw(context=None) -> None:
    wm = bpy.context.window_manager if context is None else context.window_manager
    if wm is None:
        return
    for window in wm.windows:
        screen = window.screen
        if screen is None:
            continue
        for area in screen.areas:
            if area.type in ('VIEW_3D', 'PROPERTIES'):
                area.tag_redraw()
