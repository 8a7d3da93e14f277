"""Renderer capabilities declared on the base class; the prompt parsed once, in read_prompt."""
import io

import numpy as np
import pytest

from backend.jobs.restyle import output_path, read_rgba_exr, restyle
from backend.renderers import Renderer, base, read_prompt, register_renderer, renderer_class
from backend.renderers.prompt import PromptError, parse_prompt
from gbuffer_util import make_gbuffers


def test_builtin_capabilities_without_building_a_renderer():
    emb, cn = renderer_class("embedded"), renderer_class("controlnet")
    assert (emb.free_text_prompt, emb.accepts_reference, emb.uses_previous_output, emb.needs_gpu) == (
        False, True, False, False)
    assert (cn.free_text_prompt, cn.accepts_reference, cn.uses_previous_output, cn.needs_gpu) == (
        True, False, True, True)
    with pytest.raises(KeyError, match="unknown renderer 'nope'"):
        renderer_class("nope")


def test_read_prompt_per_renderer():
    assert read_prompt("dense fog") == read_prompt("dense fog", "embedded") == parse_prompt("dense fog")
    assert read_prompt("", "embedded") == read_prompt(None, "embedded") == ()
    with pytest.raises(PromptError, match="cyberpunk"):
        read_prompt("a cyberpunk city in fog", "embedded")
    # free text: the looks the text names, () when it names other things
    assert read_prompt("a cyberpunk city in fog", "controlnet") == ()
    assert read_prompt("heavy rain at night", "controlnet") == parse_prompt("heavy rain at night")
    with pytest.raises(KeyError):
        read_prompt("fog", "nope")


class _Flat(Renderer):
    """A third-party renderer that declares nothing: the base defaults apply."""

    name = "flat"

    def render(self, frame, prompt, *, frame_index=0, time_s=0.0, prev=None, looks=None):
        return np.clip(frame.albedo, 0, 1).astype(np.float32)


@pytest.fixture
def flat():
    register_renderer("flat", _Flat)
    yield
    base.RENDERERS._factories.pop("flat", None)


def test_base_defaults_serve_a_renderer_that_declares_nothing(flat, tmp_path):
    gb = make_gbuffers(tmp_path / "gb", n=2, h=16, w=20)
    assert renderer_class("flat") is _Flat and _Flat.free_text_prompt
    res = restyle(gb, tmp_path / "out", "purple elephants", renderer="flat", mp4=False)
    assert sorted(res.written) == [1, 2]
    assert res.manifest["looks"] == [] and res.manifest["look_params"] is None
    assert read_rgba_exr(output_path(tmp_path / "out", 1)).shape == (16, 20, 3)


def test_the_job_parses_the_prompt_once(monkeypatch, tmp_path):
    gb = make_gbuffers(tmp_path / "gb", n=3, h=16, w=20)
    calls = []

    def counting(prompt):
        calls.append(prompt)
        return parse_prompt(prompt)

    monkeypatch.setattr(base, "parse_prompt", counting)
    base._parse.cache_clear()
    res = restyle(gb, tmp_path / "out", "very light snow", progress=io.StringIO(), mp4=False)
    base._parse.cache_clear()
    assert calls == ["very light snow"]
    assert res.manifest["looks"] == [lk.to_json() for lk in parse_prompt("very light snow")]
