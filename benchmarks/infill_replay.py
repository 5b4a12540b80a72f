"""Editing sessions replayed against ``edgespec serve`` and llama-server ``/infill`` (issue 35 item 5).

Three held-out sessions (``benchmarks/prompts/infill_sessions.py``: a Python module, a
JavaScript class and a Python config loader, each typed forward from the top, 10-13
requests at the cursor's pauses, chunks of sibling files as ``input_extra``) become
llama.vim's requests (``request_at``: its ``fim_ctx_local``: the 256 lines before the
cursor's line as ``input_prefix``, the cursor's line up to the cursor as ``prompt``, the
rest of it and the 64 lines below as ``input_suffix``; ``n_indent``, ``n_predict`` 128,
``t_max_prompt_ms`` 500, ``t_max_predict_ms`` 500, ``top_k`` 40, ``top_p`` 0.90,
``cache_prompt``, its ``response_fields``). Two changes from llama.vim's body, the same for
both servers: greedy (``temperature`` 0, its ``infill`` sampler replaced by ``temperature``,
so both write the same middles and the timings compare the same work; llama.vim samples),
and ``stream`` on, so that the time to the first token can be read; a few more
``response_fields`` (``stop_type``, ``tokens_predicted``, ``tokens_evaluated``, ``timings/cache_n``).

Servers, each its own process on loopback with the same GGUF, 2 threads, a 4,096-token context:

* ``edgespec``: ``edgespec serve --temperature 0`` (the default plan: prompt lookup and
  the memory of earlier completions; ``--edgespec-args`` adds options);
* ``llama-server``: llama.cpp's, built by ``benchmarks/peers/build_peer_tools.sh`` (the
  llama.cpp that llama-cpp-python 0.3.36 vendors), ``-np 1 --cache-reuse 256`` (llama.vim's
  README's setting), plain decoding as llama.vim's users run it.

Both are started afresh for each pass (so neither has seen the session before); in a pass
each session runs whole on one server then on the other, the order alternating by session
and pass. Per request: prompt tokens processed (``timings.prompt_n``), time to the first
streamed text (client side), generation rate (the server's ``predicted_per_second``), time
to the whole completion (client side, until the last event), whether ``t_max_predict_ms``
cut it. Per server: medians over all requests and over the requests after each session's
first; the ratio edgespec / llama-server of the median time to the whole completion, and
the paired per-request ratios, and the same over the quiet pairs, on which the goal is
judged (``infill_report``). ``--uncut`` then runs one more pass of both servers with
``t_max_predict_ms`` off and ``--exact-n-predict`` tokens (generation speed without the
time limit). ``--exact-check`` then replays every request with
``t_max_predict_ms`` off and ``--exact-n-predict`` tokens against ``edgespec serve --exact``
(the default plan) and ``edgespec serve --exact --draft none`` (plain decoding) and
counts identical middles.

    flock /tmp/edgespec-bench.lock python -m benchmarks.infill_replay --passes 2 --exact-check \\
        --out benchmarks/results/infill-replay-$(date +%F).json

writes the JSON and FILE.md (the summary). ``--passes 0`` runs only ``--uncut`` and/or
``--exact-check``. Timing is noisy on a shared CPU: compare ratios. Each pass of the
three sessions takes ~5 min on a quiet 2-core VM, several times that under load.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from benchmarks.common import free_port, git_info, http_ok, machine_info, start_server, stop
from benchmarks.infill_report import compare, goal, markdown, summarize
from benchmarks.prompts.infill_sessions import SESSIONS, Session

N_PREFIX, N_SUFFIX = 256, 64  # llama.vim's defaults (lines)
RESPONSE_FIELDS = [
    "content",
    "timings/prompt_n",
    "timings/prompt_ms",
    "timings/prompt_per_token_ms",
    "timings/prompt_per_second",
    "timings/predicted_n",
    "timings/predicted_ms",
    "timings/predicted_per_token_ms",
    "timings/predicted_per_second",
    "truncated",
    "tokens_cached",
    # not llama.vim's: what the report needs
    "timings/cache_n",
    "stop_type",
    "tokens_predicted",
    "tokens_evaluated",
    "timings/draft_n",
    "timings/draft_n_accepted",
]


def request_at(
    session: Session, k: int, *, n_predict: int = 128, t_max_predict_ms: int = 500, t_max_prompt_ms: int = 500
) -> dict:
    """llama.vim's ``/infill`` body at the session's k-th stop (greedy, streamed: the module docstring)."""
    pos = session.stops()[k]
    before = session.text()[:pos].split("\n")
    line = before[-1]  # the cursor's line, typed up to the cursor (nothing after it yet)
    if not line.strip():  # llama.vim: a blank line starts from its beginning, indent 0
        middle, indent = "", 0
    else:
        middle, indent = line, len(line) - len(line.lstrip(" \t"))
    lines_prefix = before[:-1][-N_PREFIX:]
    lines_suffix = session.below.split("\n")[:N_SUFFIX]
    return {
        "input_prefix": "\n".join(lines_prefix) + "\n",
        "input_suffix": "\n" + "\n".join(lines_suffix) + "\n",
        "input_extra": [{"text": c["text"], "filename": c["filename"]} for c in session.extra],
        "prompt": middle,
        "n_predict": n_predict,
        "stop": [],
        "n_indent": indent,
        "top_k": 40,
        "top_p": 0.90,
        "temperature": 0.0,
        "stream": True,
        "samplers": ["top_k", "top_p", "temperature"],
        "cache_prompt": True,
        "t_max_prompt_ms": t_max_prompt_ms,
        "t_max_predict_ms": t_max_predict_ms,
        "response_fields": RESPONSE_FIELDS,
    }


def session_requests(session: Session, **cfg) -> list[dict]:
    return [request_at(session, k, **cfg) for k in range(len(session.stops()))]


def post_infill(url: str, body: dict, timeout: float = 600.0) -> dict:
    """One streamed ``/infill`` request: the middle, the final object's figures and the
    client's clock (``ttft_s``: to the first event with text; ``t_total_s``: to the end)."""
    req = urllib.request.Request(
        f"{url}/infill", data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    pieces: list[str] = []
    final: dict = {}
    t0 = time.perf_counter()
    t_first = None
    with urllib.request.urlopen(req, timeout=timeout) as r:
        for raw in r:
            line = raw.decode("utf-8").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            ev = json.loads(data)
            if "error" in ev:
                raise RuntimeError(f"{url}/infill answered an error mid-stream: {ev['error']}")
            if ev.get("stop") is not False:  # the last object, cut to response_fields (no "stop" left)
                final = ev
                continue
            if ev.get("content"):
                if t_first is None:
                    t_first = time.perf_counter()
                pieces.append(ev["content"])
    t_end = time.perf_counter()
    return {"content": "".join(pieces), "final": final, "ttft_s": (t_first or t_end) - t0, "t_total_s": t_end - t0}


def record(out: dict, body: dict) -> dict:
    """The per-request row of the report, from ``post_infill``'s answer. ``cut``: under a time
    limit, ended by ``limit`` before ``n_predict``; ``n_indent`` also ends a middle so (the
    answer does not say which), but only on a cursor line with text."""
    f = out["final"]
    n_pred = int(f.get("tokens_predicted", f.get("timings/predicted_n", 0)))
    stop_type = f.get("stop_type", "")
    limit = body.get("t_max_predict_ms") or 0
    return {
        "prompt_tokens": int(f.get("tokens_evaluated", 0)),
        "prompt_n": int(f.get("timings/prompt_n", 0)),
        "cache_n": int(f.get("timings/cache_n", 0)),
        "prompt_ms": float(f.get("timings/prompt_ms", 0.0)),
        "ttft_s": round(out["ttft_s"], 4),
        "t_total_s": round(out["t_total_s"], 4),
        "tokens": n_pred,
        "gen_tps": float(f.get("timings/predicted_per_second", 0.0)),
        "predicted_ms": float(f.get("timings/predicted_ms", 0.0)),
        "stop_type": stop_type,
        "cut": bool(limit > 0 and stop_type == "limit" and n_pred < body["n_predict"]),
        "truncated": bool(f.get("truncated", False)),
        "drafted": int(f.get("timings/draft_n", 0)),
        "accepted": int(f.get("timings/draft_n_accepted", 0)),
        "content": out["content"],
    }


def replay(url: str, requests: list[dict], *, label: str = "", log=sys.stderr) -> list[dict]:
    """Every request in order against the server at ``url``; one ``record`` each."""
    rows = []
    for k, body in enumerate(requests):
        row = record(post_infill(url, body), body)
        row["request"] = k
        rows.append(row)
        if log is not None:
            print(
                f"{label}[{k:02d}] prompt {row['prompt_n']:4d}/{row['prompt_tokens']:4d} ttft {row['ttft_s']:6.2f} s "
                f"total {row['t_total_s']:6.2f} s {row['tokens']:3d} tok {row['gen_tps']:6.2f} tok/s "
                f"{row['stop_type']}{' cut' if row['cut'] else ''}",
                file=log,
                flush=True,
            )
    return rows


# -- the servers ----------------------------------------------------------------------------------


class EdgespecServer:
    """``edgespec serve`` on a free loopback port (a context manager)."""

    def __init__(self, target: Path, threads: int, n_ctx: int, extra: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [
            sys.executable,
            "-m",
            "edgespec",
            "serve",
            "--target",
            str(target),
            "--port",
            str(self.port),
            "--temperature",
            "0",
            "--threads",
            str(threads),
            "--n-ctx",
            str(n_ctx),
            *extra,
        ]
        self.log = open(Path(tempfile.gettempdir()) / f"edgespec-serve-{self.port}.log", "w+")
        self.proc = start_server(self.cmd, lambda: http_ok(f"{self.url}/health"), log=self.log, name="edgespec serve")

    def log_head(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[:1500]

    def close(self) -> None:
        stop(self.proc)
        self.log.close()

    def __enter__(self) -> "EdgespecServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _peer_bin(given: str | None) -> Path:
    from benchmarks.peers.cpp import tools_dir

    if given:
        return Path(given)
    built = Path.home() / ".cache" / "edgespec" / "peer-llama.cpp-0.3.36" / "build" / "bin"
    return built if (built / "llama-server").exists() else tools_dir()


# -- the run --------------------------------------------------------------------------------------


def run_passes(args, target: Path, sessions: list[Session], cfg: dict, passes: int) -> dict:
    """``passes`` passes, both servers fresh each pass; rows by server."""
    from benchmarks.peers.llama_server import LlamaServer

    bin_dir = _peer_bin(args.peer_bin)
    rows: dict = {"edgespec": [], "llama-server": []}
    logs = {}
    for p in range(passes):
        with (
            EdgespecServer(target, args.threads, args.n_ctx, tuple(args.edgespec_args.split())) as ours,
            LlamaServer(
                bin_dir, target, args.threads, spec=None, n_ctx=args.n_ctx, extra=("--cache-reuse", "256")
            ) as theirs,
        ):
            logs.setdefault("edgespec", ours.log_head())
            urls = {"edgespec": ours.url, "llama-server": theirs.url}
            for i, s in enumerate(sessions):
                order = ["edgespec", "llama-server"] if (i + p) % 2 == 0 else ["llama-server", "edgespec"]
                reqs = session_requests(s, **cfg)
                for name in order:
                    for r in replay(urls[name], reqs, label=f"pass {p + 1} {s.name} {name:12} "):
                        rows[name].append({"session": s.name, "pass": p + 1, "server": name, **r})
    return {"rows": rows, "edgespec_log_head": logs.get("edgespec", "")}


def run_exact_check(args, target: Path, sessions: list[Session]) -> dict:
    """Every request, no time cut, under ``--exact``: the default plan vs ``--draft none``."""
    cfg = {"n_predict": args.exact_n_predict, "t_max_predict_ms": 0, "t_max_prompt_ms": 500}
    out: dict = {}
    extra = tuple(args.edgespec_args.split())
    for name, more in (("exact", ()), ("exact-plain", ("--draft", "none"))):
        with EdgespecServer(target, args.threads, args.n_ctx, ("--exact", *extra, *more)) as srv:
            out[name] = [
                {"session": s.name, **r}
                for s in sessions
                for r in replay(srv.url, session_requests(s, **cfg), label=f"{name} {s.name} ")
            ]
    same = [a["content"] == b["content"] for a, b in zip(out["exact"], out["exact-plain"])]
    return {
        "n_predict": args.exact_n_predict,
        "requests": len(same),
        "identical": sum(same),
        "different": [i for i, ok in enumerate(same) if not ok],
        "rows": out,
    }


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.infill_replay",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--target", default="qwen2.5-coder-1.5b", help="catalog name or GGUF path")
    ap.add_argument("--sessions", default=",".join(SESSIONS), help="comma-separated session names")
    ap.add_argument("--passes", type=int, default=2, help="passes over every session (servers fresh each pass)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--n-predict", type=int, default=128)
    ap.add_argument("--t-max-predict-ms", type=int, default=500, help="0: no time cut")
    ap.add_argument("--edgespec-args", default="", help="more options for edgespec serve, space-separated")
    ap.add_argument("--exact-check", action="store_true", help="then compare --exact with --draft none")
    ap.add_argument("--exact-n-predict", type=int, default=32)
    ap.add_argument(
        "--uncut",
        action="store_true",
        help="then one more pass of both servers with no time cut and --exact-n-predict tokens",
    )
    ap.add_argument("--peer-bin", default=None, help="llama-server's bin directory (default: build_peer_tools.sh's)")
    ap.add_argument("--out", type=Path, default=None, help="the JSON result (and FILE.md with the summary)")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    from edgespec.catalog import resolve_model

    names = [n.strip() for n in args.sessions.split(",") if n.strip()]
    unknown = set(names) - set(SESSIONS)
    if unknown:
        sys.exit(f"infill_replay: unknown session(s) {', '.join(sorted(unknown))}; known: {', '.join(SESSIONS)}")
    sessions = [SESSIONS[n] for n in names]
    target = resolve_model(args.target)
    cfg = {"n_predict": args.n_predict, "t_max_predict_ms": args.t_max_predict_ms, "t_max_prompt_ms": 500}
    result: dict = {
        "date": time.strftime("%Y-%m-%d"),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": machine_info(),
        "git": git_info(),
        "settings": {
            "target": str(target),
            "target_name": target.name,
            "sessions": names,
            "requests": sum(len(s.stops()) for s in sessions),
            "passes": args.passes,
            "threads": args.threads,
            "n_ctx": args.n_ctx,
            **cfg,
            "edgespec": f"edgespec serve --temperature 0 {args.edgespec_args}".strip(),
            "llama_server": "llama-server -np 1 --cache-reuse 256 (plain decoding)",
        },
    }
    run = run_passes(args, target, sessions, cfg, args.passes)
    rows = run["rows"]
    result["edgespec_log_head"] = run["edgespec_log_head"]
    result["summary"] = {name: summarize(r) for name, r in rows.items()}
    result["compare"] = compare(rows["edgespec"], rows["llama-server"])
    result["goal"] = goal(result["compare"])
    result["rows"] = rows
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    if args.uncut:
        uncut = {"n_predict": args.exact_n_predict, "t_max_predict_ms": 0, "t_max_prompt_ms": 500}
        more = run_passes(args, target, sessions, uncut, 1)["rows"]
        result["uncut"] = {
            "settings": uncut,
            "summary": {name: summarize(r) for name, r in more.items()},
            "compare": compare(more["edgespec"], more["llama-server"]),
            "rows": more,
        }
        if args.out:
            args.out.write_text(json.dumps(result, indent=1) + "\n")
    if args.exact_check:
        result["exact_check"] = run_exact_check(args, target, sessions)
    result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    md = markdown(result)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
