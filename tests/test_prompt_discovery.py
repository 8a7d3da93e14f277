"""Discoverable prompts (issue 17): phrases for strengths, prompts from sliders, the
nearest known word for a typo, a one-line error with the details after it."""
import pytest

from backend.renderers.prompt import (LOOK_ORDER, PRESETS, PromptError, compose_prompt, look_phrase,
                                      parse_prompt, suggest)


def strengths(prompt):
    return {lk.name: lk.strength for lk in parse_prompt(prompt)}


@pytest.mark.parametrize("name", LOOK_ORDER)
def test_look_phrase_round_trips_to_the_nearest_strength(name):
    for s in (0.35, 0.5, 0.8, 1.0, 1.6, 2.0):
        phrase = look_phrase(name, s)
        got = strengths(phrase)[name]
        # the nearest representable level: never further than half the gap to a neighbour
        assert abs(got - s) <= 0.35, (name, s, phrase, got)
    assert look_phrase(name, 0.0) == ""
    assert strengths(look_phrase(name, 1.0))[name] == 1.0


def test_compose_prompt_reads_like_an_artist_would_write_it():
    p = compose_prompt({"fog": 1.6, "rain": 0.5, "night": 1.0})
    assert p == "light rain, dense fog at night"
    assert strengths(p) == {"rain": 0.5, "fog": 1.6, "night": 1.0}
    assert compose_prompt({"night": 1.0}) == "night"
    assert compose_prompt({}) == ""
    assert strengths(compose_prompt({"underwater": 1.7, "night": 1.4})) == {"underwater": 1.7, "night": 1.4}
    with pytest.raises(KeyError):
        look_phrase("lava", 1.0)


def test_presets_parse():
    for p in PRESETS:
        assert parse_prompt(p), p


def test_typos_get_the_nearest_known_word_in_one_short_line():
    with pytest.raises(PromptError) as ei:
        parse_prompt("dense foog at nite")
    e = ei.value
    assert e.suggestions == {"foog": "fog", "nite": "night"}
    first = str(e).splitlines()[0]
    assert first == e.short and len(first) < 260  # with two unknown words and their hints
    assert "Did you mean 'fog' for 'foog', 'night' for 'nite'?" in first
    assert "--renderer controlnet" in str(e) and "mist" in str(e)  # details after the line
    assert suggest("cyberpunk") is None
    # issue 37: "sunny" is as close to "snowy" as "nite" to "night", but means the opposite
    assert suggest("sunny") is None and suggest("Sunny") is None and suggest("snowwy") == "snowy"


def test_cli_prints_one_line_then_the_vocabulary(tmp_path):
    from cli_util import run_cli
    from gbuffer_util import make_gbuffers

    gb = make_gbuffers(tmp_path / "gb", n=1, h=8, w=8)
    r = run_cli("restyle", str(gb), "--prompt", "purple fogg", "--out", str(tmp_path / "o"))
    assert r.returncode == 2
    err = r.stderr.splitlines()
    assert err[0].startswith("error: the embedded renderer does not understand 'purple', 'fogg'")
    assert "Did you mean 'foggy' for 'fogg'?" in err[0]  # difflib's nearest
    # then a short list (issue 28: it was ~100 words in one paragraph): a heading, one
    # line per look with a few synonyms, one of intensity words; every line short
    assert err[1].startswith("Words it understands")
    assert len(err) <= 12 and max(len(line) for line in err[1:]) < 100, err
    assert any(line.strip().startswith("fog: ") for line in err[2:])
