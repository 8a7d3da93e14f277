"""Calibration of the lights' units and BSDF against Cycles (issue 39; docs/lights.md).

Two sets of tiny Cycles renders (bpy, 16-32 px, no world, direct light only:
``max_bounces = 0``, no denoiser), each compared with the closed form or with
:mod:`backend.renderers.lights` for the same geometry:

* **units**: a 0.5 grey Diffuse BSDF plane 2 m below a point (100 W), spot (100 W),
  area (100 W, 0.1 m square) and sun (3 W/m^2) light: Cycles against
  ``albedo / pi * E`` with ``E = P / (4 pi d^2)`` (point, spot), ``P / (pi d^2)`` (area
  on its axis), ``S`` (sun);
* **coat albedo**: the Principled BSDF's dielectric layer's directional albedo (base
  colour black, uniform white world), the table the diffuse layering uses;
* **BSDF**: a 0.5 grey Principled BSDF plane (roughness 0.04, 0.3, 0.8) under a 3 W/m^2
  sun at 20 and 60 degrees elevation, seen from 10-85 degrees: Cycles against
  ``lights._bsdf`` (coat-layered Lambert + GGX).

Usage: ``.venv/bin/python benchmarks/lights_calibration.py`` (writes
``benchmarks/results/lights_calibration.{md,json}``).
"""
from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]
F32 = np.float32
TMP = Path(tempfile.mkdtemp(prefix="lights_cal_"))


def _scene(res: int, samples: int):
    import bpy

    bpy.ops.wm.read_factory_settings(use_empty=True)
    sc = bpy.context.scene
    sc.render.engine = "CYCLES"
    sc.cycles.samples = samples
    sc.cycles.use_denoising = False
    sc.cycles.max_bounces = 0
    sc.render.resolution_x = sc.render.resolution_y = res
    w = bpy.data.worlds.new("w")
    sc.world = w
    if bpy.app.version < (5, 0, 0):
        w.use_nodes = True
    w.node_tree.nodes["Background"].inputs["Strength"].default_value = 0.0
    return sc


def _render(sc, res: int) -> float:
    import bpy

    sc.render.filepath = str(TMP / "o.exr")
    sc.render.image_settings.file_format = "OPEN_EXR"
    bpy.ops.render.render(write_still=True)
    img = bpy.data.images.load(str(TMP / "o.exr"))
    a = np.array(img.pixels[:]).reshape(res, res, 4)
    bpy.data.images.remove(img)
    c = res // 2
    return float(a[c - res // 8:c + res // 8, c - res // 8:c + res // 8, :3].mean())


def units():
    import bpy

    rows = []
    cases = [("point", {"energy": 100.0, "shadow_soft_size": 0.0}, 0.5 / math.pi * 100 / (4 * math.pi * 4)),
             ("spot", {"energy": 100.0, "shadow_soft_size": 0.0, "spot_size": 1.0},
              0.5 / math.pi * 100 / (4 * math.pi * 4)),
             ("area", {"energy": 100.0, "size": 0.1}, 0.5 / math.pi * 100 / (math.pi * 4)),
             ("sun", {"energy": 3.0}, 0.5 / math.pi * 3)]
    for kind, props, pred in cases:
        sc = _scene(32, 64)
        bpy.ops.mesh.primitive_plane_add(size=4.0)
        m = bpy.data.materials.new("m")
        if bpy.app.version < (5, 0, 0):
            m.use_nodes = True
        t = m.node_tree
        for n in list(t.nodes):
            if n.bl_idname == "ShaderNodeBsdfPrincipled":
                t.nodes.remove(n)
        d = t.nodes.new("ShaderNodeBsdfDiffuse")
        d.inputs["Color"].default_value = (0.5, 0.5, 0.5, 1)
        t.links.new(d.outputs[0], t.nodes["Material Output"].inputs[0])
        bpy.context.active_object.data.materials.append(m)
        cam = bpy.data.objects.new("c", bpy.data.cameras.new("c"))
        cam.location = (0, 0, 5)
        cam.data.lens = 200
        sc.collection.objects.link(cam)
        sc.camera = cam
        light = bpy.data.lights.new("L", kind.upper())
        for k, v in props.items():
            setattr(light, k, v)
        ob = bpy.data.objects.new("L", light)
        sc.collection.objects.link(ob)
        ob.location = (0, 0, 2)
        v = _render(sc, 32)
        rows.append({"light": kind, "cycles": round(v, 5), "predicted": round(pred, 5), "ratio": round(v / pred, 4)})
        print(rows[-1], flush=True)
    return rows


def bsdf():
    import bpy

    from backend.renderers import lights as L

    rows = []
    for rough in (0.04, 0.3, 0.8):
        for tc in (10, 30, 60, 85):
            for ts in (20, 60):
                sc = _scene(16, 128)
                bpy.ops.mesh.primitive_plane_add(size=200.0)
                m = bpy.data.materials.new("m")
                if bpy.app.version < (5, 0, 0):
                    m.use_nodes = True
                p = m.node_tree.nodes["Principled BSDF"]
                p.inputs["Base Color"].default_value = (0.5, 0.5, 0.5, 1)
                p.inputs["Roughness"].default_value = rough
                bpy.context.active_object.data.materials.append(m)
                cam = bpy.data.objects.new("c", bpy.data.cameras.new("c"))
                cam.data.lens = 300
                a = math.radians(tc)
                cam.location = (0, -10 * math.cos(a), 10 * math.sin(a))
                cam.rotation_euler = (math.pi / 2 - a, 0, 0)
                sc.collection.objects.link(cam)
                sc.camera = cam
                sun = bpy.data.lights.new("s", "SUN")
                sun.energy, sun.angle = 3.0, 0.0
                ob = bpy.data.objects.new("s", sun)
                sc.collection.objects.link(ob)
                b = math.radians(ts)
                ldir = np.array([math.cos(b), 0.0, math.sin(b)])  # toward the sun, 90 deg off the view
                d = -ldir
                ob.rotation_euler = (math.atan2(math.hypot(d[0], d[1]), -d[2]), 0.0, math.atan2(d[1], d[0]) - math.pi / 2)
                val = _render(sc, 16)
                n = np.array([[0.0], [0.0], [1.0]], F32)
                v = np.array([0.0, -math.cos(a), math.sin(a)], F32)[:, None]
                nv = np.maximum((n * v).sum(0), F32(1e-4))
                alb, met = np.full((3, 1), 0.5, F32), np.zeros(1, F32)
                r = np.full(1, max(rough, L.MIN_ROUGHNESS), F32)
                f0 = F32(0.04) * (1 - met) + alb * met
                kd, ms = L._bsdf_terms(nv, alb, f0, r, met)
                ours = float((L._bsdf(n, v, nv, ldir.astype(F32)[:, None], f0, r * r, kd, ms) * 3.0).mean())
                rows.append({"roughness": rough, "view_elevation_deg": tc, "sun_elevation_deg": ts,
                             "cycles": round(val, 5), "ours": round(ours, 5), "ratio": round(ours / val, 4)})
                print(rows[-1], flush=True)
    return rows


def coat_albedo():
    """The dielectric layer's directional albedo E(mu, roughness) in Cycles: a Principled
    plane with a black base colour under a uniform white world reflects exactly E
    (``lights.COAT_E`` holds these values)."""
    import bpy

    mus = [0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.85, 1.0]
    rough = [0.0, 0.1, 0.25, 0.4, 0.6, 0.8, 1.0]
    table = []
    for r in rough:
        row = []
        for mu in mus:
            sc = _scene(8, 256)
            sc.cycles.max_bounces = 1
            bg = sc.world.node_tree.nodes["Background"]
            bg.inputs["Strength"].default_value = 1.0
            bg.inputs["Color"].default_value = (1, 1, 1, 1)
            bpy.ops.mesh.primitive_plane_add(size=4000.0)
            m = bpy.data.materials.new("m")
            if bpy.app.version < (5, 0, 0):
                m.use_nodes = True
            p = m.node_tree.nodes["Principled BSDF"]
            p.inputs["Base Color"].default_value = (0, 0, 0, 1)
            p.inputs["Roughness"].default_value = r
            bpy.context.active_object.data.materials.append(m)
            cam = bpy.data.objects.new("c", bpy.data.cameras.new("c"))
            cam.data.lens = 1000
            a = math.asin(min(mu, 0.9999))
            cam.location = (0, -10 * math.cos(a), 10 * math.sin(a))
            cam.rotation_euler = (math.pi / 2 - a, 0, 0)
            sc.collection.objects.link(cam)
            sc.camera = cam
            row.append(round(_render(sc, 8), 4))
        table.append(row)
        print(r, row, flush=True)
    return {"mu": mus, "roughness": rough, "E": table}


def main() -> int:
    res = {"units": units(), "bsdf": bsdf(), "coat_albedo": coat_albedo()}
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "lights_calibration.json").write_text(json.dumps(res, indent=1))
    lines = ["# Lights calibration against Cycles (issue 39)", "", "Units (grey Diffuse plane 2 m from the light, "
             "direct light only): Cycles / closed form.", "", "| light | Cycles | predicted | ratio |", "|---|---|---|---|"]
    lines += [f"| {r['light']} | {r['cycles']} | {r['predicted']} | {r['ratio']} |" for r in res["units"]]
    lines += ["", "BSDF (grey Principled plane, 3 W/m^2 sun 90 degrees off the view, direct light only): "
              "ours / Cycles.", "", "| roughness | view elev. | sun elev. | Cycles | ours | ratio |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {r['roughness']} | {r['view_elevation_deg']} | {r['sun_elevation_deg']} | {r['cycles']} | "
              f"{r['ours']} | {r['ratio']} |" for r in res["bsdf"]]
    ca = res["coat_albedo"]
    lines += ["", "Coat albedo E (Principled, black base colour, white world; rows roughness, columns view "
              "cosine), the table `lights.COAT_E` ships:", "",
              "| roughness \\ mu | " + " | ".join(str(m) for m in ca["mu"]) + " |",
              "|---|" + "---|" * len(ca["mu"])]
    lines += [f"| {r} | " + " | ".join(str(x) for x in row) + " |" for r, row in zip(ca["roughness"], ca["E"])]
    (out / "lights_calibration.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
