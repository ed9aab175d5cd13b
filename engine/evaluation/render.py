"""Cheap pictures of rollouts, side by side: reference | model | oracle.

A flat-shaded orthographic painter's-algorithm renderer on Pillow (triangles sorted far to near,
each filled with its Lambert shade): milliseconds per frame, no GPU, no Blender. The camera is
fixed per scene (fitted to the reference's frames) so the columns are comparable. A closed
surface seen from inside (a back face: inside out, or a hole torn open) is drawn red, so an
inverted body shows at a glance; open sheets show their back in a lighter tone.

contact_sheet(): rows = a few frames, columns = the engines. animation(): a GIF of the same
columns written by Pillow's GIF encoder.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from ..core.geometry import is_closed

FRONT = np.array([120, 160, 215])
BACK_CLOSED = np.array([215, 60, 50])
BACK_OPEN = np.array([175, 190, 160])
BG = (255, 255, 255)
FLOOR = (228, 228, 228)
VIEW = np.array([0.9, -1.4, 0.7])                   # from where the camera looks (towards -VIEW)
LIGHT = np.array([0.4, -0.8, 1.0]) / np.linalg.norm([0.4, -0.8, 1.0])


class Camera:
    def __init__(self, points, size=(220, 180), margin=0.08, view=VIEW):
        f = -np.asarray(view, float) / np.linalg.norm(view)
        right = np.cross(f, [0.0, 0.0, 1.0])
        right /= np.linalg.norm(right)
        up = np.cross(right, f)
        self.f, self.right, self.up, self.size = f, right, up, size
        p = np.asarray(points, np.float64).reshape(-1, 3)
        p = p[np.all(np.isfinite(p), axis=1)]
        u, v = p @ right, p @ up
        w, h = size
        span = max((u.max() - u.min()) / w, (v.max() - v.min()) / h) * (1 + 2 * margin) or 1.0
        self.scale = 1.0 / span
        self.cu, self.cv = 0.5 * (u.max() + u.min()), 0.5 * (v.max() + v.min())

    def project(self, x):
        x = np.asarray(x, np.float64)
        w, h = self.size
        px = (x @ self.right - self.cu) * self.scale + w / 2
        py = h / 2 - (x @ self.up - self.cv) * self.scale
        return np.stack([px, py], axis=-1), x @ self.f


def render(x, faces, cam: Camera, closed=None, floor_z=None, label=None) -> Image.Image:
    img = Image.new("RGB", cam.size, BG)
    draw = ImageDraw.Draw(img)
    x = np.asarray(x, np.float64)
    faces = np.asarray(faces)
    if floor_z is not None:
        lo, hi = cam.bounds if hasattr(cam, "bounds") else (x.min(axis=0) - 0.5, x.max(axis=0) + 0.5)
        quad = np.array([[lo[0], lo[1], floor_z], [hi[0], lo[1], floor_z], [hi[0], hi[1], floor_z], [lo[0], hi[1], floor_z]])
        q2, _ = cam.project(quad)
        draw.polygon([tuple(p) for p in q2], fill=FLOOR)
    if np.all(np.isfinite(x)) and len(faces):
        closed = is_closed(faces) if closed is None else closed
        p2, depth = cam.project(x)
        a, b, c = x[faces[:, 0]], x[faces[:, 1]], x[faces[:, 2]]
        n = np.cross(b - a, c - a)
        n /= np.maximum(np.linalg.norm(n, axis=1, keepdims=True), 1e-30)
        facing = n @ (-cam.f) > 0
        shade = 0.35 + 0.65 * np.abs(n @ LIGHT)
        base = np.where(facing[:, None], FRONT[None], (BACK_CLOSED if closed else BACK_OPEN)[None])
        colors = np.clip(base * shade[:, None], 0, 255).astype(int)
        order = np.argsort(-depth[faces].mean(axis=1))       # far first
        tri = p2[faces]
        for k in order:
            draw.polygon([tuple(tri[k, 0]), tuple(tri[k, 1]), tuple(tri[k, 2])], fill=tuple(colors[k]))
    elif not np.all(np.isfinite(x)):
        draw.text((8, cam.size[1] // 2), "NaN", fill=(200, 0, 0))
    if label:
        draw.text((4, 3), label, fill=(0, 0, 0))
    return img


def scene_camera(columns: dict, size, floor_z=None) -> Camera:
    """One camera for all columns, fitted to the first column's frames (the reference) and rest."""
    first = np.asarray(next(iter(columns.values())), np.float64)
    cam = Camera(first, size)
    lo, hi = np.nanmin(first.reshape(-1, 3), axis=0), np.nanmax(first.reshape(-1, 3), axis=0)
    pad = 0.15 * (hi - lo).max()
    cam.bounds = (lo - pad, hi + pad)
    if floor_z is not None:
        cam = Camera(np.concatenate([first.reshape(-1, 3), np.array([[lo[0] - pad, lo[1] - pad, floor_z],
                                                                      [hi[0] + pad, hi[1] + pad, floor_z]])]), size)
        cam.bounds = (lo - pad, hi + pad)
    return cam


def contact_sheet(columns: dict, faces, path, frames=None, rows=5, size=(220, 180), floor_z=None, title=None):
    """PNG with one row per chosen frame and one column per engine ({name: frames [T,N,3]})."""
    T = min(len(v) for v in columns.values())
    frames = frames if frames is not None else sorted(set(np.round(np.linspace(0, T - 1, rows)).astype(int)))
    cam = scene_camera(columns, size, floor_z)
    closed = is_closed(np.asarray(faces))
    head, left = 20 + (16 if title else 0), 44
    sheet = Image.new("RGB", (left + size[0] * len(columns), head + size[1] * len(frames)), BG)
    draw = ImageDraw.Draw(sheet)
    if title:
        draw.text((4, 3), title, fill=(0, 0, 0))
    for j, name in enumerate(columns):
        draw.text((left + j * size[0] + size[0] // 2 - 3 * len(name), head - 16), name, fill=(0, 0, 0))
    for i, t in enumerate(frames):
        draw.text((4, head + i * size[1] + size[1] // 2), f"t={t}", fill=(0, 0, 0))
        for j, (name, xs) in enumerate(columns.items()):
            sheet.paste(render(xs[t], faces, cam, closed, floor_z), (left + j * size[0], head + i * size[1]))
            draw.rectangle([left + j * size[0], head + i * size[1], left + (j + 1) * size[0] - 1,
                            head + (i + 1) * size[1] - 1], outline=(200, 200, 200))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    sheet.save(path, optimize=True)
    return path


def animation(columns: dict, faces, path, dt=1.0 / 24.0, max_frames=48, size=(200, 160), floor_z=None):
    """GIF (Pillow's encoder) of the columns side by side, every k-th frame to stay short."""
    T = min(len(v) for v in columns.values())
    step = max(1, int(np.ceil(T / max_frames)))
    cam = scene_camera(columns, size, floor_z)
    closed = is_closed(np.asarray(faces))
    images = []
    for t in range(0, T, step):
        row = Image.new("RGB", (size[0] * len(columns), size[1]), BG)
        for j, (name, xs) in enumerate(columns.items()):
            row.paste(render(xs[t], faces, cam, closed, floor_z, label=f"{name}  t={t}"), (j * size[0], 0))
        images.append(row.quantize(colors=64))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    images[0].save(path, save_all=True, append_images=images[1:], duration=int(round(1000 * dt * step)), loop=0,
                   optimize=True)
    return path
