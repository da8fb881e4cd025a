"""The HIGHLIGHT and SUMMARIZE cases of the differential suite (``stack_diff.py`` adds them).

Documents longer than 64 bytes are hashes in a hash table on Redis, whose field order is the
table's, so every long-document search names its fields with RETURN (RediSearch then answers them
in the order of its field list: RETURN's and FIELDS' names as given).
"""

from __future__ import annotations

BODY = ("The quick brown fox jumps over the lazy dog. Dogs are running in the park while the cats sleep on "
        "the warm sofa and nobody cares about the running of the dogs at all, truly.")
LONG = " ".join(f"word{i}" for i in range(60)) + " dog " + " ".join(f"w{i}" for i in range(40)) + " cats and dogs."


def cases(S, setup, Case) -> list:
    data = [setup("FT.CREATE", "h", "ON", "HASH", "PREFIX", "1", "h:", "SCHEMA", "title", "TEXT", "body", "TEXT",
                  "tag", "TAG", "n", "NUMERIC", "raw", "TEXT", "NOSTEM"),
            setup("HSET", "h:1", "title", "Running dogs, and cats!", "body", BODY, "tag", "red apple", "n", "12",
                  "raw", "dogs running"),
            setup("HSET", "h:2", "title", "Hello World", "body", "hello, hello   WORLD;\tworld-wide Hello.",
                  "tag", "y", "n", "7"),
            setup("HSET", "h:3", "title", "Long text", "body", LONG, "n", "3")]
    ret = ("RETURN", "4", "title", "body", "tag", "n")
    out = []

    def add(name, *steps):
        out.append(Case(name, [*data, *steps]))

    add("highlight",
        S("FT.SEARCH", "h", "dog", "HIGHLIGHT", *ret, norm="docs"),
        S("FT.SEARCH", "h", "running", "HIGHLIGHT", "RETURN", "2", "title", "raw"),
        S("FT.SEARCH", "h", "hello", "HIGHLIGHT", "TAGS", "[", "]"),
        S("FT.SEARCH", "h", "hello", "HIGHLIGHT", "FIELDS", "1", "title"),
        S("FT.SEARCH", "h", '"quick brown"', "HIGHLIGHT", "RETURN", "1", "body"),
        S("FT.SEARCH", "h", "qui*", "HIGHLIGHT", "RETURN", "1", "body"),
        S("FT.SEARCH", "h", "@title:dog", "HIGHLIGHT", *ret, norm="docs"),
        S("FT.SEARCH", "h", "dog cat", "HIGHLIGHT", *ret, norm="docs"),
        S("FT.SEARCH", "h", "dog|hello", "HIGHLIGHT", "TAGS", "<em>", "</em>", *ret, "SORTBY", "n"),
        S("FT.SEARCH", "h", "-hello", "HIGHLIGHT", "RETURN", "1", "title", "SORTBY", "n"),
        S("FT.SEARCH", "h", "dog", "HIGHLIGHT", "VERBATIM", *ret, norm="docs"),
        S("FT.SEARCH", "h", "dogs", "HIGHLIGHT", "VERBATIM", *ret, norm="docs"),
        S("FT.SEARCH", "h", "dog", "HIGHLIGHT", "NOCONTENT", norm="docs"),
        S("FT.SEARCH", "h", "dog", "HIGHLIGHT", "FIELDS", "1", "title", "RETURN", "2", "body", "title"),
        S("FT.SEARCH", "h", "dog", "HIGHLIGHT", "FIELDS", "1", "title", "RETURN", "3", "title", "AS", "t"),
        S("FT.SEARCH", "h", "@tag:{y}", "HIGHLIGHT"),
        S("FT.SEARCH", "h", "world", "HIGHLIGHT", "WITHSCORES", "SCORER", "TFIDF"),
        S("FT.SEARCH", "h", "nothinghere", "HIGHLIGHT"))
    add("summarize",
        S("FT.SEARCH", "h", "dog", "SUMMARIZE", *ret, "SORTBY", "n"),
        S("FT.SEARCH", "h", "dog", "SUMMARIZE", "HIGHLIGHT", *ret, "SORTBY", "n"),
        S("FT.SEARCH", "h", "dog", "SUMMARIZE", "FRAGS", "1", "LEN", "5", *ret, "SORTBY", "n"),
        S("FT.SEARCH", "h", "dog", "SUMMARIZE", "FRAGS", "2", "LEN", "3", "SEPARATOR", "|", *ret, "SORTBY", "n"),
        S("FT.SEARCH", "h", "hello", "SUMMARIZE", "LEN", "2"),
        S("FT.SEARCH", "h", "world", "HIGHLIGHT", "SUMMARIZE", "LEN", "3"),
        S("FT.SEARCH", "h", "dog", "SUMMARIZE", "FRAGS", "0", *ret, "SORTBY", "n"),
        S("FT.SEARCH", "h", "dog", "SUMMARIZE", "LEN", "0", *ret, "SORTBY", "n"),
        S("FT.SEARCH", "h", "dog", "SUMMARIZE", "FIELDS", "1", "title", "HIGHLIGHT", "FIELDS", "1", "body",
          *ret, "SORTBY", "n"),
        S("FT.SEARCH", "h", "dog", "SUMMARIZE", "FIELDS", "1", "title", "HIGHLIGHT", *ret, "SORTBY", "n"),
        S("FT.SEARCH", "h", "cats", "SUMMARIZE", "FRAGS", "1", "LEN", "4", "HIGHLIGHT", *ret, "SORTBY", "n"),
        S("FT.SEARCH", "h", "long", "SUMMARIZE", "LEN", "3", *ret))
    add("highlight_errors",
        S("FT.SEARCH", "h", "dog", "HIGHLIGHT", "FIELDS", "1", "nosuch"),
        S("FT.SEARCH", "h", "dog", "HIGHLIGHT", "FIELDS", "x", "title"),
        S("FT.SEARCH", "h", "dog", "HIGHLIGHT", "FIELDS", "3", "title"),
        S("FT.SEARCH", "h", "dog", "HIGHLIGHT", "FIELDS"),
        S("FT.SEARCH", "h", "dog", "HIGHLIGHT", "TAGS", "a"),
        S("FT.SEARCH", "h", "dog", "HIGHLIGHT", "TAGS"),
        S("FT.SEARCH", "h", "dog", "SUMMARIZE", "FRAGS", "x"),
        S("FT.SEARCH", "h", "dog", "SUMMARIZE", "FRAGS", "-2"),
        S("FT.SEARCH", "h", "dog", "SUMMARIZE", "FRAGS", "1.5"),
        S("FT.SEARCH", "h", "dog", "SUMMARIZE", "LEN", "-1"),
        S("FT.SEARCH", "h", "dog", "SUMMARIZE", "LEN"),
        S("FT.SEARCH", "h", "dog", "SUMMARIZE", "SEPARATOR"),
        S("FT.SEARCH", "h", "dog", "SUMMARIZE", "FIELDS", "2", "title"))
    out.append(Case("highlight_json", [
        setup("FT.CREATE", "j", "ON", "JSON", "PREFIX", "1", "j:", "SCHEMA", "$.title", "AS", "title", "TEXT",
              "$.tags", "AS", "tags", "TAG", "$.n", "AS", "n", "NUMERIC"),
        setup("JSON.SET", "j:1", "$", '{"title":"Running dogs, and cats!","tags":"a,b","n":12}'),
        S("FT.SEARCH", "j", "dog", "HIGHLIGHT"),
        S("FT.SEARCH", "j", "dog", "SUMMARIZE"),
        S("FT.SEARCH", "j", "dog", "HIGHLIGHT", "RETURN", "1", "title"),
        S("FT.SEARCH", "j", "dog", "SUMMARIZE", "RETURN", "3", "title", "tags", "n"),
        S("FT.SEARCH", "j", "dog", "SUMMARIZE", "HIGHLIGHT", "TAGS", "*", "*", "RETURN", "1", "title"),
        S("FT.SEARCH", "j", "dog", "HIGHLIGHT", "RETURN", "1", "$.title"),
        S("FT.SEARCH", "j", "dog", "HIGHLIGHT", "FIELDS", "1", "title")]))
    filler = " ".join(f"f{i}" for i in range(12))
    scored = (f"rare word here {filler} common thing {filler} common again rare {filler} common {filler} "
              f"rare common together {filler} thing alone {filler} the end")
    out.append(Case("summarize_scores", [
        setup("FT.CREATE", "s", "ON", "HASH", "PREFIX", "1", "s:", "SCHEMA", "t", "TEXT"),
        setup("HSET", "s:1", "t", scored),
        *[setup("HSET", f"s:{i}", "t", f"common thing {i}") for i in range(2, 9)],
        setup("HSET", "s:9", "t", "Über straße ÉCOLE naïve café, l'été -- x.y.z foo_bar C++ e-mail 3.14 v2"),
        S("FT.SEARCH", "s", "rare|common|thing", "SUMMARIZE", "FRAGS", "2", "LEN", "4", "HIGHLIGHT",
          "RETURN", "1", "t", "SORTBY", "t"),
        S("FT.SEARCH", "s", "rare|common|thing", "SUMMARIZE", "FRAGS", "3", "LEN", "6", "RETURN", "1", "t",
          "SORTBY", "t"),
        S("FT.SEARCH", "s", "common", "SUMMARIZE", "FRAGS", "1", "LEN", "2", "RETURN", "1", "t", "SORTBY", "t"),
        S("FT.SEARCH", "s", "café|été|mail|foo_bar|3", "HIGHLIGHT", "RETURN", "1", "t", norm="docs"),
        S("FT.SEARCH", "s", "naïve", "SUMMARIZE", "LEN", "2", "HIGHLIGHT", "RETURN", "1", "t"),
        S("FT.SEARCH", "s", "@t:(x y)", "HIGHLIGHT", "RETURN", "1", "t"),
        S("FT.SEARCH", "s", "%cafe%", "HIGHLIGHT", "RETURN", "1", "t"),
        S("FT.SEARCH", "s", "*ail", "HIGHLIGHT", "RETURN", "1", "t")]))
    out.append(Case("highlight_no_offsets", [
        setup("FT.CREATE", "a", "ON", "HASH", "PREFIX", "1", "a:", "NOOFFSETS", "SCHEMA", "txt", "TEXT"),
        setup("FT.CREATE", "b", "ON", "HASH", "PREFIX", "1", "b:", "NOHL", "SCHEMA", "txt", "TEXT"),
        setup("HSET", "a:1", "txt", "foo bar"), setup("HSET", "b:1", "txt", "foo bar"),
        S("FT.SEARCH", "a", "foo", "SUMMARIZE", "FIELDS", "1", "txt"), S("FT.SEARCH", "a", "foo", "HIGHLIGHT"),
        S("FT.SEARCH", "b", "foo", "SUMMARIZE"), S("FT.SEARCH", "b", "nomatch", "HIGHLIGHT"),
        S("FT.SEARCH", "b", "foo")]))
    out.append(Case("highlight_chinese", [
        setup("FT.CREATE", "c", "ON", "HASH", "PREFIX", "1", "c:", "LANGUAGE", "chinese", "SCHEMA", "t", "TEXT"),
        setup("HSET", "c:1", "t", "我爱北京天安门，天安门上太阳升。Hello world"),
        S("FT.SEARCH", "c", "北京", "SUMMARIZE", "LEN", "2", "HIGHLIGHT"),
        S("FT.SEARCH", "c", "hello", "HIGHLIGHT"),
        S("FT.SEARCH", "c", "天安门", "HIGHLIGHT")]))
    return out
