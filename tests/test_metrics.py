"""metrics: colour distance on real footage, CMMD through transformers' CLIP classes on a
tiny random-weight CLIP replica saved locally (offline)."""
import json

import numpy as np
import pytest

from backend.errors import InputError
from backend.metrics import cmmd, colour_measures, mmd
from cli_util import run_cli


def test_mmd_matches_explicit_pair_sums():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(5, 4)), rng.normal(1.0, 1.0, size=(7, 4))
    k = lambda a, b: np.exp(-np.sum((a - b) ** 2) / (2 * 10.0 ** 2))  # noqa: E731
    ref = 1000 * (np.mean([[k(a, b) for b in x] for a in x]) + np.mean([[k(a, b) for b in y] for a in y])
                  - 2 * np.mean([[k(a, b) for b in y] for a in x]))
    assert mmd(x, y) == pytest.approx(ref, rel=1e-9) and ref > 0
    assert mmd(x, x) == pytest.approx(0.0, abs=1e-9)


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModelWithProjection
    import torch
    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("tiny-clip")
    cfg = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           image_size=32, patch_size=8, projection_dim=16)
    CLIPVisionModelWithProjection(cfg).save_pretrained(d, safe_serialization=True)
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(d)
    return d


def _shifted_folder(src, dst, gain):
    """First 6 frames of ``src`` as PNGs, colour scaled by ``gain`` (linear)."""
    import cv2
    from backend.colour import linear_to_srgb
    from backend.footage import open_footage
    dst.mkdir()
    with open_footage(src, max_size=96) as fo:
        for fr in fo:
            if fr.index >= 6:
                break
            img = (linear_to_srgb(fr.rgb * np.asarray(gain, np.float32)) * 255 + 0.5).astype(np.uint8)
            cv2.imwrite(str(dst / f"f_{fr.index + 1:04d}.png"), img[..., ::-1])
    return dst


def test_cmmd_on_tiny_clip_replica(tmp_path, footage, tiny_clip):
    same = _shifted_folder(footage("boat"), tmp_path / "a", (1, 1, 1))
    blue = _shifted_folder(footage("boat"), tmp_path / "b", (0.3, 0.8, 1.6))
    self_d = cmmd(same, same, tiny_clip)
    shift_d = cmmd(same, blue, tiny_clip)
    other_d = cmmd(same, footage("dolphins"), tiny_clip, max_frames=6)
    assert abs(self_d) < 1e-6
    assert shift_d > 1e-3 and other_d > 1e-3
    r = run_cli("metrics", str(same), str(blue), "--clip", str(tiny_clip))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["cmmd"] == pytest.approx(shift_d, rel=1e-3, abs=1e-6)
    assert out["colour_w2"] > 0.5


def test_colour_measures_on_real_footage_and_bad_sets(tmp_path, footage):
    m = colour_measures(footage("boat"), footage("dolphins"), max_frames=8)
    assert m["colour_w2"] > 1.0 and m["frames_a"] == 8 and m["mean_rgb_b"][2] > m["mean_rgb_b"][0]
    assert colour_measures(footage("boat"), footage("boat"), max_frames=8)["colour_w2"] < 1e-3
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="empty"):
        colour_measures(tmp_path / "empty", footage("boat"))
    r = run_cli("metrics", str(tmp_path / "empty"), str(footage("boat")))
    assert r.returncode != 0
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and "empty" in err[0], r.stderr
    r = run_cli("metrics", str(footage("boat")), str(footage("boat")), "--clip", str(tmp_path / "none"))
    assert r.returncode != 0 and "CLIP model" in r.stderr
    # a CLIP folder, but no torch/transformers in this Python (the fast lane, Blender's own
    # Python): one line naming what CMMD needs, never a bare ModuleNotFoundError
    (tmp_path / "clip").mkdir()
    (tmp_path / "clip" / "config.json").write_text("{}")
    r = run_cli("metrics", str(footage("boat")), str(footage("boat")), "--clip", str(tmp_path / "clip"))
    assert r.returncode != 0 and "ModuleNotFoundError" not in r.stderr
    import importlib.util
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None:
        assert "CMMD (CLIP embeddings) needs torch, transformers" in r.stderr, r.stderr
    else:
        assert "CLIP model" in r.stderr, r.stderr


def test_clip_folder_with_only_pytorch_model_bin_loads(tmp_path, tiny_clip):
    """Issue 26: openai/clip-vit-large-patch14-336 publishes pytorch_model.bin (and
    tf_model.h5), no safetensors, of a whole ``CLIPModel`` (text and vision towers, config
    ``model_type: clip``); the loader takes the vision tower from that .bin."""
    import json as _json

    import torch
    from transformers import CLIPConfig, CLIPModel

    from backend.metrics import ClipEmbedder

    binary = tmp_path / "clip-bin"
    binary.mkdir()
    vision = _json.loads((tiny_clip / "config.json").read_text())
    cfg = CLIPConfig(text_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, vocab_size=100, max_position_embeddings=16,
                                      projection_dim=16),
                     # the published config repeats projection_dim (768) inside vision_config
                     vision_config={k: vision[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                                          "num_attention_heads", "image_size", "patch_size",
                                                          "projection_dim")},
                     projection_dim=16)
    torch.manual_seed(3)
    full = CLIPModel(cfg).eval()
    cfg.save_pretrained(binary)
    torch.save(full.state_dict(), binary / "pytorch_model.bin")
    (binary / "preprocessor_config.json").write_bytes((tiny_clip / "preprocessor_config.json").read_bytes())
    assert not list(binary.glob("*.safetensors"))
    emb = ClipEmbedder(binary)
    want = full.state_dict()
    for name, p in emb.model.state_dict().items():
        assert torch.equal(p, want[name]), name


def test_cmmd_preprocessing_is_the_reference(footage, tiny_clip):
    """Issue 26: as the CMMD reference (google-research cmmd io_util): the full-resolution
    frame is centre-cropped to a square, resized to the model's input size with PIL's
    bicubic (antialiased) filter, then only normalised; the embedding equals that
    pipeline's, computed here independently from the decoded frame."""
    import torch
    from PIL import Image
    from transformers import CLIPImageProcessor, CLIPVisionModelWithProjection

    from backend.colour import linear_to_srgb
    from backend.footage import open_footage
    from backend.metrics import ClipEmbedder

    with open_footage(footage("boat")) as fo:
        rgb = next(iter(fo)).rgb
    h, w = rgb.shape[:2]
    assert w > h  # a wide frame: the crop matters
    srgb8 = (np.clip(linear_to_srgb(rgb), 0, 1) * 255 + 0.5).astype(np.uint8)
    side = min(h, w)
    sq = Image.fromarray(np.ascontiguousarray(srgb8[(h - side) // 2:(h - side) // 2 + side,
                                                    (w - side) // 2:(w - side) // 2 + side]))
    x = np.asarray(sq.resize((32, 32), resample=Image.BICUBIC), np.float32) / 255.0
    proc = CLIPImageProcessor.from_pretrained(tiny_clip)
    x = (x - np.asarray(proc.image_mean, np.float32)) / np.asarray(proc.image_std, np.float32)
    model = CLIPVisionModelWithProjection.from_pretrained(tiny_clip).eval()
    with torch.no_grad():
        ref = torch.nn.functional.normalize(model(pixel_values=torch.from_numpy(x.transpose(2, 0, 1))[None])
                                            .image_embeds, dim=-1).numpy()[0]
    got = ClipEmbedder(tiny_clip).embed(iter([rgb]))[0]
    np.testing.assert_allclose(got, ref, atol=2e-5)
