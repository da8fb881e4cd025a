"""The FT.SUG* cases of the differential suite (``stack_diff.py`` adds them to its cases).

Suggestion replies depend on RediSearch's trie and heap down to the order of equal scores, so
besides the hand-written cases a seeded random sequence of adds (scores with many ties, INCR,
payloads), deletes and lookups (prefix, FUZZY, MAX, WITHSCORES, WITHPAYLOADS) is compared step by
step. TRIM is left out: RediSearch 2.10's trimming frees entries its reply still uses and crashes
the server a few commands later.
"""

from __future__ import annotations

import random


def cases(S, setup, Case) -> list:
    out = []

    def add(name, *steps):
        out.append(Case(name, list(steps)))

    add("suggest_basic",
        S("FT.SUGADD", "s", "hello world", "1"), S("FT.SUGADD", "s", "hello", "2", "PAYLOAD", "pl"),
        S("FT.SUGADD", "s", "help me", "3"), S("FT.SUGADD", "s", "hello", "1", "INCR"), S("FT.SUGLEN", "s"),
        S("FT.SUGGET", "s", "hel"), S("FT.SUGGET", "s", "hel", "WITHSCORES", "WITHPAYLOADS"),
        S("FT.SUGGET", "s", "hel", "WITHSCORES", "MAX", "2"), S("FT.SUGGET", "s", "helo", "FUZZY", "WITHSCORES"),
        S("FT.SUGGET", "s", "HEL"), S("FT.SUGGET", "s", ""), S("FT.SUGGET", "s", "zzz"), S("TYPE", "s"),
        S("FT.SUGDEL", "s", "hello"), S("FT.SUGDEL", "s", "hello"), S("FT.SUGLEN", "s"),
        S("FT.SUGLEN", "nokey"), S("FT.SUGGET", "nokey", "a"), S("FT.SUGDEL", "nokey", "a"),
        S("FT.SUGADD", "z", "abc", "0"), S("EXISTS", "z"), S("FT.SUGADD", "z", "0x10", "0x10"),
        S("FT.SUGADD", "z", "t", "inf"), S("FT.SUGGET", "z", "", "WITHSCORES"),
        S("FT.SUGADD", "k", "Ünïcödé", "1"), S("FT.SUGGET", "k", "ÜNÏ", "WITHSCORES"),
        S("FT.SUGGET", "k", "ünïcödé", "WITHSCORES"), S("FT.SUGDEL", "k", "ünïcödé"),
        S("FT.SUGADD", "k", "Straße", "1"), S("FT.SUGGET", "k", "STRAß"), S("FT.SUGGET", "k", "STRASSE"),
        S("FT.SUGADD", "e", "hello", "1"), S("FT.SUGADD", "e", "Hello", "2"), S("FT.SUGADD", "e", "helLO", "2"),
        S("FT.SUGADD", "e", "hellx", "2"), S("FT.SUGGET", "e", "hello", "WITHSCORES"),
        S("FT.SUGGET", "e", "hello", "WITHSCORES", "FUZZY"))
    add("suggest_scores_limits",
        S("FT.SUGADD", "n", "w", "-100"), S("FT.SUGGET", "n", "w", "WITHSCORES"),
        S("FT.SUGADD", "n2", "w", "-1e10"), S("FT.SUGGET", "n2", "w", "WITHSCORES"),
        S("FT.SUGADD", "n3", "ab", "-3"), S("FT.SUGADD", "n3", "ac", "-1e30"), S("FT.SUGGET", "n3", "a", "WITHSCORES"),
        S("FT.SUGADD", "x", "x", "1e300"), S("FT.SUGADD", "x", "y", "1e39"), S("FT.SUGADD", "x", "v", "0.1"),
        S("FT.SUGGET", "x", "v", "WITHSCORES", "FUZZY"), S("FT.SUGGET", "x", "vv", "WITHSCORES", "FUZZY"),
        S("FT.SUGADD", "m", "a1", "1"), S("FT.SUGADD", "m", "a2", "1"), S("FT.SUGADD", "m", "a3", "1"),
        S("FT.SUGADD", "m", "a4", "1"), S("FT.SUGGET", "m", "a", "MAX", "1.5"), S("FT.SUGGET", "m", "a", "MAX", "2.9"),
        S("FT.SUGGET", "m", "a", "MAX", "1e1"), S("FT.SUGGET", "m", "a", "MAX", "+2"),
        S("FT.SUGGET", "m", "a" * 99), S("FT.SUGADD", "m", "a" * 120, "1"), S("FT.SUGGET", "m", "a", "WITHSCORES"),
        S("FT.SUGADD", "m", "a" * 600, "1"))
    add("suggest_errors",
        setup("SET", "str", "x"), setup("FT.SUGADD", "s", "abc", "1"),
        S("FT.SUGADD", "s", "a", "notnum"), S("FT.SUGADD", "s", "a", "nan"), S("FT.SUGADD", "s", "a", "1e400"),
        S("FT.SUGADD", "s", "a", " 1"), S("FT.SUGADD", "s", "a", "1", "BAD"), S("FT.SUGADD", "s", "a", "1", "PAYLOAD"),
        S("FT.SUGADD", "s", "a", "1", "PAYLOAD", "x", "PAYLOAD", "y"), S("FT.SUGADD", "s", "a"),
        S("FT.SUGGET", "s", "a", "MAX", "0"), S("FT.SUGGET", "s", "a", "MAX", "-1"), S("FT.SUGGET", "s", "a", "MAX", "x"),
        S("FT.SUGGET", "s", "a", "MAX", " 2"), S("FT.SUGGET", "s", "a", "MAX"), S("FT.SUGGET", "s", "a", "FOO"),
        S("FT.SUGGET", "s", "a" * 100), S("FT.SUGGET", "s", "é" * 100), S("FT.SUGGET", "s"),
        S("FT.SUGADD", "str", "a", "1"), S("FT.SUGADD", "str", "a", "x"), S("FT.SUGGET", "str", "a"),
        S("FT.SUGLEN", "str"), S("FT.SUGDEL", "str", "a"), S("FT.SUGLEN", "s", "x"), S("FT.SUGDEL", "s", "x", "y"),
        S("FT.SUGLEN", "s"))
    rng = random.Random(28)
    steps, words = [], []
    for i in range(400):
        roll = rng.random()
        word = "".join(rng.choice("abAé") for _ in range(rng.randint(1, 6)))
        if roll < 0.45:
            extra = rng.choice([(), ("INCR",), ("PAYLOAD", f"p{i}"), ("INCR", "PAYLOAD", "q")])
            steps.append(S("FT.SUGADD", "r", word, rng.choice(["1", "1", "2", "3", "0.5", "-1", "10"]), *extra))
            words.append(word)
        elif roll < 0.62 and words:
            steps.append(S("FT.SUGDEL", "r", rng.choice(words)))
        else:
            opts = rng.choice([(), ("FUZZY",), ("WITHSCORES",), ("FUZZY", "WITHSCORES", "WITHPAYLOADS"),
                               ("MAX", str(rng.randint(1, 20))), ("FUZZY", "MAX", str(rng.randint(1, 20)), "WITHSCORES")])
            steps.append(S("FT.SUGGET", "r", word[:rng.randint(0, 3)], *opts))
    steps.append(S("FT.SUGLEN", "r"))
    add("suggest_random", *steps)
    return out
