"""FT.SEARCH HIGHLIGHT and SUMMARIZE on Pion (RESP2 and RESP3): which tokens are tagged, the
fragments and their context, the options' errors. ``stack_diff_highlight.py`` compares the same
behaviour with Redis Stack; these pin it down without one."""

from __future__ import annotations

import pytest
import redis

from pion.vector import highlight

BODY = ("The quick brown fox jumps over the lazy dog. Dogs are running in the park while the cats sleep on "
        "the warm sofa and nobody cares about the running of the dogs at all, truly.")


def cmd(r, *args):
    return r.execute_command(*args)


def fields_of(reply, key: bytes) -> dict:
    """A result's fields by name, whatever the protocol."""
    if isinstance(reply, dict):
        for item in reply[b"results"]:
            if item[b"id"] == key:
                return dict(item[b"extra_attributes"])
        raise KeyError(key)
    i = reply.index(key)
    flat = reply[i + 1]
    return dict(zip(flat[::2], flat[1::2], strict=True))


@pytest.fixture
def docs(rr):
    cmd(rr, "FT.CREATE", "h", "ON", "HASH", "PREFIX", "1", "h:", "SCHEMA", "title", "TEXT", "body", "TEXT",
        "tag", "TAG", "n", "NUMERIC", "raw", "TEXT", "NOSTEM")
    rr.hset("h:1", mapping={"title": "Running dogs, and cats!", "body": BODY, "tag": "red apple", "n": "12",
                            "raw": "dogs running"})
    rr.hset("h:2", mapping={"title": "Hello World", "body": "hello, hello   WORLD;\tworld-wide Hello.", "n": "7"})
    return rr


def test_highlight_words_stems_and_case(docs):
    got = fields_of(cmd(docs, "FT.SEARCH", "h", "dog", "HIGHLIGHT"), b"h:1")
    assert got[b"title"] == b"Running <b>dogs</b>, and cats!"
    assert got[b"body"].startswith(b"The quick brown fox jumps over the lazy <b>dog</b>. <b>Dogs</b> are")
    assert got[b"body"].count(b"<b>") == 3
    assert got[b"tag"] == b"red apple" and got[b"n"] == b"12"  # not TEXT: as stored
    assert got[b"raw"] == b"dogs running"  # NOSTEM: `dogs` is not reached through the stem of `dog`


def test_highlight_keeps_the_text_byte_for_byte(docs):
    got = fields_of(cmd(docs, "FT.SEARCH", "h", "hello", "HIGHLIGHT", "TAGS", "[", "]"), b"h:2")
    assert got[b"body"] == b"[hello], [hello]   WORLD;\tworld-wide [Hello]."
    assert got[b"title"] == b"[Hello] World"


def test_highlight_verbatim_phrase_prefix_and_fields(docs):
    verbatim = fields_of(cmd(docs, "FT.SEARCH", "h", "dog", "HIGHLIGHT", "VERBATIM"), b"h:1")
    assert verbatim[b"title"] == b"Running dogs, and cats!" and verbatim[b"body"].count(b"<b>") == 1
    phrase = fields_of(cmd(docs, "FT.SEARCH", "h", '"quick brown"', "HIGHLIGHT", "RETURN", "1", "body"), b"h:1")
    assert phrase[b"body"].startswith(b"The <b>quick</b> <b>brown</b> fox")
    prefix = fields_of(cmd(docs, "FT.SEARCH", "h", "wor*", "HIGHLIGHT", "FIELDS", "1", "body"), b"h:2")
    assert prefix[b"body"] == b"hello, hello   <b>WORLD</b>;\t<b>world</b>-wide Hello."
    assert prefix[b"title"] == b"Hello World"  # FIELDS: only the body
    negated = fields_of(cmd(docs, "FT.SEARCH", "h", "-hello", "HIGHLIGHT"), b"h:1")
    assert b"<b>" not in negated[b"title"] + negated[b"body"]


def test_summarize_fragments_and_context(docs):
    got = fields_of(cmd(docs, "FT.SEARCH", "h", "dog", "SUMMARIZE", "HIGHLIGHT"), b"h:1")
    assert got[b"title"] == b"<b>dogs</b>, and cats... "
    assert got[b"body"] == (b"quick brown fox jumps over the lazy <b>dog</b>. <b>Dogs</b> are running in the park "
                            b"while the cats sleep on the warm... on the warm sofa and nobody cares about the "
                            b"running of the <b>dogs</b> at all, truly... ")
    assert got[b"tag"] == b"red apple"  # no match and HIGHLIGHT too: kept whole
    alone = fields_of(cmd(docs, "FT.SEARCH", "h", "dog", "SUMMARIZE"), b"h:1")
    assert alone[b"tag"] == b"red" and alone[b"n"] == b"1"  # SUMMARIZE alone: cut back to a separator
    small = fields_of(cmd(docs, "FT.SEARCH", "h", "dog", "SUMMARIZE", "FRAGS", "2", "LEN", "3", "SEPARATOR", "|",
                          "RETURN", "1", "body"), b"h:1")
    assert small[b"body"] == b"lazy dog. Dogs are|the dogs at|"
    one = fields_of(cmd(docs, "FT.SEARCH", "h", "dog", "SUMMARIZE", "FRAGS", "1", "LEN", "5",
                        "RETURN", "1", "body"), b"h:1")
    assert one[b"body"] == b"the lazy dog. Dogs are running... "
    spaces = fields_of(cmd(docs, "FT.SEARCH", "h", "world", "SUMMARIZE", "LEN", "3", "RETURN", "1", "body"), b"h:2")
    assert spaces[b"body"] == b"WORLD; world-wide... "  # whitespace runs folded inside fragments


def test_per_field_modes_and_field_order(docs):
    reply = cmd(docs, "FT.SEARCH", "h", "dog", "SUMMARIZE", "FIELDS", "1", "title", "HIGHLIGHT", "FIELDS", "1", "body",
                "RETURN", "3", "n", "body", "title")
    got = fields_of(reply, b"h:1")
    assert got[b"title"] == b"dogs, and cats... "
    assert got[b"body"].count(b"<b>") == 3 and not got[b"body"].endswith(b"... ")
    assert got[b"n"] == b"12"  # listed only in RETURN: neither option applies
    if docs.protocol_version == 2:  # RediSearch's field list order: FIELDS' and RETURN's names as given
        assert reply[2][::2] == [b"title", b"body", b"n"]


def test_nocontent_and_no_match(docs):
    reply = cmd(docs, "FT.SEARCH", "h", "dog", "HIGHLIGHT", "SUMMARIZE", "NOCONTENT")
    ids = [r[b"id"] for r in reply[b"results"]] if isinstance(reply, dict) else reply[1:]
    assert ids == [b"h:1"]
    got = fields_of(cmd(docs, "FT.SEARCH", "h", "@n:[7 7]", "HIGHLIGHT"), b"h:2")
    assert got[b"body"] == b"hello, hello   WORLD;\tworld-wide Hello."


def test_json_text_fields(rr):
    cmd(rr, "FT.CREATE", "j", "ON", "JSON", "PREFIX", "1", "j:", "SCHEMA", "$.title", "AS", "title", "TEXT",
        "$.tags", "AS", "tags", "TAG")
    cmd(rr, "JSON.SET", "j:1", "$", '{"title":"Running dogs, and cats!","tags":"a,b"}')
    got = fields_of(cmd(rr, "FT.SEARCH", "j", "dog", "HIGHLIGHT", "RETURN", "1", "title"), b"j:1")
    assert got == {b"title": b"Running <b>dogs</b>, and cats!"}
    got = fields_of(cmd(rr, "FT.SEARCH", "j", "dog", "HIGHLIGHT", "FIELDS", "1", "title", "RETURN", "2", "title",
                        "tags"), b"j:1")
    assert got == {b"title": b"Running <b>dogs</b>, and cats!", b"tags": b"a,b"}
    whole = fields_of(cmd(rr, "FT.SEARCH", "j", "dog", "SUMMARIZE"), b"j:1")
    assert whole[b"$"] == b'{"title":"Running dogs, and cats!","tags":"a,b"}'  # the document: not a string


@pytest.mark.parametrize("args, text", [
    (("HIGHLIGHT", "FIELDS", "1", "nosuch"), "No such property `nosuch`"),
    (("HIGHLIGHT", "FIELDS", "x", "title"), "Bad arguments for HIGHLIGHT"),
    (("HIGHLIGHT", "FIELDS", "3", "title"), "Bad arguments for HIGHLIGHT"),
    (("HIGHLIGHT", "TAGS", "a"), "Bad arguments for HIGHLIGHT"),
    (("SUMMARIZE", "FRAGS", "-2"), "Bad arguments for SUMMARIZE"),
    (("SUMMARIZE", "LEN", "1.5"), "Bad arguments for SUMMARIZE"),
    (("SUMMARIZE", "SEPARATOR"), "Bad arguments for SUMMARIZE"),
    (("HIGHLIGHT", "RETURN", "1", "nosuch"), "Property `nosuch` is not in schema"),
])
def test_errors(docs, args, text):
    with pytest.raises(redis.ResponseError, match=text.replace("`", ".")):
        cmd(docs, "FT.SEARCH", "h", "dog", *args)


@pytest.mark.parametrize("option", ["NOOFFSETS", "NOHL"])
def test_index_without_offsets_refuses(rr, option):
    cmd(rr, "FT.CREATE", "a", "ON", "HASH", "PREFIX", "1", "a:", option, "SCHEMA", "txt", "TEXT")
    rr.hset("a:1", "txt", "foo bar")
    for opt in ("HIGHLIGHT", "SUMMARIZE"):
        with pytest.raises(redis.ResponseError, match="NOOFSETS was specified at index level"):
            cmd(rr, "FT.SEARCH", "a", "foo", opt)
    assert cmd(rr, "FT.SEARCH", "a", "foo", "NOCONTENT") in ([1, b"a:1"], {
        b"attributes": [], b"format": b"STRING", b"results": [{b"id": b"a:1", b"values": []}],
        b"total_results": 1, b"warning": []})


def test_fragmenter_units():
    frag = highlight.Fragment(start=4, end=7, last_pos=1, total_tokens=1, matches=1, locs=[(4, 7)])
    raw = b"one two three four"
    assert highlight.highlight_whole(raw, [frag], (b"<", b">")) == b"one <two> three four"
    assert highlight.trim(b"red apple", highlight.FieldSettings(mode=highlight.SUMMARIZE)) == b"red"
    assert highlight.trim(b"12", highlight.FieldSettings(mode=highlight.SUMMARIZE)) == b"1"
    assert [w for _, _, w in highlight.tokens(b"a\\,b c-d the", frozenset({"the"}))] == ["a,b", "c", "d"]
