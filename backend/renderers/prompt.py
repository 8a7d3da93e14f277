"""Prompt understanding for the embedded renderer: free text -> looks with strengths.

The embedded renderer is a physically based shader, not a generative model, so it
understands a small, closed vocabulary. :func:`parse_prompt` turns text such as
``"light fog"``, ``"dense fog"``, ``"murky underwater at night"`` or ``"heavy rain at
golden hour"`` into a tuple of :class:`Look` ``(name, strength)``.

Grammar (case-insensitive, punctuation ignored)::

    prompt   := { stopword | modifier* look }
    modifier := intensity word ("light", "dense", "murky", ...) or "very" / "extremely"
    look     := a look name or one of its synonyms ("mist" -> fog, "sea" -> underwater)

A modifier applies to the next look in the text; a modifier that follows the last
look applies to that look ("fog, dense"). A look named twice keeps its strongest
strength. The result is sorted by :data:`LOOK_ORDER`, the order in which the renderer
applies looks, so the same words in any order give the same result.

Any other word raises :class:`PromptError`, whose message lists the vocabulary and
points to the diffusion renderers (``--renderer controlnet``) for free-form prompts.

Strength: ``1.0`` is the look as designed; intensity words scale it (``light`` 0.5,
``dense`` 1.6, ...) and ``very`` multiplies the next modifier's distance from 1 by 1.5.
Strengths are clipped to ``[0.1, 3.0]``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from ..errors import InputError

#: order in which looks are applied (relight first: the renderer's own daylight rig,
#: which an empty prompt no longer applies (issue 39: no look = the footage); then the
#: light rig, then surfaces, then media; night last:
#: it scales the light level of whatever the other looks built, so the darker light
#: wins -- "heavy rain at night" is darker than both "heavy rain" and the source)
LOOK_ORDER = ("relight", "golden_hour", "overcast", "rain", "snow", "underwater", "fog", "night")

#: surface forms -> canonical look name (multi-word forms are matched first)
SYNONYMS: Dict[str, str] = {
    "relight": "relight", "relit": "relight", "neutral": "relight", "daylight": "relight",
    "reshade": "relight",
    "fog": "fog", "foggy": "fog", "mist": "fog", "misty": "fog", "haze": "fog",
    "hazy": "fog", "smog": "fog", "mistiness": "fog",
    "underwater": "underwater", "under water": "underwater", "ocean": "underwater",
    "sea": "underwater", "water": "underwater", "submerged": "underwater",
    "undersea": "underwater", "aquatic": "underwater", "lake": "underwater",
    "night": "night", "nighttime": "night", "night time": "night", "midnight": "night",
    "moonlight": "night", "moonlit": "night", "dark": "night",
    "golden hour": "golden_hour", "golden_hour": "golden_hour", "sunset": "golden_hour",
    "sunrise": "golden_hour", "dusk": "golden_hour", "dawn": "golden_hour",
    "evening": "golden_hour", "golden": "golden_hour",
    "overcast": "overcast", "cloudy": "overcast", "clouds": "overcast",
    "grey": "overcast", "gray": "overcast", "gloomy": "overcast",
    "rain": "rain", "rainy": "rain", "raining": "rain", "wet": "rain", "storm": "rain",
    "stormy": "rain", "drizzle": "rain", "downpour": "rain",
    "snow": "snow", "snowy": "snow", "snowing": "snow", "winter": "snow",
    "snowfall": "snow", "frost": "snow", "frosty": "snow",
}

#: intensity words -> strength multiplier
INTENSITY: Dict[str, float] = {
    "light": 0.5, "thin": 0.5, "slight": 0.4, "slightly": 0.4, "faint": 0.35,
    "soft": 0.6, "subtle": 0.4, "little": 0.5, "bit": 0.5, "mild": 0.6, "weak": 0.5,
    "moderate": 0.8, "medium": 0.8, "some": 0.7,
    "dense": 1.6, "thick": 1.6, "heavy": 1.6, "strong": 1.5, "murky": 1.7,
    "deep": 1.5, "dark": 1.4, "pea soup": 2.2, "intense": 1.6, "pouring": 1.8,
    "torrential": 2.0, "hard": 1.5, "full": 1.3, "late": 1.3, "early": 0.7,
}

#: words that scale the next intensity word's effect (or the next look) by this factor
INTENSIFIERS: Dict[str, float] = {"very": 1.5, "extremely": 2.0, "really": 1.3, "super": 1.5}

#: words that are allowed and ignored
STOPWORDS = frozenset(
    "a an the with and at in on of by during under into look style scene shot "
    "like time day".split()
)

MIN_STRENGTH, MAX_STRENGTH = 0.1, 3.0


class PromptError(InputError):
    """The prompt contains words the embedded renderer does not understand (a kind of
    :class:`backend.errors.InputError`, so a ``ValueError``).

    Attributes:
        unknown: the words not understood, in prompt order.
    """

    def __init__(self, unknown: List[str], prompt: str):
        self.unknown = list(unknown)
        self.prompt = prompt
        self.suggestions = {w: suggest(w) for w in self.unknown}
        super().__init__(f"{self.short}\n" + "\n".join(self.vocabulary_lines()))

    @staticmethod
    def vocabulary_lines() -> List[str]:
        """The vocabulary as a short list: one line per look with a few of its synonyms,
        one line of intensity words; the full list is in ``python -m backend restyle
        --help`` (it was one ~100-word paragraph)."""
        out = ["Words it understands (all of them: python -m backend restyle --help):"]
        for look in LOOK_ORDER:
            syn = sorted(w for w, t in SYNONYMS.items() if t == look and w not in (look, look.replace("_", " ")))
            more = f", ... ({len(syn) - 4} more)" if len(syn) > 4 else ""
            out.append(f"  {look.replace('_', ' ')}: {', '.join(syn[:4])}{more}")
        words = sorted(INTENSITY, key=INTENSITY.get)
        for label, part in (("weaker", [w for w in words if INTENSITY[w] < 1.0]),
                            ("stronger", [w for w in words if INTENSITY[w] > 1.0])):
            out.append(f"  {label}: {', '.join(part[:9])}{', ...' if len(part) > 9 else ''}")
        return out

    @property
    def short(self) -> str:
        """One line: the unknown words, the nearest known word for each, the looks (not
        ``relight``, to keep the line short: the full list names it)."""
        hints = [f"{s!r} for {w!r}" for w, s in self.suggestions.items() if s]
        hint = f" Did you mean {', '.join(hints)}?" if hints else ""
        return (f"the embedded renderer does not understand {', '.join(map(repr, self.unknown))} "
                f"in prompt {self.prompt!r}.{hint} Looks: {', '.join(w for w in LOOK_WORDS if w != 'relight')}; free text: "
                f"--renderer controlnet.")


@dataclass(frozen=True)
class Look:
    """One look with its strength (1.0 = as designed, range [0.1, 3.0])."""

    name: str
    strength: float = 1.0

    def to_json(self) -> Dict[str, object]:
        return {"name": self.name, "strength": round(float(self.strength), 4)}


def _tokenize(prompt: str) -> List[str]:
    text = re.sub(r"[^a-z_ ]+", " ", prompt.lower().replace("-", " "))
    return [t for t in text.split() if t]


def _phrases() -> List[Tuple[Tuple[str, ...], str, str]]:
    """(words, kind, key) for every multi/single-word form, longest first."""
    out = []
    for k in SYNONYMS:
        out.append((tuple(k.split()), "look", k))
    for k in INTENSITY:
        out.append((tuple(k.split()), "intensity", k))
    for k in INTENSIFIERS:
        out.append((tuple(k.split()), "intensifier", k))
    out.sort(key=lambda t: -len(t[0]))
    return out


def parse_prompt(prompt: str) -> Tuple[Look, ...]:
    """Parse a prompt into looks.

    Args:
        prompt: free text, e.g. ``"murky underwater at night"``. An empty prompt gives
            ``()`` (no look: the renderer returns the edited plate, issue 39;
            ``"relight"`` is the daylight relight an empty prompt gave before).

    Returns:
        Tuple of :class:`Look` sorted by :data:`LOOK_ORDER`, one per look name.

    Raises:
        PromptError: for words outside the vocabulary (message lists the vocabulary).
    """
    tokens = _tokenize(prompt or "")
    phrases = _phrases()
    items: List[Tuple[str, str]] = []
    unknown: List[str] = []
    i = 0
    while i < len(tokens):
        for words, kind, key in phrases:
            n = len(words)
            if tuple(tokens[i:i + n]) == words:
                # "dark" is a look (night) on its own but an intensity before a look
                if key == "dark" and kind == "look":
                    nxt = tokens[i + 1:i + 2]
                    if nxt and any(nxt[0] == w[0] for w, kd, _ in phrases if kd == "look"):
                        continue
                items.append((kind, key))
                i += n
                break
        else:
            if tokens[i] not in STOPWORDS:
                unknown.append(tokens[i])
            i += 1
    if unknown:
        raise PromptError(unknown, prompt)

    strengths: Dict[str, float] = {}
    pending = 1.0
    boost = 1.0
    last = None
    had_mod = False
    for kind, key in items:
        if kind == "intensifier":
            boost *= INTENSIFIERS[key]
        elif kind == "intensity":
            m = INTENSITY[key]
            pending *= max(1.0 + (m - 1.0) * boost, 0.05)
            boost = 1.0
            had_mod = True
        else:
            if boost != 1.0:  # "very fog"
                pending *= boost
            name = SYNONYMS[key]
            s = float(min(max(pending, MIN_STRENGTH), MAX_STRENGTH))
            strengths[name] = max(strengths.get(name, 0.0), s)
            last = name
            pending, boost, had_mod = 1.0, 1.0, False
    if had_mod and last is not None:  # trailing modifier: "fog, dense"
        s = float(min(max(strengths[last] * pending, MIN_STRENGTH), MAX_STRENGTH))
        strengths[last] = s
    return tuple(Look(n, round(strengths[n], 6)) for n in LOOK_ORDER if n in strengths)


#: the looks as an artist writes them (prompt words, in LOOK_ORDER)
LOOK_WORDS = tuple(n.replace("_", " ") for n in LOOK_ORDER)

#: ready-made prompts (the sidebar's Presets menu, ``--help``)
PRESETS = ("light fog", "dense fog", "heavy rain", "heavy rain at night", "light snow", "heavy snow",
           "murky underwater", "underwater at night", "golden hour", "overcast", "night",
           "dense fog at night", "light fog at golden hour")

#: the word that makes each look stronger (the sliders' phrases; see :func:`look_phrase`)
STRONG_WORD = {"relight": "strong", "fog": "dense", "rain": "heavy", "snow": "heavy", "overcast": "heavy",
               "golden_hour": "strong", "night": "dark", "underwater": "murky"}


#: words that spell close to a look word but mean its opposite ("sunny" is 0.6 from
#: "snowy" and "rainy"): never "corrected" into one (issue 37)
NO_SUGGESTION = frozenset({"sun", "sunny", "sunshine", "sunlit", "clear", "bright", "daylight", "day", "daytime",
                           "noon", "midday", "summer", "summery", "warm", "hot", "dry"})


def suggest(word: str) -> Optional[str]:
    """The known word nearest to ``word`` (difflib ratio >= 0.6), or ``None`` (also for the
    :data:`NO_SUGGESTION` words, whose nearest spelling is the opposite look)."""
    import difflib

    if word.lower() in NO_SUGGESTION:
        return None
    known = sorted(set(SYNONYMS) | set(INTENSITY) | set(INTENSIFIERS) | set(LOOK_WORDS))
    found = difflib.get_close_matches(word.lower(), known, n=1, cutoff=0.6)
    return found[0] if found else None


def _phrase_candidates(name: str) -> List[Tuple[float, str]]:
    strong = STRONG_WORD.get(name, "strong")
    word = name.replace("_", " ")
    out = []
    for mod in ("faint", "light", "moderate", "", strong, f"very {strong}", f"extremely {strong}"):
        text = f"{mod} {word}".strip()
        out.append((dict((lk.name, lk.strength) for lk in parse_prompt(text))[name], text))
    return out


def look_phrase(name: str, strength: float) -> str:
    """The phrase whose parsed strength is nearest to ``strength`` for look ``name``
    (``"dense fog"`` for fog at 1.6, ``"light rain"`` at 0.5, ``"fog"`` at 1.0); ``""``
    for strength <= 0.

    Raises:
        KeyError: unknown look name.
    """
    if name not in LOOK_ORDER:
        raise KeyError(f"unknown look {name!r}; one of {', '.join(LOOK_ORDER)}")
    if strength <= 0:
        return ""
    return min(_phrase_candidates(name), key=lambda c: abs(c[0] - float(strength)))[1]


def compose_prompt(strengths: Dict[str, float]) -> str:
    """A prompt from look strengths (look name -> strength, <= 0 = off), in
    :data:`LOOK_ORDER` with night last as ``"... at night"``; it parses back to the
    nearest representable strengths (:func:`look_phrase`)."""
    parts = [look_phrase(n, strengths.get(n, 0.0)) for n in LOOK_ORDER if n != "night"]
    text = ", ".join(p for p in parts if p)
    night = look_phrase("night", strengths.get("night", 0.0))
    if night:
        text = f"{text} at {night}" if text else night
    return text


def vocabulary() -> Dict[str, List[str]]:
    """The understood words, grouped (for UIs and error messages)."""
    return {
        "looks": list(LOOK_ORDER),
        "synonyms": sorted(SYNONYMS),
        "intensity": sorted(INTENSITY) + sorted(INTENSIFIERS),
        "ignored": sorted(STOPWORDS),
    }
