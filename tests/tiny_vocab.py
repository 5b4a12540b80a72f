"""The vocabularies of the tiny test models (tests/tiny_models.py): GPT-2 style byte-level BPE,
learnt from a short corpus. ``build_vocab(kind)`` gives a ``TinyVocab`` (tokens, token types,
merges, special ids and chat template) for ``"base"`` (320 tokens: 5 control tokens, the 256
bytes in byte order, 59 merges of English and code; ChatML template), ``"other"`` (300 tokens,
other specials, byte order and merges: incompatible with ``base``) or ``"small"`` (36 tokens for
sampling statistics). It writes no file and needs numpy only; the weights and the GGUF writing
are tests/tiny_models.py."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

# Training text for the BPE merges: plain English and a bit of Python, so that merges
# like "Ġthe" and "Ġdef" exist and ordinary prompts tokenize into multi-byte tokens.
_CORPUS_BASE = """\
hello world, the quick brown fox jumps over the lazy dog. the dog sleeps in the sun
and the fox runs into the forest. there is nothing in the world like a quiet morning.
once upon a time there was a small model that wanted to be fast. it read the
prompt, then it wrote the answer one token at a time, and the answer was good.
def main():
    for i in range(10):
        print("hello", i)
    return 0
the cat sat on the mat. the rain in spain stays mainly in the plain. 1 2 3 123 2024
"""


_CORPUS_OTHER = """\
SELECT name, value FROM table WHERE id = 42 ORDER BY name;
fn main() { let x = vec![1, 2, 3]; println!("{:?}", x); }
Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor.
"""


# GPT-2 pre-tokenizer, ASCII approximation (Python's re has no \p{L}); it only
# decides which merges get learnt, llama.cpp does the real splitting at run time.
_PRETOKENIZE = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")


_CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


TOKEN_NORMAL = 1  # gguf.TokenType.NORMAL
TOKEN_CONTROL = 3  # gguf.TokenType.CONTROL


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (what llama.cpp decodes)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


@dataclass(frozen=True)
class TinyVocab:
    """Everything that goes into the ``tokenizer.ggml.*`` metadata."""

    name: str
    tokens: tuple[str, ...]
    token_types: tuple[int, ...]
    merges: tuple[str, ...]
    bos_id: int
    eos_id: int
    pad_id: int
    add_bos: bool
    pre: str = "gpt-2"
    chat_template: str | None = None

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)

    @property
    def special_ids(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.token_types) if t != TOKEN_NORMAL)


def _train_bpe(corpus: str, n_merges: int) -> list[tuple[str, str]]:
    """Plain byte-level BPE training; ties broken by pair text so it is deterministic."""
    b2u = bytes_to_unicode()
    words = Counter(tuple(b2u[b] for b in w.encode("utf-8")) for w in _PRETOKENIZE.findall(corpus))
    merges: list[tuple[str, str]] = []
    for _ in range(n_merges):
        pairs: Counter[tuple[str, str]] = Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        merged: Counter[tuple[str, ...]] = Counter()
        for w, c in words.items():
            out: list[str] = []
            i = 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += c
        words = merged
    return merges


def _assemble(
    name: str,
    specials: list[str],
    base_tokens: list[str],
    merges: list[tuple[str, str]],
    *,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    chat_template: str | None,
) -> TinyVocab:
    tokens = list(specials) + list(base_tokens)
    seen = set(tokens)
    for a, b in merges:
        if a + b not in seen:  # two merges can spell the same string; keep one token
            tokens.append(a + b)
            seen.add(a + b)
    types = [TOKEN_CONTROL] * len(specials) + [TOKEN_NORMAL] * (len(tokens) - len(specials))
    return TinyVocab(
        name=name,
        tokens=tuple(tokens),
        token_types=tuple(types),
        merges=tuple(f"{a} {b}" for a, b in merges),
        bos_id=bos_id,
        eos_id=eos_id,
        pad_id=pad_id,
        add_bos=True,
        chat_template=chat_template,
    )


@lru_cache(maxsize=None)
def build_vocab(kind: str = "base") -> TinyVocab:
    """The vocabulary named ``kind``: ``"base"``, ``"other"`` or ``"small"`` (see module doc)."""
    b2u = bytes_to_unicode()
    if kind == "base":
        return _assemble(
            "base",
            ["<|pad|>", "<|bos|>", "<|eos|>", "<|im_start|>", "<|im_end|>"],
            [b2u[b] for b in range(256)],
            _train_bpe(_CORPUS_BASE, 59),
            bos_id=1,
            eos_id=2,
            pad_id=0,
            chat_template=_CHATML,
        )
    if kind == "other":
        # Bytes sorted by their printable character, not by byte value, so that even
        # the byte tokens sit at other ids than in "base".
        return _assemble(
            "other",
            ["<unk>", "<s>", "</s>", "<sep>", "<mask>"],
            sorted(b2u.values()),
            _train_bpe(_CORPUS_OTHER, 39),
            bos_id=1,
            eos_id=2,
            pad_id=0,
            chat_template=None,
        )
    if kind == "small":
        letters = [b2u[b] for b in b" \n"] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
        return _assemble(
            "small",
            ["<|pad|>", "<|bos|>", "<|eos|>", "<|im_start|>", "<|im_end|>"],
            letters,
            [("Ġ", "t"), ("h", "e"), ("Ġt", "he")],
            bos_id=1,
            eos_id=2,
            pad_id=0,
            chat_template=_CHATML,
        )
    raise ValueError(f"unknown tiny vocabulary {kind!r}: use 'base', 'other' or 'small'")
