"""The table ``pion demo`` prints: four TTFT rows, whether each warm answer equals the cold one, the answer."""

from __future__ import annotations

LABELS = [("cold", "cold: plain prefill, no cache"), ("same", "warm: same process"),
          ("process", "warm: separate process"), ("crash", "warm: after kill -9 + restart")]


def answer_cell(key: str, answers: dict) -> str:
    """``-`` for cold; else whether this path's greedy answer equals the cold one token for token."""
    cold, tokens = answers["cold"], answers.get(key)
    if key == "cold":
        return f"{len(cold)} tokens"
    if tokens is None:
        return "-"
    if tokens == cold:
        return "identical"
    same = next((i for i, (a, b) in enumerate(zip(tokens, cold, strict=False)) if a != b), min(len(tokens), len(cold)))
    return f"DIFFERENT from token {same}"


def print_report(args, loaded, pc, prompt, rows: dict, answers: dict, logit_diff: float, stop=()) -> None:
    prefix, suffix, question = prompt
    cold = rows["cold"]["ms"]
    codec = ",".join(sorted(set(pc.schema["k"]) | set(pc.schema["v"])))
    print()
    print(f"Pion demo: {loaded.name} ({args.runtime}, K/V {pc.adapter.layout.dtype}), "
          f"{len(prefix):,}-token prefix + {len(suffix)}-token question, codec {args.vquant} ({codec})")
    print(f"{'path':<36}{'TTFT (median of ' + str(args.runs) + ')':>21}{'speed-up':>10}  {'hit':<5}answer vs cold")
    for key, label in LABELS:
        row = rows.get(key)
        if row is None:
            print(f"{label:<36}  skipped (--url: the demo only kills a server it started)")
            continue
        hit = "-" if key == "cold" else ("yes" if row["all_hits"] else "NO")
        hit += "" if row["same_first"] else " (first token differs from cold!)"
        print(f"{label:<36}{row['ms']:>18,.1f} ms{cold / row['ms']:>9.1f}x  {hit:<5}{answer_cell(key, answers)}")
    print(f"max |logit difference| warm vs cold at the first answer token: {logit_diff:.2e}")
    if "restart_ms" in rows:
        print(f"server restart after kill -9: {rows['restart_ms']:,.0f} ms; stored prefix: "
              f"{pc.stats()['bytes_fetched'] // max(1, pc.stats()['hits']) / 1e6:,.1f} MB fetched per hit")
    lane = ("local: the server's V.EXPORT file, mapped" if pc.local_lane
            else "socket: the rows over the connection")
    print(f"hits in this process: {pc.stats()['local_hits']} of {pc.stats()['hits']} through the local lane "
          f"(lane now {lane})")
    tokens = answers["same"]
    if question is None:
        print(f"continuation text: {loaded.decode(tokens)!r}")
        if hasattr(loaded.tokenizer, "pion_fingerprint"):
            print("(builtin:random has random weights: its text is meaningless; the default model is the real SmolLM2)")
        return
    print(f"question: {question}")
    text = loaded.decode([t for t in tokens if t not in stop]).strip()
    print(f"answer: {text}" + ("" if tokens and tokens[-1] in stop else " [...]"))
