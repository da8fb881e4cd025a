"""Real prompts shipped with Pion: the demo's support-agent system prompt and the fidelity set.

Why: cached prefixes in real use are system prompts, few-shot blocks and retrieved passages,
and a codec's error only means something on text like that (and a real model). The texts are
package data, so the demo and ``benchmarks/bench_fidelity.py`` need nothing from outside.

- ``support_agent.md``: a ~2,190-token customer-support persona with policies (the demo's
  cached prefix), asked ``DEMO_QUESTION``;
- ``fidelity/*.txt``: 21 prompts, each a ``### system`` block (the cached prefix) and a
  ``### user`` block: 6 system prompts, 7 few-shot blocks, 8 retrieval passages.

``chat_parts`` splits a conversation into the token ids of the cacheable system turn and of the
rest (user turn and the assistant header), with the tokenizer's own chat template.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

DEMO_QUESTION = "Can I return a jacket I bought two weeks ago? I have not worn it."


@dataclass(frozen=True)
class Prompt:
    name: str
    kind: str  # "system", "fewshot" or "rag"
    system: str
    user: str


def _text(*parts: str) -> str:
    return resources.files(__name__).joinpath(*parts).read_text(encoding="utf-8")


def support_agent_prompt() -> str:
    """The demo's system prompt (Harbor & Pine's support assistant and its policies)."""
    return _text("support_agent.md").strip()


def parse_prompt(name: str, text: str) -> Prompt:
    """A ``### system`` / ``### user`` file as a ``Prompt`` (ValueError naming what is missing)."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("### "):
            current = line[4:].strip()
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    missing = {"system", "user"} - set(sections)
    if missing:
        raise ValueError(f"prompt {name}: no ### {' / ### '.join(sorted(missing))} section")
    kind = name.split("-", 2)[1] if name.count("-") >= 2 else "system"
    return Prompt(name, kind, "\n".join(sections["system"]).strip(), "\n".join(sections["user"]).strip())


def fidelity_prompts(include_demo: bool = True) -> list[Prompt]:
    """The fidelity set in file order, plus (``include_demo``) the demo's long system prompt."""
    folder = resources.files(__name__).joinpath("fidelity")
    names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".txt"))
    prompts = [parse_prompt(n[:-4], _text("fidelity", n)) for n in names]
    if include_demo:
        prompts.append(Prompt("22-system-support-agent-full", "system", support_agent_prompt(), DEMO_QUESTION))
    return prompts


def chat_parts(tokenizer, system: str, user: str) -> tuple[list[int], list[int]]:
    """``(prefix_ids, suffix_ids)``: the system turn, then the user turn and the assistant header.

    Both come from the tokenizer's chat template; each part is tokenized on its own, so the
    cold run (``prefix + suffix``) and the warm run (cached prefix, then suffix) see the same
    ids. A tokenizer without a chat template gets a plain "System/User/Assistant" layout."""
    template = getattr(tokenizer, "chat_template", None)
    if template:
        turns = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        head = tokenizer.apply_chat_template(turns[:1], tokenize=False)
        full = tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
        if not full.startswith(head):
            raise ValueError("the chat template does not render the system turn as a prefix of the conversation")
        return (list(tokenizer.encode(head, add_special_tokens=False)),
                list(tokenizer.encode(full[len(head):], add_special_tokens=False)))
    if hasattr(tokenizer, "pion_fingerprint"):  # the built-in byte tokenizer
        return tokenizer.encode(f"System: {system}\n"), tokenizer.encode(f"User: {user}\nAssistant:", add_bos=False)
    prefix = list(tokenizer.encode(f"System: {system}\n", add_special_tokens=True))
    return prefix, list(tokenizer.encode(f"User: {user}\nAssistant:", add_special_tokens=False))


def stop_ids(tokenizer) -> set[int]:
    """Token ids that end an answer (EOS and, for chat models, the end-of-turn token)."""
    ids = set()
    eos = getattr(tokenizer, "eos_token_id", None)
    for value in eos if isinstance(eos, list | tuple) else [eos]:
        if isinstance(value, int):
            ids.add(value)
    convert = getattr(tokenizer, "convert_tokens_to_ids", None)
    unk = getattr(tokenizer, "unk_token_id", None)
    for name in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>"):
        if convert is not None:
            value = convert(name)
            if isinstance(value, int) and value != unk:
                ids.add(value)
    return ids
