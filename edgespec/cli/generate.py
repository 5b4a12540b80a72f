"""``edgespec generate``: one prompt to stdout, or a resumable JSONL batch.

Thin: parse options, build the engine from the profile plan, hand the event stream to
the readout (one prompt), or hand a batch (``--input``) to ``generate_batch``; map errors
to exit codes. Text goes to stdout; diagnostics, progress and stats go to stderr.
"""

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.text import Text

from edgespec.cli.common import (
    EXIT_INTERRUPTED,
    MinPOpt,
    SeedOpt,
    ShowRejectedOpt,
    TemperatureOpt,
    TopKOpt,
    TopPOpt,
    VerboseOpt,
    cli_errors,
    err_console,
    load_engine,
    read_prompt,
)
from edgespec.cli.fim import FimPrefixOpt, FimSuffixOpt, fim_request, read_fim
from edgespec.cli.generate_batch import InputOpt, OnError, OnErrorOpt, OutputOpt, ParallelOpt, generate_batch
from edgespec.cli.memory_options import MemoryCapOpt, MemoryOpt, MemoryOptions, RememberOpt, remembering
from edgespec.cli.plan_options import (
    DraftOpt,
    ExactOpt,
    KOpt,
    NCtxOpt,
    OptimizedOpt,
    PlanOptions,
    ProfileOpt,
    RpcOpt,
    TargetOpt,
    TensorSplitOpt,
    ThreadsOpt,
    make_plan,
)
from edgespec.cli.structured import (
    GrammarOpt,
    LenientOpt,
    RegexOpt,
    SchemaOpt,
    bind_option,
    check_complete,
    response_format_from_options,
)
from edgespec.measuring.learned import keep_learned_costs


def generate(
    prompt: Annotated[
        Optional[str],
        typer.Argument(help="The prompt. Without it: --prompt-file, or stdin when piped.", show_default=False),
    ] = None,
    prompt_file: Annotated[
        Optional[Path], typer.Option("--prompt-file", "-f", help="Read the prompt from a file ('-' = stdin).")
    ] = None,
    profile: ProfileOpt = "auto",
    target: TargetOpt = None,
    draft: DraftOpt = None,
    k: KOpt = None,
    exact: ExactOpt = False,
    optimized: OptimizedOpt = True,
    temperature: TemperatureOpt = 0.0,
    top_k: TopKOpt = 0,
    top_p: TopPOpt = 1.0,
    min_p: MinPOpt = 0.0,
    seed: SeedOpt = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", min=1)] = 256,
    stop: Annotated[
        Optional[list[str]], typer.Option("--stop", help="Stop string (repeatable); not included in the output.")
    ] = None,
    raw: Annotated[bool, typer.Option("--raw", help="Use the prompt as is, without the chat template.")] = False,
    json_output: Annotated[
        bool,
        typer.Option(
            "--json",
            help='Print one JSON object: {"text","token_ids","finish_reason","stats"} '
            '(with a constraint also "structured_complete" and "parsed").',
        ),
    ] = False,
    schema: SchemaOpt = None,
    grammar: GrammarOpt = None,
    regex: RegexOpt = None,
    lenient_schema: LenientOpt = False,
    n_ctx: NCtxOpt = None,
    threads: ThreadsOpt = None,
    rpc: RpcOpt = None,
    tensor_split: TensorSplitOpt = None,
    show_rejected: ShowRejectedOpt = False,
    input_file: InputOpt = None,
    output_file: OutputOpt = None,
    on_error: OnErrorOpt = OnError.skip,
    parallel: ParallelOpt = "auto",
    memory: MemoryOpt = True,
    memory_cap: MemoryCapOpt = None,
    remember: RememberOpt = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No diagnostics or stats on stderr.")] = False,
    verbose: VerboseOpt = False,
    fim_prefix: FimPrefixOpt = None,
    fim_suffix: FimSuffixOpt = None,
) -> None:
    """Generate text for one prompt, or for every line of a JSONL batch."""
    options: dict[str, Any] = dict(
        max_tokens=max_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        min_p=min_p,
        seed=seed,
        stop=tuple(stop or ()),
    )
    plan = PlanOptions(
        profile=profile,
        target=target,
        draft=draft,
        k=k,
        exact=exact,
        optimized=optimized,
        n_ctx=n_ctx,
        threads=threads,
        rpc=rpc,
        tensor_split=tensor_split,
    )
    with cli_errors():
        memory_options = MemoryOptions(memory, memory_cap, remember)
        batch = input_file is not None or output_file is not None
        response_format, spec = response_format_from_options(schema, grammar, regex, lenient_schema, batch=batch)
        _warn(spec, quiet)
        if batch:
            generate_batch(
                input_file,
                output_file,
                on_error,
                options,
                plan=plan,
                response_format=response_format,
                lenient_schema=lenient_schema,
                raw=raw,
                parallel=parallel,
                quiet=quiet,
                verbose=verbose,
                has_prompt=prompt is not None or prompt_file is not None,
                json_output=json_output,
                memory=memory_options,
            )
            return

        fim = read_fim(fim_prefix, fim_suffix, has_prompt=prompt is not None or prompt_file is not None, batch=batch)
        text = read_prompt(prompt, prompt_file) if fim is None else ""  # before loading models: fail fast
        engine = load_engine(make_plan(memory_options.apply(plan)), quiet=quiet, verbose=verbose)
        try:
            if fim is not None:  # the middle between two files (cli/fim.py)
                (text, options), raw = fim_request(engine, fim, options), True
            with remembering(engine, memory_options, err=err_console(), quiet=quiet):
                done = _generate(
                    engine,
                    text,
                    options,
                    spec,
                    schema or grammar or "--regex",
                    raw=raw,
                    json_output=json_output,
                    show_rejected=show_rejected,
                    quiet=quiet,
                )
        finally:
            learned = keep_learned_costs(engine)
            engine.close()
        if learned and not quiet:
            err_console().print(Text(learned, style="dim"))
        check_complete(done)


def _generate(
    engine: Any,
    text: str,
    options: dict,
    spec: Any,
    spec_name: str,
    *,
    raw: bool,
    json_output: bool,
    show_rejected: bool,
    quiet: bool,
) -> Any:
    """One prompt: the JSON object on stdout, or the text through the readout."""
    if spec is not None:
        from edgespec.constraints import bind

        options = {**options, "constraint": bind_option(bind, spec, engine.target_model, spec_name)}
    if json_output:
        result = engine.generate(text, raw=raw, **options)
        sys.stdout.write(json.dumps(result.to_dict(), ensure_ascii=False) + "\n")
        sys.stdout.flush()
        return result
    return _run_single(engine, text, options, raw=raw, show_rejected=show_rejected, quiet=quiet)


def _warn(spec: Any, quiet: bool) -> None:
    """What lenient mode relaxed, said on stderr (a schema is never relaxed silently)."""
    for w in spec.warnings if spec is not None else ():
        if not quiet:
            err_console().print(Text(f"warning: the constraint is relaxed: {w}", style="yellow"))


def _run_single(engine: Any, text: str, options: dict, *, raw: bool, show_rejected: bool, quiet: bool) -> Any:
    from edgespec.cli.readout import Readout

    err = err_console()
    if quiet:
        err.quiet = True
    readout = Readout(err_console=err, show_rejected=show_rejected, show_forced="constraint" in options)
    if engine.drafter_name != "none":
        readout.print_legend()
    try:
        return readout.show(engine.stream(text, raw=raw, **options)).done
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None  # the readout already said so
