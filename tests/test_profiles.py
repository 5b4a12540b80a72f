"""Profiles: the shipped TOML files, validation, user profiles, measured figures, and the
``edgespec profiles`` CLI. The choice made from a profile is tested in test_planner."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from conftest import ISSUE_PROFILES
from edgespec import catalog, profiles
from edgespec.errors import ProfileError
from edgespec.planning import planner


@pytest.fixture(autouse=True)
def user_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return tmp_path / "config" / "edgespec" / "profiles"


def write_user(user_dir: Path, name: str, text: str) -> Path:
    user_dir.mkdir(parents=True, exist_ok=True)
    p = user_dir / f"{name}.toml"
    p.write_text(text)
    return p


# --------------------------------------------------------------------------------------
# Shipped profiles
# --------------------------------------------------------------------------------------


def test_every_profile_of_the_issue_is_shipped_and_valid():
    profs = {p.name: p for p in profiles.list_profiles()}
    assert ISSUE_PROFILES <= set(profs)
    for p in profs.values():
        assert p.origin == "shipped"
        assert p.backend in profiles.BACKENDS
        assert (p.n_gpu_layers == 0) == (p.backend == "cpu")
        for key, fig in p.figures():
            assert fig.status in ("measured", "estimated"), (p.name, key)
            assert len(fig.source) > 10, (p.name, key)


def test_shipped_profiles_reference_catalog_pairs_and_end_with_the_embedded_one_or_smaller():
    for p in profiles.list_profiles():
        for name in p.pairs:
            catalog.get_pair(name)
        sizes = [catalog.get_model(catalog.get_pair(n).target).size_bytes for n in p.pairs]
        assert min(sizes) <= catalog.get_model(catalog.DEFAULT_TARGET).size_bytes * 2, p.name


def test_this_machines_profile_carries_the_measured_figures_of_design_md():
    p = profiles.load_profile("cpu-small")
    assert p.verify.status == "measured" and 3.0 <= p.verify(5) <= 4.5  # c(5) ≈ 3.5–4.3 measured on the dev VMs
    pc = p.pair_cost(catalog.DEFAULT_PAIR)
    assert pc.gamma.status == "measured" and 0.5 <= pc.gamma.value <= 0.6


def test_every_verify_curve_has_a_published_source_or_says_measured_with_its_file():
    for p in profiles.list_profiles():
        curves = [("cost.verify", p.verify)] + [(f"cost.verify_weights.{m}", f) for m, f in p.verify_weights]
        for key, fig in curves:
            if fig.status == "measured":
                assert "Qwen2.5-Coder-1.5B" in fig.source, (p.name, key)  # the file it was measured on
            else:
                assert "https://github.com/ggml-org/llama.cpp/" in fig.source or "this project's measurement" in (
                    fig.source
                ), (p.name, key)
                assert "memory-bound arithmetic (" not in fig.source, (p.name, key)  # the old unsourced estimate


def test_a_profiles_curve_per_weight_type_and_its_fallback():
    p = profiles.load_profile("m2max")
    q4 = p.verify_for("Q4_0")
    assert q4 is dict(p.verify_weights)["Q4_0"] and q4(4) > 3.0
    assert p.verify_for("IQ2_XXS") is p.verify and p.verify_for(None) is p.verify
    curves = p.verify_curves()
    assert curves["default"] is p.verify.cost and curves["Q4_0"] is q4.cost
    # a profile without per-weight curves (the file format before them) loads as before
    cpu = profiles.load_profile("cpu-small")
    assert cpu.verify_for("Q4_K_M") is dict(cpu.verify_weights).get("Q4_K_M", cpu.verify)


def test_apple_profiles_say_quantized_drafting_does_not_pay_and_f16_does():
    for name in ("m1", "m2", "m2max", "m3pro", "m3max", "m4pro", "m4max"):
        p = profiles.load_profile(name)
        for mix in ("Q4_K_M", "Q4_0", "Q8_0"):
            fig = p.verify_for(mix)
            assert fig(2) >= 1.6 and fig.k_max == 1 and fig.drafters == ("ngram",), (name, mix)
        f16 = p.verify_for("F16")
        assert f16.k_max >= 4 and f16.drafters is None and f16(8) < 2.5


def test_cuda_profiles_stop_drafting_where_the_mat_vec_kernels_end():
    for name in ("rtx3060-laptop", "rtx4070-laptop", "rtx4090", "jetson-orin-nano"):
        p = profiles.load_profile(name)
        assert p.k_max <= 7 and all(f.k_max == 7 for _, f in p.verify_weights), name


def test_the_docs_table_matches_the_profiles():
    import re

    text = (Path(__file__).parents[1] / "docs" / "profiles.md").read_text()
    rows = {}
    for m in re.finditer(r"^\| `?([\w.-]+)`? \| (\w+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|", text, re.M):
        rows[(m[1], m[2])] = tuple(float(x) for x in m.groups()[2:])
    for p in profiles.list_profiles():
        curves = [("any", p.verify)] + list(p.verify_weights)
        for mix, fig in curves:
            assert rows.get((p.name, mix)) == tuple(round(fig(n), 2) for n in (2, 4, 8)), (p.name, mix)


def test_unknown_profile_lists_the_known_ones():
    with pytest.raises(ProfileError, match="unknown profile 'm9'.*m2max.*or auto"):
        profiles.load_profile("m9")


# --------------------------------------------------------------------------------------
# User profiles and validation
# --------------------------------------------------------------------------------------


def test_a_user_file_named_like_a_shipped_profile_overrides_it_key_by_key(user_dir):
    write_user(
        user_dir, "m2max", '[memory]\nmodels_gb = { value = 90, status = "measured", source = "my 128 GB Mac" }\n'
    )
    p = profiles.load_profile("m2max")
    assert p.origin == "user over shipped" and p.path.endswith("m2max.toml")
    assert p.models_gb.value == 90 and p.models_gb.status == "measured"
    assert p.bandwidth_gbs.value == 400  # untouched keys come from the shipped file


def test_a_user_profile_can_extend_another(user_dir):
    write_user(user_dir, "my-box", 'extends = "cpu-laptop"\ndescription = "my box"\n[run]\nn_threads = 6\n')
    names = [p.name for p in profiles.list_profiles()]
    assert "my-box" in names
    p = profiles.load_profile("my-box")
    assert p.description == "my box" and p.n_threads == 6 and p.backend == "cpu"
    assert p.origin == "user, extends cpu-laptop"


def test_extends_cycles_are_reported(user_dir):
    write_user(user_dir, "a", 'extends = "b"\n')
    write_user(user_dir, "b", 'extends = "a"\n')
    with pytest.raises(ProfileError, match="cycle"):
        profiles.load_profile("a")


@pytest.mark.parametrize(
    "text, key, found",
    [
        ('backend = "vulkan"', "backend", '"vulkan"'),
        ('[run]\nn_threads = "many"', "run.n_threads", '"many"'),
        ("[run]\nn_gpu_layers = 10", "run.n_gpu_layers", "10"),  # on a cpu profile
        ("[choice]\nk_max = 0", "choice.k_max", "0"),
        ('[choice]\npairs = ["gpt-5+gpt-1"]', "choice.pairs", '"gpt-5+gpt-1"'),
        ('[choice]\ndrafters = ["eagle"]', "choice.drafters", '"eagle"'),
        ("[memory]\nmodels_gb = 12", "memory.models_gb", "12"),
        (
            '[memory]\nmodels_gb = { value = 12, status = "guessed", source = "me" }',
            "memory.models_gb.status",
            '"guessed"',
        ),
        ('[memory]\nmodels_gb = { value = 12, status = "measured" }', "memory.models_gb.source", "nothing (missing)"),
        (
            '[cost]\nverify = { n = [4, 2], c = [1.1, 1.2], status = "measured", source = "x" }',
            "cost.verify.n",
            "[4, 2]",
        ),
        ('[cost]\nalpha_model = { value = 1.5, status = "measured", source = "x" }', "cost.alpha_model.value", "1.5"),
        (
            '[cost.pair."nope+nope"]\nalpha = { value = 0.5, status = "measured", source = "x" }',
            'cost.pair."nope+nope"',
            "an unknown key",
        ),
        ("[choice]\nk_maxx = 4", "choice.k_maxx", "an unknown key"),
        (
            '[cost.verify_weights]\nQ3_X = { n = [2], c = [1.5], status = "measured", source = "x" }',
            "cost.verify_weights.Q3_X",
            "an unknown key",
        ),
        (
            '[cost.verify_weights]\nQ4_0 = { n = [2], c = [0.5], status = "measured", source = "x" }',
            "cost.verify_weights.Q4_0.c",
            "[0.5]",
        ),
        (
            '[cost.verify_weights]\nQ4_0 = { n = [2], c = [1.5], status = "measured", source = "x", k_max = 0 }',
            "cost.verify_weights.Q4_0.k_max",
            "0",
        ),
        (
            '[cost.verify_weights]\nQ4_0 = { n = [2], c = [1.5], status = "measured", source = "x", drafters = ["x"] }',
            "cost.verify_weights.Q4_0.drafters",
            '"x"',
        ),
        (
            '[cost]\nverify = { n = [2], c = [1.5], status = "measured", source = "x", k_max = 2 }',
            "cost.verify.k_max",
            "an unknown key",
        ),
        ('name = "other"', "name", '"other"'),
    ],
)
def test_a_malformed_user_profile_names_the_file_the_key_the_value_and_what_is_allowed(user_dir, text, key, found):
    path = write_user(user_dir, "cpu-small", text + "\n")
    with pytest.raises(ProfileError) as err:
        profiles.load_profile("cpu-small")
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}: {key}: found {found}; allowed: "), msg


def test_an_unknown_weight_mix_names_the_allowed_ones(user_dir):
    write_user(
        user_dir,
        "cpu-small",
        '[cost.verify_weights]\nQ3_X = { n = [2], c = [1.5], status = "measured", source = "x" }\n',
    )
    with pytest.raises(ProfileError, match=r"allowed: weight-type mixes: Q4_K_M, .*Q4_0, .*IQ4_NL, .*Q8_0, F16"):
        profiles.load_profile("cpu-small")


def test_invalid_toml_names_the_file_and_the_line(user_dir):
    path = write_user(user_dir, "broken", "schema = 1\nbackend = \n")
    with pytest.raises(ProfileError, match=rf"^{path}: not valid TOML: .*line 2"):
        profiles.load_profile("broken")


def test_an_incomplete_new_user_profile_names_the_missing_table(user_dir):
    path = write_user(user_dir, "half", 'backend = "cpu"\n')
    with pytest.raises(ProfileError, match=rf"^{path}: memory: found nothing \(missing\); allowed: a table"):
        profiles.load_profile("half")


# --------------------------------------------------------------------------------------
# Measured figures for `tune`
# --------------------------------------------------------------------------------------


def test_record_measurements_writes_a_dated_measured_user_profile(user_dir):
    when = dt.date(2026, 11, 29)
    path = profiles.record_measurements(
        "cpu-small",
        pair=catalog.DEFAULT_PAIR,
        gamma=0.12,
        alpha=0.85,
        verify={2: 1.1, 4: 1.3, 8: 1.9},
        source="edgespec tune (test)",
        when=when,
    )
    assert path == user_dir / "cpu-small.toml"
    text = path.read_text()
    assert 'status = "measured"' in text and "date = 2026-11-29" in text
    p = profiles.load_profile("cpu-small")
    assert p.origin == "user over shipped"
    pc = p.pair_cost(catalog.DEFAULT_PAIR)
    assert pc.gamma.value == 0.12 and pc.gamma.status == "measured" and pc.gamma.date == when
    assert pc.verify(4) == 1.3 and pc.verify.source == "edgespec tune (test)"
    assert pc.target_step_ms.value == 41.3  # the shipped figure survives
    # with a cheap draft measured, the model drafter now wins on this profile
    plan = planner.plan("cpu-small")
    assert plan.drafter == "model" and "measured" in plan.reason

    # a second run updates in place
    profiles.record_measurements("cpu-small", overhead_ms=3.5, when=when)
    p = profiles.load_profile("cpu-small")
    assert p.overhead_ms.value == 3.5 and p.pair_cost(catalog.DEFAULT_PAIR).gamma.value == 0.12


def test_record_measurements_for_a_new_profile_needs_a_base(user_dir):
    with pytest.raises(ProfileError, match="needs a base"):
        profiles.record_measurements("this-box", overhead_ms=3.0)
    path = profiles.record_measurements("this-box", extends="cpu-small", overhead_ms=3.0)
    assert profiles.load_profile("this-box").overhead_ms.status == "measured"
    assert path.exists()


def test_record_measurements_never_leaves_an_invalid_file(user_dir):
    good = profiles.record_measurements("cpu-small", overhead_ms=3.0)
    before = good.read_text()
    with pytest.raises(ProfileError):
        profiles.record_measurements("cpu-small", alpha_ngram=7.0)  # not a probability
    assert good.read_text() == before


def test_dump_toml_round_trips():
    import tomllib

    data = {
        "schema": 1,
        "extends": "cpu-small",
        "cost": {
            "overhead_ms": {"value": 2.5, "status": "measured", "source": 'say "hi"', "date": dt.date(2026, 1, 2)},
            "pair": {"a+b": {"gamma": {"value": 0.1, "status": "measured", "source": "x"}}},
        },
    }
    assert tomllib.loads(profiles.dump_toml(data)) == data
    # a profile with curves per weight type goes through to_dict and back
    cost = profiles.load_profile("m2max").to_dict()["cost"]
    assert tomllib.loads(profiles.dump_toml({"cost": cost})) == {"cost": cost}


# --------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------


@pytest.fixture
def cli():
    from edgespec.cli.profiles import models_app, profiles_app

    app = typer.Typer()
    app.add_typer(profiles_app, name="profiles")
    app.add_typer(models_app, name="models")
    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(app, list(args))

    return invoke


def test_cli_profiles_list(cli):
    r = cli("profiles", "list")
    assert r.exit_code == 0, r.output
    for name in ISSUE_PROFILES:
        assert name in r.output
    r = cli("profiles", "list", "--json")
    assert {p["name"] for p in json.loads(r.stdout)["profiles"]} >= ISSUE_PROFILES


def test_cli_profiles_show_m2max(cli):
    r = cli("profiles", "show", "m2max")
    assert r.exit_code == 0, r.output
    assert "qwen2.5-coder-7b-instruct-q4_k_m" in r.output and "model drafter loses" in r.output
    assert "estimated" in r.output and "cost.verify_weights.Q4_0" in r.output
    r = cli("profiles", "show", "m2max", "--json")
    d = json.loads(r.stdout)
    # the published Metal timings: a Q4_K verify is not nearly free, the 0.5B drafter cannot pay
    assert d["name"] == "m2max" and d["backend"] == "metal" and d["drafter"] in ("ngram", "none")
    assert d["target"] and d["reason"]


def test_cli_profiles_detect_on_this_machine(cli):
    r = cli("profiles", "detect", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    for key in ("name", "backend", "target", "draft", "drafter", "k", "reason", "machine"):
        assert key in d
    if d["machine"]["physical_cores"] <= 4 and not d["machine"]["gpus"] and not d["machine"]["chip"]:
        assert d["name"] == "cpu-small" and d["drafter"] in ("ngram", "none")
    r = cli("profiles", "detect")
    assert r.exit_code == 0 and "this machine" in r.output


def test_cli_profiles_detect_from_a_recording(cli):
    rec = Path(__file__).parent / "data" / "detect" / "macbook-m2max-32gb.toml"
    r = cli("profiles", "detect", "--from", str(rec), "--json")
    d = json.loads(r.stdout)
    assert d["name"] == "m2max" and d["drafter"] in ("ngram", "none")


def test_cli_malformed_user_profile_is_one_line_and_exit_7(cli, user_dir):
    path = write_user(user_dir, "m2max", '[choice]\nk_max = "lots"\n')
    r = cli("profiles", "show", "m2max")
    assert r.exit_code == 7
    assert r.stderr.strip() == (f'error: {path}: choice.k_max: found "lots"; allowed: an integer from 1 to 64')
    assert "Traceback" not in r.output
    r = cli("profiles", "list")
    assert r.exit_code == 7 and str(path) in r.stderr


def test_cli_unknown_profile(cli):
    r = cli("profiles", "show", "m9")
    assert r.exit_code == 7 and r.stderr.startswith("error: unknown profile 'm9'")
