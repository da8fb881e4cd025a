"""``pion mcp`` from real MCP client sessions (the official SDK's ClientSession) over stdio and
streamable HTTP: every tool listed and called, the official memory server's argument schemas and
semantics, agent-memory-server-shaped results, errors as tool errors; memories survive kill -9 of
the Pion server; tenants' memories are their own."""

from __future__ import annotations

import asyncio
import json

from tests.mcp.conftest import call, call_error, http_server, http_session, stdio_session
from tests.support.servers import ProcessServer

GRAPH_TOOLS = {"create_entities", "create_relations", "add_observations", "delete_entities", "delete_observations",
               "delete_relations", "read_graph", "search_nodes", "open_nodes"}
MEMORY_TOOLS = {"create_long_term_memories", "search_long_term_memory", "memory_prompt", "set_working_memory",
                "get_working_memory", "delete_long_term_memories", "get_long_term_memory", "edit_long_term_memory",
                "get_current_datetime", "compact_long_term_memories"}
OTHER_TOOLS = {"semantic_cache_get", "semantic_cache_set", "kv_get", "kv_mget", "kv_set", "kv_delete", "kv_incr"}


async def exercise_graph(session) -> None:
    people = [{"name": "Benjamin", "entityType": "person", "observations": ["works at Acme as a welder"]},
              {"name": "Acme", "entityType": "company", "observations": ["makes anvils"]}]
    result = await session.call_tool("create_entities", {"entities": people})
    assert json.loads(result.content[0].text) == people  # the official text: JSON.stringify(.., null, 2)
    assert result.content[0].text == json.dumps(people, indent=2)
    assert result.structured_content == {"entities": people, "skipped": []}
    again = await session.call_tool("create_entities", {"entities": people[:1]})  # existing: skipped, said so
    assert again.structured_content == {"entities": [], "skipped": ["Benjamin"]}
    assert again.content[1].text.startswith("Skipped 1 entity that already exists: Benjamin.")
    relation = {"from": "Benjamin", "to": "Acme", "relationType": "works at"}
    assert (await call(session, "create_relations", {"relations": [relation, relation]}))["relations"] == [relation]
    assert (await call(session, "create_relations", {"relations": [relation]}))["relations"] == []
    assert "Entity with name Nobody not found" in await call_error(
        session, "create_relations", {"relations": [{"from": "Benjamin", "to": "Nobody", "relationType": "knows"}]})
    added = await call(session, "add_observations",
                       {"observations": [{"entityName": "Benjamin", "contents": ["has a beagle", "works at Acme as a welder"]}]})
    assert added == {"results": [{"entityName": "Benjamin", "addedObservations": ["has a beagle"]}]}
    assert "Entity with name Nobody not found" in await call_error(
        session, "add_observations", {"observations": [{"entityName": "Nobody", "contents": ["x"]}]})
    graph = await call(session, "read_graph")
    assert [e["name"] for e in graph["entities"]] == ["Benjamin", "Acme"] and graph["relations"] == [relation]
    assert graph["entities"][0]["observations"] == ["works at Acme as a welder", "has a beagle"]
    found = await call(session, "search_nodes", {"query": "beagle"})
    assert found["entities"][0]["name"] == "Benjamin" and found["relations"] == [relation]  # one end is enough
    both = await call(session, "open_nodes", {"names": ["Acme", "Benjamin", "Nobody"]})
    assert [e["name"] for e in both["entities"]] == ["Benjamin", "Acme"] and both["relations"] == [relation]
    assert (await call(session, "open_nodes", {"names": ["Acme"]}))["relations"] == [relation]
    assert "longer than 2048" in await call_error(session, "search_nodes", {"query": "x" * 2049})
    deleted = await call(session, "delete_observations",
                         {"deletions": [{"entityName": "Benjamin", "observations": ["has a beagle"]}]})
    assert deleted == {"success": True, "message": "Observations deleted successfully"}
    partly = await call(session, "delete_observations", {"deletions": [
        {"entityName": "Benjamin", "observations": ["never said"]}, {"entityName": "Nobody", "observations": ["x"]}]})
    assert partly["message"] == "Deleted 0 of 2 observations. Entities not found: Nobody"
    assert (await call(session, "open_nodes", {"names": ["Benjamin"]}))["entities"][0]["observations"] == \
        ["works at Acme as a welder"]
    assert (await call(session, "delete_relations", {"relations": [relation]}))["message"] == \
        "Relations deleted successfully"
    assert (await call(session, "delete_relations", {"relations": [relation]}))["message"] == \
        "Deleted 0 of 1 relations. The rest matched nothing."
    await call(session, "create_relations", {"relations": [relation]})
    assert (await call(session, "delete_entities", {"entityNames": ["Acme"]}))["message"] == \
        "Entities deleted successfully"
    assert (await call(session, "delete_entities", {"entityNames": ["Acme"]}))["message"] == \
        "Deleted 0 of 1 entities. Not found: Acme"
    graph = await call(session, "read_graph")
    assert [e["name"] for e in graph["entities"]] == ["Benjamin"] and graph["relations"] == []
    assert all(e["name"] != "Acme" for e in (await call(session, "search_nodes", {"query": "anvils"}))["entities"])


async def exercise_memory(session) -> None:
    now = await call(session, "get_current_datetime")
    assert now["iso_utc"].endswith("Z") and now["unix_ts"] > 1_700_000_000
    created = await call(session, "create_long_term_memories", {"memories": [
        {"text": "User prefers dark mode in every editor", "topics": ["ui", "preferences"], "user_id": "u1"},
        {"text": "User visited Lisbon in May", "memory_type": "episodic", "event_date": "2024-05-10T00:00:00Z",
         "session_id": "trip", "namespace": "travel"}]})
    assert created["status"] == "ok" and len(created["ids"]) == 2
    found = await call(session, "search_long_term_memory", {"text": "dark mode editor", "limit": 1})
    assert found["total"] == 1 and found["memories"][0]["text"] == "User prefers dark mode in every editor"
    assert found["memories"][0]["topics"] == ["ui", "preferences"] and 0 <= found["memories"][0]["dist"] <= 2
    assert (await call(session, "search_long_term_memory", {"text": "Lisbon", "namespace": {"eq": "travel"},
                                                           "event_date": {"gte": "2024-01-01T00:00:00Z"}}))["total"] == 1
    assert (await call(session, "search_long_term_memory", {"text": "mode", "topics": {"all": ["ui", "x"]}}))["total"] == 0
    assert (await call(session, "search_long_term_memory", {"text": "mode", "search_mode": "hybrid"}))["total"] == 2
    assert "distance_threshold is only supported" in await call_error(
        session, "search_long_term_memory", {"text": "x", "search_mode": "keyword", "distance_threshold": 0.3})
    memory_id = created["ids"][0]
    assert (await call(session, "get_long_term_memory", {"memory_id": memory_id}))["user_id"] == "u1"
    edited = await call(session, "edit_long_term_memory", {"memory_id": memory_id, "text": "User prefers light mode"})
    assert edited["text"] == "User prefers light mode" and edited["topics"] == ["ui", "preferences"]
    working = await call(session, "set_working_memory", {
        "session_id": "chat-1", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
        "context": "a greeting", "data": {"k": 1}, "memories": [{"text": "User's cat is called Tom"}]})
    assert working["session_id"] == "chat-1" and len(working["memories"]) == 1
    got = await call(session, "get_working_memory", {"session_id": "chat-1", "recent_messages_limit": 1})
    assert [m["content"] for m in got["messages"]] == ["hello"] and got["data"] == {"k": 1}
    assert (await call(session, "get_working_memory", {"session_id": "nope"}))["messages"] == []
    prompt = await call(session, "memory_prompt", {"query": "what is my cat called", "session_id": {"eq": "chat-1"}})
    texts = [m["content"]["text"] for m in prompt["messages"]]
    assert "a greeting" in texts[0] and texts[-1] == "what is my cat called"
    assert any("User's cat is called Tom" in t for t in texts)
    assert (await call(session, "delete_long_term_memories", {"memory_ids": [memory_id, "missing"]}))["deleted"] == 1
    assert "not found" in await call_error(session, "get_long_term_memory", {"memory_id": memory_id})


async def exercise_cache_and_keys(session) -> None:
    assert await call(session, "semantic_cache_get", {"query": "capital of france"}) == {"hit": False}
    assert (await call(session, "semantic_cache_set", {"query": "capital of france", "response": "Paris",
                                                      "tags": ["geo"]}))["status"] == "ok"
    hit = await call(session, "semantic_cache_get", {"query": "capital of france", "tags": ["geo"]})
    assert hit["hit"] and hit["response"] == "Paris" and hit["similarity"] == 1.0
    assert (await call(session, "semantic_cache_get", {"query": "capital of france", "threshold": 1.0,
                                                      "tags": ["other"]}))["hit"] is False
    assert (await call(session, "kv_set", {"key": "greeting", "value": "hello"}))["status"] == "ok"
    assert await call(session, "kv_get", {"key": "greeting"}) == "hello"
    assert await call(session, "kv_mget", {"keys": ["greeting", "missing"]}) == ["hello", None]
    assert (await call(session, "kv_incr", {"key": "n", "amount": 5}))["value"] == 5
    assert (await call(session, "kv_delete", {"keys": ["greeting", "n", "missing"]}))["deleted"] == 2


async def exercise_everything(session) -> None:
    names = {tool.name for tool in (await session.list_tools()).tools}
    assert names == GRAPH_TOOLS | MEMORY_TOOLS | OTHER_TOOLS
    schemas = {tool.name: tool.input_schema for tool in (await session.list_tools()).tools}
    relation = schemas["create_relations"]["properties"]["relations"]
    assert "Relation" in str(relation) and "relationType" in str(schemas["create_relations"])
    assert schemas["delete_entities"]["required"] == ["entityNames"]
    await exercise_graph(session)
    await exercise_memory(session)
    await exercise_cache_and_keys(session)


def test_every_tool_over_stdio(pion_url):
    async def main():
        async with stdio_session(pion_url) as session:
            await exercise_everything(session)

    asyncio.run(main())


def test_every_tool_over_streamable_http(pion_url):
    async def main(endpoint):
        async with http_session(endpoint) as session:
            await exercise_everything(session)
        async with http_session(endpoint) as session:  # a second client session sees the same memory
            assert (await call(session, "kv_get", {"key": "greeting"})) is None
            assert [e["name"] for e in (await call(session, "read_graph"))["entities"]] == ["Benjamin"]

    with http_server(pion_url) as endpoint:
        asyncio.run(main(endpoint))


def test_compaction_keeps_the_newest_of_duplicates_and_an_empty_text_lists_newest_first(pion_url):
    async def main():
        async with stdio_session(pion_url) as session:
            await call(session, "create_long_term_memories", {"memories": [
                {"id": "old", "text": "User likes  green tea", "user_id": "u"},
                {"id": "new", "text": "user likes green tea", "user_id": "u"},
                {"id": "other-user", "text": "user likes green tea", "user_id": "v"},
                {"id": "near", "text": "user likes green tea a lot", "user_id": "u"},
                {"id": "far", "text": "the invoice is due on friday", "user_id": "u"}]})
            listed = await call(session, "search_long_term_memory", {"text": "", "limit": 10})
            assert [m["id"] for m in listed["memories"]] == ["far", "near", "other-user", "new", "old"]
            only_hash = await call(session, "compact_long_term_memories", {"compact_semantic_duplicates": False})
            assert only_hash == {"status": "ok", "deleted": 1, "remaining": 4}  # "old": same text as "new"
            assert "cosine distance" in await call_error(session, "compact_long_term_memories",
                                                         {"vector_distance_threshold": 3})
            near = await call(session, "compact_long_term_memories", {"vector_distance_threshold": 0.5, "user_id": "u"})
            assert near["deleted"] == 1  # "new" is within 0.5 of the newer "near"; "other-user" is another user's
            left = await call(session, "search_long_term_memory", {"text": "", "limit": 10})
            assert sorted(m["id"] for m in left["memories"]) == ["far", "near", "other-user"]

    asyncio.run(main())


def test_a_bad_url_fails_fast_with_the_reason(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "pion.cli.main", "mcp", "--url", "pion://127.0.0.1:9"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "cannot use the Pion server at pion://127.0.0.1:9" in done.stderr


def test_memories_survive_kill9_of_the_pion_server(tmp_path):
    data = tmp_path / "data"
    pion = ProcessServer(data, "--embed-provider", "hash").start()
    url = f"pion://127.0.0.1:{pion.port}"

    async def write():
        async with stdio_session(url) as session:
            await call(session, "create_entities", {"entities": [
                {"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]}]})
            await call(session, "create_long_term_memories", {"memories": [{"text": "The launch code is tulip"}]})

    async def read():
        async with stdio_session(url) as session:
            graph = await call(session, "read_graph")
            found = await call(session, "search_long_term_memory", {"text": "launch code"})
            nodes = await call(session, "search_nodes", {"query": "first program"})
            return graph, found, nodes

    try:
        asyncio.run(write())
        pion.kill9()
        pion = ProcessServer(data, "--embed-provider", "hash", port=pion.port).start()
        graph, found, nodes = asyncio.run(read())
        assert graph["entities"][0]["observations"] == ["wrote the first program"]
        assert found["memories"][0]["text"] == "The launch code is tulip"
        assert nodes["entities"][0]["name"] == "Ada"
    finally:
        pion.stop()


def test_each_tenant_has_its_own_memories(make_server):
    srv = make_server(embed_provider="hash", requirepass="adm", tenants=("alice:apw", "bob:bpw"))

    async def main():
        async with stdio_session(f"pion://alice:apw@127.0.0.1:{srv.port}") as alice:
            await call(alice, "create_entities", {"entities": [
                {"name": "Secret", "entityType": "plan", "observations": ["alice's private plan"]}]})
            await call(alice, "create_long_term_memories", {"memories": [{"text": "alice's password hint"}]})
            await call(alice, "kv_set", {"key": "k", "value": "alice"})
        env = {"PION_USER": "bob", "PION_PASSWORD": "bpw"}  # credentials from the environment
        async with stdio_session(f"pion://127.0.0.1:{srv.port}", env=env) as bob:
            assert await call(bob, "read_graph") == {"entities": [], "relations": []}
            assert (await call(bob, "search_nodes", {"query": "private plan"}))["entities"] == []
            assert (await call(bob, "search_long_term_memory", {"text": "password hint"}))["total"] == 0
            assert await call(bob, "kv_get", {"key": "k"}) is None
            await call(bob, "create_entities", {"entities": [{"name": "Secret", "entityType": "bob's", "observations": []}]})
        async with stdio_session(f"pion://alice:apw@127.0.0.1:{srv.port}") as alice:
            assert (await call(alice, "read_graph"))["entities"][0]["entityType"] == "plan"

    asyncio.run(main())


def test_wrong_credentials_are_refused_at_start(make_server):
    import subprocess
    import sys

    srv = make_server(embed_provider="hash", requirepass="adm", tenants=("alice:apw",))
    done = subprocess.run([sys.executable, "-m", "pion.cli.main", "mcp", "--url",
                           f"pion://alice:wrong@127.0.0.1:{srv.port}"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "cannot use the Pion server at pion://alice:***@" in done.stderr, done.stderr
    assert "invalid username-password pair" in done.stderr and "wrong" not in done.stderr, done.stderr
