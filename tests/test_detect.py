"""Device detection from recorded machines (tests/data/detect/*.toml), and on this one.

``dev-vm-2core.toml`` is a real recording of the project's 2-core dev machine; the
others are reconstructed from the documented output formats of sysctl, nvidia-smi,
/proc and the device tree (see each file's header).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from edgespec import detect, profiles
from edgespec.planning import planner

DATA = Path(__file__).parent / "data" / "detect"


@pytest.fixture(autouse=True)
def _no_user_profiles(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def recorded(name: str) -> profiles.Detection:
    return profiles.detect_profile(detect.RecordedProbe.load(DATA / f"{name}.toml"))


@pytest.mark.parametrize(
    "recording, profile",
    [
        ("dev-vm-2core", "cpu-small"),
        ("macbook-m2max-32gb", "m2max"),
        ("macbook-m1pro-16gb", "m3pro"),  # no M1 Pro profile: same tier, nearest generation
        ("mac-mini-m4-16gb", "m2"),  # no base M4 profile: nearest base chip
        ("linux-rtx4090-cuda", "rtx4090"),
        ("linux-rtx4090-cpu-build", "cpu-laptop"),  # GPU present, CPU-only llama.cpp build
        ("windows-rtx4070-laptop", "rtx4070-laptop"),
        ("linux-rtx3060-laptop", "rtx3060-laptop"),
        ("linux-rtx3080-2gpu", "rtx4070-laptop"),  # unknown GPU: closest by memory
        ("raspberry-pi-5-8gb", "raspberry-pi-5"),
        ("jetson-orin-nano-8gb", "jetson-orin-nano"),
        ("linux-desktop-8core", "cpu-laptop"),
    ],
)
def test_recorded_machines_map_to_the_closest_profile(recording, profile):
    det = recorded(recording)
    assert det.base == profile
    assert det.profile.name == profile
    assert det.explanation.startswith("detected ")
    assert profile in det.explanation


def test_every_recording_is_used():
    used = {
        "dev-vm-2core",
        "macbook-m2max-32gb",
        "macbook-m1pro-16gb",
        "mac-mini-m4-16gb",
        "linux-rtx4090-cuda",
        "linux-rtx4090-cpu-build",
        "windows-rtx4070-laptop",
        "linux-rtx3060-laptop",
        "linux-rtx3080-2gpu",
        "raspberry-pi-5-8gb",
        "jetson-orin-nano-8gb",
        "linux-desktop-8core",
    }
    assert {p.stem for p in DATA.glob("*.toml")} == used


def test_the_dev_machine_recording_reads_back_its_facts():
    m = recorded("dev-vm-2core").machine
    assert (m.system, m.physical_cores, m.logical_cores) == ("Linux", 2, 2)
    assert m.cpu == "AMD EPYC" and m.board is None and m.gpus == () and m.gpu_offload is False


def test_apple_memory_is_scaled_to_metals_working_set():
    det = recorded("macbook-m2max-32gb")
    assert det.machine.chip == "Apple M2 Max"
    assert det.profile.models_gb.value == pytest.approx(32 * 2**30 * 2 / 3 / 1e9, abs=0.1)
    assert "unified memory" in det.profile.models_gb.source
    det = recorded("macbook-m1pro-16gb")  # no psutil figures: sysctl supplies them
    assert det.machine.total_bytes == 16 * 2**30 and det.machine.physical_cores == 10
    assert "no profile of its own" in det.explanation


def test_nvidia_memory_comes_from_nvidia_smi():
    det = recorded("linux-rtx3080-2gpu")
    assert [g.name for g in det.machine.gpus] == ["NVIDIA GeForce GTX 1650", "NVIDIA GeForce RTX 3080"]
    assert det.profile.models_gb.value == pytest.approx(10240 * 2**20 / 1e9 - 0.5, abs=0.05)
    # the scaled profile lets a 7B pair fit that the 8 GB laptop profile also holds
    plan = planner.plan(det.profile)
    assert plan.target == "qwen2.5-coder-7b-instruct-q4_k_m"


def test_a_cpu_only_build_explains_how_to_use_the_gpu():
    det = recorded("linux-rtx4090-cpu-build")
    assert "cannot offload" in det.explanation and "GGML_CUDA" in det.explanation
    assert det.profile.backend == "cpu" and det.profile.n_gpu_layers == 0
    assert det.profile.n_threads == 16


def test_raspberry_pi_from_the_device_tree_and_proc_fallbacks():
    det = recorded("raspberry-pi-5-8gb")
    m = det.machine
    assert m.board == "Raspberry Pi 5 Model B Rev 1.0"
    assert m.total_bytes == 8245300 * 1024 and m.available_bytes == 7702480 * 1024
    assert m.logical_cores == 4
    assert det.profile.n_threads == 4


def test_cpu_profiles_get_this_machines_threads_and_memory():
    det = recorded("dev-vm-2core")
    assert det.profile.n_threads == 2
    total = det.machine.total_bytes
    assert det.profile.models_gb.value == pytest.approx(min(total * 0.8, det.machine.available_bytes) / 1e9, abs=0.1)
    assert any("threads: 2" in n for n in det.profile.notes)


def test_parse_nvidia_smi_csv():
    gpus = detect.parse_nvidia_smi("name, memory.total [MiB]\nNVIDIA A100-SXM4-80GB, 81920 MiB\nTesla T4, 15360 MiB\n")
    assert [(g.name, g.memory_bytes) for g in gpus] == [
        ("NVIDIA A100-SXM4-80GB", 81920 * 2**20),
        ("Tesla T4", 15360 * 2**20),
    ]
    assert detect.parse_nvidia_smi(None) == ()
    assert detect.parse_nvidia_smi("") == ()


@pytest.mark.parametrize("recording", sorted(p.stem for p in DATA.glob("*.toml")))
def test_every_recorded_machine_gets_a_plan_that_fits(recording):
    det = recorded(recording)
    plan = planner.plan(det.profile)
    assert plan.drafter in ("model", "ngram", "none")
    assert plan.target
    if plan.drafter == "model":
        assert plan.draft and plan.k >= 1
    else:
        assert plan.draft is None
    assert not any("may not fit" in n or "nothing fits" in n for n in plan.notes)


def test_the_model_drafter_is_never_chosen_on_small_cpus():
    for name in ("dev-vm-2core", "raspberry-pi-5-8gb"):
        plan = planner.plan(recorded(name).profile)
        assert plan.drafter in ("ngram", "none"), (name, plan.reason)


def test_this_machine_is_detected_for_real():
    det = profiles.detect_profile()
    assert det.machine.physical_cores >= 1
    assert det.profile.name in {p.name for p in profiles.list_profiles()}
    if det.machine.physical_cores <= 4 and not det.machine.gpus and not det.machine.chip:
        assert det.base == "cpu-small"
        plan = planner.plan("auto")
        assert plan.drafter in ("ngram", "none"), plan.reason
        assert plan.backend == "cpu"


def test_a_bad_recording_is_a_profile_error(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("system = \n")
    with pytest.raises(profiles.ProfileError, match="bad.toml"):
        detect.RecordedProbe.load(bad)
