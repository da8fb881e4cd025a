"""A deterministic RAG corpus: fictional towns, one passage each, and questions about them.

Nothing is downloaded: names, facts and passages come from templates and a seeded generator,
so every machine builds the same corpus. Each passage states a town's facts (founder, year,
export, mayor, river, sister town) among neutral sentences about its streets and seasons, and
runs to about ``words`` words (some 256 SmolLM2 tokens at the default). All towns share the
templates, so the other passages in a prompt are real distractors: the model must find the
named town's passage, which is what composed chunks that never attended to each other make
hard. Questions need one passage (``hops=1``) or two (``hops=2``: the sister town's mayor,
stated only in the sister town's passage).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

SYLLABLES = ("bar", "vel", "dor", "mik", "sal", "tor", "wen", "qua", "lin", "bro", "fen", "gal", "hus",
             "kel", "mor", "nar", "pel", "rin", "sev", "tam", "ul", "vor", "yes", "zan")
GIVEN = ("Ada", "Bram", "Cora", "Dane", "Elin", "Finn", "Greta", "Hugo", "Ines", "Jonas", "Kira", "Lars",
         "Mila", "Nils", "Olga", "Per", "Rosa", "Sven", "Tova", "Ulf", "Vera", "Wim", "Yara", "Zeno")
EXPORTS = ("copper wire", "blue glass", "wool blankets", "salted fish", "oak barrels", "clay pipes",
           "linen sails", "goat cheese", "iron nails", "honey wax", "paper lanterns", "leather boots")
FILLER = (
    "The streets near the market are paved with grey stone and lined with narrow houses.",
    "In spring the hills around the town turn green and the roads fill with carts.",
    "Most families keep a small garden behind the house, with beans, onions and herbs.",
    "The old bridge was rebuilt twice after floods, and its arches are still admired.",
    "Visitors often remark on the bells of the town hall, which ring every quarter hour.",
    "Winters are long and dark, and the townspeople gather in the halls to sing.",
    "A weekly fair brings traders from the villages along the valley road.",
    "The school teaches reading, sums and the history of the province.",
    "Fishermen mend their nets on the quay in the early morning before the wind rises.",
    "An annual festival celebrates the first harvest with music and long tables of food.",
    "The town library holds maps, ledgers and letters from the founding families.",
    "Travellers rest at the inn by the gate, known for its soup and its quiet rooms.",
)


@dataclass(frozen=True)
class Town:
    name: str
    founder: str
    year: int
    export: str
    mayor: str
    river: str
    sister: str


@dataclass(frozen=True)
class Question:
    text: str
    answer: str
    #: the towns whose passages the answer needs
    needs: tuple[str, ...]
    hops: int


def _name(rng: random.Random, used: set[str]) -> str:
    while True:
        name = "".join(rng.choice(SYLLABLES) for _ in range(rng.choice((2, 3)))).capitalize()
        if name not in used and len(name) >= 5:
            used.add(name)
            return name


def towns(count: int = 24, seed: int = 19) -> list[Town]:
    rng = random.Random(seed)
    used: set[str] = set()
    names = [_name(rng, used) for _ in range(count)]
    rivers = [_name(rng, used) for _ in range(count)]
    people = [f"{rng.choice(GIVEN)} {_name(rng, used)}" for _ in range(2 * count)]
    sisters = names[1:] + names[:1]
    return [Town(names[i], people[2 * i], 1400 + rng.randrange(500), rng.choice(EXPORTS), people[2 * i + 1],
                 rivers[i], sisters[i]) for i in range(count)]


def passage(town: Town, words: int = 190, seed: int = 0) -> str:
    """The town's facts among neutral sentences, about ``words`` words."""
    rng = random.Random(f"{town.name}-{seed}")
    facts = [
        f"{town.name} is a small town on the river {town.river}.",
        f"It was founded in {town.year} by {town.founder}.",
        f"The main export of {town.name} is {town.export}.",
        f"The mayor of {town.name} is {town.mayor}.",
        f"The sister town of {town.name} is {town.sister}.",
    ]
    filler = list(FILLER)
    rng.shuffle(filler)
    sentences = [facts[0]]
    rest = facts[1:]
    while len(" ".join(sentences).split()) < words and (rest or filler):
        if rest and (not filler or rng.random() < 0.45):
            sentences.append(rest.pop(0))
        else:
            sentences.append(filler.pop())
    sentences.extend(rest)  # every fact is stated, whatever the length
    return " ".join(sentences)


def questions(all_towns: list[Town]) -> list[Question]:
    by_name = {t.name: t for t in all_towns}
    out = []
    for i, town in enumerate(all_towns):
        kind = i % 4
        if kind == 0:
            out.append(Question(f"Who is the mayor of {town.name}?", town.mayor, (town.name,), 1))
        elif kind == 1:
            out.append(Question(f"In which year was {town.name} founded?", str(town.year), (town.name,), 1))
        elif kind == 2:
            out.append(Question(f"What is the main export of {town.name}?", town.export, (town.name,), 1))
        else:
            sister = by_name[town.sister]
            out.append(Question(f"Who is the mayor of the sister town of {town.name}?", sister.mayor,
                                (town.name, sister.name), 2))
    return out


def context_for(question: Question, all_towns: list[Town], k: int, seed: int = 0) -> list[str]:
    """``k`` town names whose passages go into the prompt: the needed ones among distractors,
    in a deterministic shuffled order (so the answer is not always first or last)."""
    rng = random.Random(f"{question.text}-{k}-{seed}")
    others = [t.name for t in all_towns if t.name not in question.needs]
    rng.shuffle(others)
    names = list(question.needs[:k]) + others[: max(0, k - len(question.needs))]
    rng.shuffle(names)
    return names
