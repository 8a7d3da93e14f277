"""Pieces for tiny offline tokenizers of the test replicas (tests/test_controlnet.py,
tests/flux2_util.py)."""


def bytes_to_unicode() -> dict:
    """GPT-2/CLIP byte-level alphabet (byte -> printable unicode character)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + list(
        range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))
