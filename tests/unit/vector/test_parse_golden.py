"""The parsers give the same trees, programs, results and errors as before they were rewritten
for speed (issue 27): each query of ``parse_corpus``'s seeded corpus (1,500 a family: FT queries
in DIALECT 1 and 2, APPLY/FILTER expressions, VSIM FILTER, JSONPath filters) is described and its
digest compared with the one recorded from the earlier parsers in ``parse_golden.json``."""

from __future__ import annotations

import json

import pytest

from tests.unit.vector import parse_corpus as pc

GOLDEN = json.loads(pc.GOLDEN.read_text())


@pytest.mark.parametrize("family", list(pc.FAMILIES))
def test_same_results_as_the_recorded_parsers(family):
    corpus, describe = pc.FAMILIES[family]
    queries = corpus()
    assert len(queries) == len(GOLDEN[family]) == pc.PER_FAMILY
    changed = []
    for query, recorded in zip(queries, GOLDEN[family], strict=True):
        got = describe(query)
        if pc.digest(got) != recorded:
            changed.append((query, got))
    assert not changed, f"{len(changed)} of {len(queries)} differ, e.g. {changed[:3]}"


def test_the_corpus_exercises_both_answers():
    # a corpus of only errors (or of no errors) would prove little: each family has plenty of both
    for family, (corpus, describe) in pc.FAMILIES.items():
        errors = sum(isinstance(describe(q), str) for q in corpus())
        assert pc.PER_FAMILY // 5 < errors < pc.PER_FAMILY * 4 // 5, family
