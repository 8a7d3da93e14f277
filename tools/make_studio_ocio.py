"""Write tests/data/studio_aces/config.ocio: a small studio-style ACES OpenColorIO config.

It is what a studio's ``$OCIO`` typically looks like to us (issue 38): ACES2065-1 as the
reference and ``aces_interchange`` role, ACEScg as ``scene_linear``, names in the ACES
1.x style (``ACES - ACEScg``), no colour space called ``Linear Rec.709 (sRGB)`` and no
interop IDs; its scene-linear Rec.709 space has a studio name (``Output - Linear
Rec709 Studio``) only the AP0 -> Rec.709 matrix identifies. A second file,
``config_no709.ocio``, has no Rec.709 space at all.

Run: ``python tools/make_studio_ocio.py`` (matrices from :mod:`backend.exr_colour`).
"""
import sys
from pathlib import Path

import PyOpenColorIO as ocio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from backend import exr_colour  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "studio_aces"


def _matrix(src, dst):
    m = exr_colour.conversion_matrix(exr_colour.PRIMARIES[src], exr_colour.PRIMARIES[dst])
    m44 = [0.0] * 16
    for r in range(3):
        for c in range(3):
            m44[4 * r + c] = float(m[r, c])
    m44[15] = 1.0
    return ocio.MatrixTransform(matrix=m44)


def build(with_709: bool) -> ocio.Config:
    cfg = ocio.Config()
    cfg.setMajorVersion(2)
    cfg.setMinorVersion(0)
    ref = ocio.ColorSpace(ocio.REFERENCE_SPACE_SCENE, "ACES - ACES2065-1", family="ACES",
                          description="reference: ACES2065-1 (AP0, linear)")
    cfg.addColorSpace(ref)
    cg = ocio.ColorSpace(ocio.REFERENCE_SPACE_SCENE, "ACES - ACEScg", family="ACES")
    cg.setTransform(_matrix("lin_ap0_scene", "lin_ap1_scene"), ocio.COLORSPACE_DIR_FROM_REFERENCE)
    cfg.addColorSpace(cg)
    if with_709:
        lin = ocio.ColorSpace(ocio.REFERENCE_SPACE_SCENE, "Output - Linear Rec709 Studio", family="Output")
        lin.setTransform(_matrix("lin_ap0_scene", "lin_rec709_scene"), ocio.COLORSPACE_DIR_FROM_REFERENCE)
        cfg.addColorSpace(lin)
    raw = ocio.ColorSpace(ocio.REFERENCE_SPACE_SCENE, "Utility - Raw", family="Utility", isData=True)
    cfg.addColorSpace(raw)
    cfg.setRole("aces_interchange", "ACES - ACES2065-1")
    cfg.setRole("scene_linear", "ACES - ACEScg")
    cfg.setRole("default", "ACES - ACES2065-1")
    cfg.setRole("data", "Utility - Raw")
    cfg.addDisplayView("Raw", "Raw", "Utility - Raw")
    cfg.validate()
    return cfg


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "config.ocio").write_text(build(True).serialize())
    (OUT / "config_no709.ocio").write_text(build(False).serialize())
    print(OUT)
