"""``pion.semantic.verify``: each category refuses the question that means something else and accepts
the paraphrase (both directions, so a check that refused everything, or nothing, fails here)."""

from __future__ import annotations

import numpy as np
import pytest

from pion.semantic import verify
from pion.semantic.verify import lexical

# (category, cached prompt, a lookup that must be refused, a paraphrase that must be accepted)
CASES = [
    ("numbers", "What is 2 + 2?", "What is 2 + 3?", "what's two plus two"),
    ("numbers", "Is 17 a prime number?", "Is 27 a prime number?", "Is seventeen prime?"),
    ("numbers", "What year did World War II end?", "What year did World War I end?",
     "In which year did the Second World War end?"),
    ("numbers", "What is 15% of 80?", "What is 80% of 15?", "15 percent of 80"),
    ("units", "How do I lose 5 kg in a month?", "How do I lose 5 kg in a week?",
     "How can I lose five kilograms in one month?"),
    ("units", "How many ounces are in a cup?", "How many ounces are in a gallon?", "ounces in a cup"),
    ("negation", "How to make pancakes without eggs", "How to make pancakes with eggs", "egg-free pancake recipe"),
    ("negation", "Why is my Wi-Fi not working?", "Why is my Wi-Fi working so well?", "Why isn't my Wi-Fi working?"),
    ("comparison", "What is the largest planet in the solar system?", "What is the smallest planet in the solar system?",
     "biggest planet in the solar system"),
    ("comparison", "What is the longest river in the world?", "What is the widest river in the world?",
     "world's longest river"),
    ("comparison", "How do I find the maximum value in a NumPy array?",
     "How do I find the minimum value in a NumPy array?", "NumPy: find the max value of an array"),
    ("direction", "How do I upload a file to Google Drive?", "How do I download a file from Google Drive?",
     "Uploading a file to Google Drive"),
    ("direction", "How do I scroll up in tmux?", "How do I scroll down in tmux?", "tmux: how to scroll up"),
    ("order", "Convert 10 km to miles", "Convert 10 miles to km", "How many miles is 10 km?"),
    ("order", "Cheap flights from London to New York", "Cheap flights from New York to London",
     "inexpensive London to New York flights"),
    ("order", "How do I convert Fahrenheit to Celsius?", "How do I convert Celsius to Fahrenheit?",
     "fahrenheit to celsius conversion formula"),
    ("order", "How many ounces are in a cup?", "How many cups are in an ounce?", "How many ounces does one cup hold?"),
    ("order", "Is Python faster than Java?", "Is Java faster than Python?", "Does Python run faster than Java?"),
    ("order", "How do I get from the airport to downtown Seattle?", "How do I get from downtown Seattle to the airport?",
     "Getting to downtown Seattle from the airport"),
    ("time", "What's the weather forecast for Paris tomorrow?", "What's the weather forecast for Paris today?",
     "Weather in Paris tomorrow"),
    ("time", "Is the Louvre open on Tuesday?", "Is the Louvre open on Monday?", "Is the Louvre open on Tuesdays?"),
    ("time", "Is it going to snow in Chicago this weekend?", "Is it going to snow in Chicago next weekend?",
     "Will Chicago get snow this weekend?"),
    ("time", "How many days are there in February 2024?", "How many days are there in February 2023?",
     "How many days does February 2024 have?"),
    ("time", "What's the exchange rate from US dollars to euros?", "What was the exchange rate from US dollars to "
     "euros yesterday?", "Exchange rate from US dollars to euros today"),
    ("question", "Who wrote Pride and Prejudice?", "When was Pride and Prejudice written?",
     "Pride and Prejudice was written by whom?"),
    ("entity", "What is the capital of Australia?", "What is the capital of Austria?",
     "Which city is the capital of Australia?"),
    ("entity", "Translate 'good morning' into French", "Translate 'good night' into French",
     "How do you say 'good morning' in French?"),
    ("entity", "How do I open a file in python?", "How do I open a file in java?", "python open a file"),
    ("entity", "When does daylight saving time start in the US?", "When does daylight saving time start in the UK?",
     "When does DST start in the US?"),
    ("operator", "When does the store on Main Street close?", "When does the store on Main Street open?",
     "closing time of the store on Main Street"),
    ("operator", "How long should I cook raw chicken breast in the oven?",
     "How long should I reheat cooked chicken breast in the oven?", "Oven cooking time for a raw chicken breast"),
    ("comparison", "How do I sort a list in descending order in Python?", "How do I sort a list in ascending order in "
     "Python?", "Python: sort a list in descending order"),
    ("operator", "What should I eat before a workout?", "What should I eat after a workout?",
     "What's good to eat before a workout?"),
    ("operator", "Should I buy Tesla stock now?", "Should I sell Tesla stock now?", "Is now a good time to buy Tesla stock?"),
    ("operator", "How do I log out of Netflix on my TV?", "How do I log in to Netflix on my TV?",
     "How can I log out of Netflix on a TV?"),
    ("substitution", "Can dogs eat grapes?", "Can dogs eat cherries?", "Can dogs safely eat grapes?"),
    ("substitution", "How long should I cook a chicken breast in the oven?",
     "How long should I cook a chicken breast in the microwave?", "How long should a chicken breast cook in the oven?"),
]


@pytest.mark.parametrize("category,cached,wrong,paraphrase", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_refuses_the_other_question_and_accepts_the_paraphrase(category, cached, wrong, paraphrase):
    refused = lexical(wrong, cached)
    assert not refused.ok and refused.category in (category, "substitution" if category == "entity" else category), \
        refused
    assert refused.reason  # the reason says what differs
    assert lexical(paraphrase, cached).ok, lexical(paraphrase, cached).text()
    # the check is symmetric in what it refuses: the cached prompt looked up against the other question
    assert not lexical(cached, wrong).ok


def test_the_reason_names_what_differs():
    assert lexical("Convert 10 miles to km", "Convert 10 km to miles").text() == \
        "order: 'km' is the target in the query but the source in the cached prompt"
    assert lexical("What is 2 + 3?", "What is 2 + 2?").text() == "numbers: the query has 2, 3, the cached prompt 2, 2"
    assert "tomorrow" in lexical("weather in Paris tomorrow", "weather in Paris today").reason
    assert lexical("same text", "same text").text() == "verified"


def test_one_sided_words_are_not_conflicts():
    # a paraphrase drops and adds ordinary words freely; only meaning-carrying ones must agree
    assert lexical("What's the best way to learn Spanish?", "How should I learn Spanish?").ok
    assert lexical("Is a kilogram heavier than a pound?", "Does a kilogram weigh more than a pound?").ok
    assert lexical("How far is the Moon from the Earth?", "How many km away is the Moon from Earth?").ok


def test_one_sided_times_and_entities_refuse_but_now_is_the_default():
    assert not lexical("weather in Paris tomorrow", "weather in Paris").ok
    assert lexical("exchange rate from dollars to euros today", "exchange rate from dollars to euros").ok
    assert not lexical("How do I reset my Gmail password?", "How do I reset my password?").ok


def test_off_accepts_everything_and_a_bad_mode_is_an_error():
    assert verify.verify("Convert 10 miles to km", "Convert 10 km to miles", "off").ok
    with pytest.raises(ValueError):
        verify.verify("a", "b", "fuzzy")
    with pytest.raises(ValueError, match="embedding model"):
        verify.verify("Can cats eat grapes?", "Can dogs eat grapes?", "model")


def _fake_embed(groups: list[set[str]]):
    """Words in one group embed to one direction, every other word to its own: a model with known synonyms."""
    own: dict[str, int] = {}

    def embed(words: list[str]) -> np.ndarray:
        out = np.zeros((len(words), 256), dtype=np.float32)
        for row, word in enumerate(words):
            slot = next((i for i, g in enumerate(groups) if word in g), None)
            out[row, slot if slot is not None else own.setdefault(word, 10 + len(own))] = 1.0
        return out
    return embed


def test_model_mode_asks_the_model_only_about_a_substitution():
    embed = _fake_embed([{"shares", "stock"}])
    asked: list[list[str]] = []

    def counting(words):
        asked.append(words)
        return embed(words)

    # a synonym swap: refused by the lists, accepted once the model says the words are close
    shares, stock = "Should I buy Tesla shares for my retirement account?", "Should I buy Tesla stock for my retirement account?"
    assert not lexical(shares, stock).ok
    assert verify.verify(shares, stock, "model", counting).ok
    # a swap of unrelated words stays refused, with the model's number in the reason
    refused = verify.verify("Can cats eat grapes?", "Can dogs eat grapes?", "model", counting)
    assert not refused.ok and refused.category == "substitution" and "model" in refused.reason
    asked.clear()
    # the lexical checks still refuse first, and the model is not asked
    assert verify.verify("Convert 10 miles to km", "Convert 10 km to miles", "model", counting).category == "order"
    assert verify.verify("Which city is the capital of France?", "What is the capital of France?", "model", counting).ok
    assert asked == []


def test_model_mode_with_the_packaged_minilm():
    """The real model through the provider interface (the packaged all-MiniLM-L6-v2, no download)."""
    pytest.importorskip("all_minilm_l6_v2")
    pytest.importorskip("transformers")
    from pion.embedding.factory import make_provider
    from pion.embedding.providers import parse_spec

    provider = make_provider(parse_spec("minilm"))
    provider.start()
    try:
        car, automobile = "How much does a new car cost in Germany?", "How much does a new automobile cost in Germany?"
        assert not lexical(car, automobile).ok  # a word swapped: the lists cannot tell a synonym
        assert verify.verify(car, automobile, "model", provider.embed).ok
        sofa, jacket = "How do I clean a leather sofa at home?", "How do I clean a leather jacket at home?"
        refused = verify.verify(sofa, jacket, "model", provider.embed)
        assert not refused.ok and refused.category == "substitution" and "similarity" in refused.reason
    finally:
        provider.close()


def test_odd_and_long_input_is_verified_without_error():
    rng = np.random.default_rng(7)
    alphabet = list("abcXYZ 0123456789.,;:!?'\"()-+*/%$€°—\n\t\x00é漢字🙂") + ["n't", " to ", " from ", " than "]
    for _ in range(300):
        a = "".join(rng.choice(alphabet, size=int(rng.integers(0, 40))))
        b = "".join(rng.choice(alphabet, size=int(rng.integers(0, 40))))
        for mode in ("off", "lexical"):
            assert isinstance(verify.verify(a, b, mode).ok, bool)
    assert lexical("", "").ok and isinstance(lexical("", "What is 2 + 2?").ok, bool)
    # a very long text is read up to MAX_CHARS: quick, and the same beginning verifies as the same
    long_a = "Convert 10 km to miles " + "and so on " * 100_000
    long_b = "Convert 10 km to miles " + "and so on " * 100_001
    assert lexical(long_a, long_b).ok
    assert not lexical("Convert 10 miles to km " + "x " * 10_000, long_a).ok
