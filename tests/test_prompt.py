"""Prompt parsing for the embedded renderer (issue 5 §3)."""
import pytest

from backend.renderers.looks import LOOK_NAMES, build_params
from backend.renderers.prompt import LOOK_ORDER, Look, PromptError, parse_prompt, vocabulary


def names(prompt):
    return [lk.name for lk in parse_prompt(prompt)]


def strength(prompt, name):
    return {lk.name: lk.strength for lk in parse_prompt(prompt)}[name]


@pytest.mark.parametrize("prompt,expected", [
    ("fog", [("fog", 1.0)]),
    ("light fog", [("fog", 0.5)]),
    ("dense fog", [("fog", 1.6)]),
    ("heavy rain", [("rain", 1.6)]),
    ("golden hour", [("golden_hour", 1.0)]),
    ("murky underwater at night", [("underwater", 1.7), ("night", 1.0)]),  # night last
    ("Dense FOG!", [("fog", 1.6)]),
    ("", []),
])
def test_examples(prompt, expected):
    assert [(lk.name, lk.strength) for lk in parse_prompt(prompt)] == [
        (n, pytest.approx(s)) for n, s in expected]


@pytest.mark.parametrize("word,look", [
    ("mist", "fog"), ("haze", "fog"), ("misty", "fog"),
    ("ocean", "underwater"), ("sea", "underwater"), ("water", "underwater"),
    ("under water", "underwater"),
    ("dusk", "golden_hour"), ("sunset", "golden_hour"), ("sunrise", "golden_hour"),
    ("cloudy", "overcast"), ("wet", "rain"), ("snowy", "snow"), ("winter", "snow"),
    ("moonlit", "night"), ("nighttime", "night"),
])
def test_synonyms(word, look):
    assert names(word) == [look]


def test_intensity_ordering():
    s = [strength(p, "fog") for p in ("faint fog", "light fog", "fog", "dense fog",
                                       "very dense fog", "extremely dense fog")]
    assert s == sorted(s) and len(set(s)) == len(s), s
    assert strength("murky sea", "underwater") > strength("underwater", "underwater")
    assert strength("deep ocean", "underwater") > 1.0


def test_modifier_binds_to_next_look_only():
    looks = {lk.name: lk.strength for lk in parse_prompt("light fog with heavy rain")}
    assert looks == {"fog": pytest.approx(0.5), "rain": pytest.approx(1.6)}
    assert strength("fog, dense", "fog") == pytest.approx(1.6)   # trailing modifier


def test_stopwords_and_order_independence():
    a = parse_prompt("a very dense fog at night with snow")
    b = parse_prompt("snow and night with very dense fog")
    assert a == b
    assert [lk.name for lk in a] == [n for n in LOOK_ORDER if n in ("fog", "night", "snow")]


def test_duplicate_look_keeps_strongest():
    assert parse_prompt("light fog and dense fog") == (Look("fog", 1.6),)


def test_deterministic():
    p = "murky underwater at night"
    assert parse_prompt(p) == parse_prompt(p)
    assert build_params(parse_prompt(p)) == build_params(parse_prompt(p))
    assert build_params(parse_prompt(p)).to_json() == build_params(parse_prompt(p)).to_json()


def test_unknown_words_raise_helpful_error():
    with pytest.raises(PromptError) as ei:
        parse_prompt("a cyberpunk city in dense fog")
    e = ei.value
    assert isinstance(e, ValueError)
    assert e.unknown == ["cyberpunk", "city"]
    msg = str(e)
    assert "'cyberpunk'" in msg and "'city'" in msg
    assert "--renderer controlnet" in msg
    for look in LOOK_ORDER:  # as typed: "golden hour"
        assert look.replace("_", " ") in msg
    assert "dense" in msg and "mist" in msg


def test_strengths_clipped_and_vocabulary_consistent():
    s = strength("extremely extremely torrential rain", "rain")
    assert 0.1 <= s <= 3.0
    assert set(LOOK_ORDER) == set(LOOK_NAMES)
    voc = vocabulary()
    assert set(voc) == {"looks", "synonyms", "intensity", "ignored"}
    for w in voc["synonyms"]:
        assert parse_prompt(w), w
