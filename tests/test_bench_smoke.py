"""Benches that cannot rot: every script in bench/ runs with ``--smoke`` and ends with its headline
``name: value`` lines. Only that they run and print those names is checked; the numbers of a smoke run
at tiny sizes mean nothing, so no value is asserted."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cli_runner import subprocess_env

BENCH = Path(__file__).resolve().parents[1] / "bench"

HEADLINES = {
    "data_bench.py": ["data_build_mb_per_s_per_core", "data_build_scaling_2_workers", "data_build_ray_vs_processes",
                      "data_build_vs_datatrove_per_core", "near_dedup_precision", "near_dedup_recall",
                      "peak_rss_growth_ratio_10x", "demo_build_seconds"],
    "eval_bench.py": ["eval_items_per_second_ratio_vs_lm_eval", "eval_cost_fraction_of_training",
                      "eval_task_backtest_abs_error_points"],
    "lab_bench.py": ["lab/overhead_per_step_s", "lab/jobs2_speedup", "lab/plan_1000_steps_s"],
    "ladder_bench.py": ["ladder_full_fit_seconds", "ladder_interval_coverage_pinned",
                        "ladder_interval_coverage_misspecified_L_inf", "ladder_selfcal_interval_coverage",
                        "gate_refuses_ill_posed", "gate_registers_well_posed", "interval_coverage_90",
                        "median_abs_error_registered_pct", "hero_floor_registered_share", "hero_floor_rescued_share",
                        "hero_floor_interval_coverage_90", "hero_floor_median_abs_error_registered_pct"],
    "map_bench.py": ["map_docs_per_s_per_core_vs_reference", "map_scaling_2_workers", "map_peak_rss_growth_10x",
                     "map_nmi_vs_package", "map_minutes_site_packages"],
    "model_bench.py": ["cpu_moe_model_flops_fraction_of_matmul", "cpu_moe_train_speedup_vs_qwen3moe_grouped_mm_experts",
                       "cpu_dense_model_flops_fraction_of_matmul", "host_syncs_per_step", "recompiles_after_step_1"],
    "observatory_bench.py": ["series_1M_to_2000_http_ms", "live_latency_p95_s", "log_cost_pct_of_50ms_step",
                             "lab_overview_ms", "lab_run_page_ms", "lab_compare_page_ms", "publish_watch_one_run_s",
                             "wide_live_first_chart_s", "wide_static_first_chart_s", "wide_live_search_keypress_ms",
                             "wide_static_search_keypress_ms", "wide_live_js_heap_mb", "wide_static_js_heap_mb"],
    "reproduce_bench.py": ["reproduce_bit_identical_checkpoints", "reproduce_train_seconds_ratio"],
    "rl_bench.py": ["rl_heldout_pass_at_1_gain_points", "rl_rollout_tokens_per_s_vs_trl", "rl_minutes_demo"],
    "screenshot.py": ["pages_shot"],
    "sft_bench.py": ["sft_packed_vs_padded_tokens_per_s_ratio", "sft_heldout_loss_drop_percent",
                     "dpo_heldout_pref_accuracy_gain_points", "chat_page_vs_cli_first_token_ratio",
                     "chat_page_vs_cli_tokens_per_s_ratio"],
    "step_hashes.py": ["step_names"],
    "storage_bench.py": ["train_tokens_per_s_s3_vs_local", "train_tokens_per_s_s3_vs_local_latency",
                         "loader_tokens_per_s_s3_vs_local", "loader_tokens_per_s_s3_vs_local_latency",
                         "lab_open_s", "data_build_s3_vs_local", "checkpoint_write_s3_vs_local",
                         "run_store_sync_lag_s"],
    "track_bench.py": ["track_log_cost_fraction_of_50ms_step"],
    "trace_bench.py": ["trace_index_build_tokens_per_s_per_core", "trace_index_bytes_per_token", "trace_100_token_ms"],
    "train_bench.py": ["train_overhead_percent", "peak_rss_chunked_ce_vs_full"],
}
"""Each bench's headline names (the names its issue gives); a new bench must be added here."""

HEADLINE = re.compile(r"^([A-Za-z0-9_/]+): (\S+)", re.MULTILINE)


HELPERS = {"interleave.py", "step_profile.py"}
"""Modules in bench/ that benches import, not benches themselves."""


def test_every_bench_is_smoke_tested():
    assert sorted(p.name for p in BENCH.glob("*.py") if p.name not in HELPERS) == sorted(HEADLINES)


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(HEADLINES))
def test_bench_smoke_prints_its_headlines(script, tmp_path):
    extra = ["--out", str(tmp_path / "shots")] if script == "screenshot.py" else []
    if script == "screenshot.py" and shutil.which("chromium") is None:
        pytest.skip("no chromium on PATH")
    done = subprocess.run([sys.executable, str(BENCH / script), "--smoke", *extra], env=subprocess_env(),
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = dict(HEADLINE.findall(done.stdout))
    missing = [name for name in HEADLINES[script] if name not in printed]
    assert not missing, f"{script} --smoke did not print {missing}:\n{done.stdout[-2000:]}"


SELFCAL_HEADLINES = ["ladder_selfcal_extrapolation", "ladder_selfcal_rel_error_pct",
                     "ladder_selfcal_second_config_rel_error_pct", "ladder_floor_estimate",
                     "ladder_curve_band_coverage", "ladder_curve_band_median_halfwidth_pct", "ladder_selfcal_minutes"]
"""What ``ladder_bench.py --selfcal`` prints (issue 31's names)."""


@pytest.mark.slow
@pytest.mark.timeout(1200)  # a ladder of ten tiny runs and a data build: minutes, more on a busy machine
def test_ladder_bench_selfcal_smoke_trains_a_protocol_and_prints_its_headlines(tmp_path):
    """Protocol (a) trained at its smoke size; (b) is the same code at context 128, so it is only planned
    here (training both doubled the suite's slowest item to ~3 minutes)."""
    from glasslab.experiments import selfcal_ladder_128
    from glasslab.lab import make_plan

    assert make_plan(selfcal_ladder_128.smoke_steps(), tmp_path / "plan-only").steps
    done = subprocess.run([sys.executable, str(BENCH / "ladder_bench.py"), "--selfcal", "--smoke", "--protocol", "a"],
                          env=subprocess_env(), capture_output=True, text=True, timeout=1100, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = dict(HEADLINE.findall(done.stdout))
    missing = [name for name in SELFCAL_HEADLINES if name not in printed]
    assert not missing, f"ladder_bench.py --selfcal --smoke did not print {missing}:\n{done.stdout[-2000:]}"
    assert "--- protocol (a)" in done.stdout and printed["ladder_selfcal_rel_error_pct"] != "n/a"


GPU_CHECK_SECTIONS = ("environment", "cuda_tests", "model_bench", "demo_quick", "fsdp2")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("timeout") is None, reason="gpu_check.sh time-boxes its sections with timeout(1)")
def test_gpu_check_dry_run_walks_every_section_on_cpu(tmp_path):
    """bench/gpu_check.sh needs CUDA to run in full: without it, it says so in one line and stops; with
    --dry-run it walks every section on the CPU at tiny sizes and each passes, printing its figures."""
    script = str(BENCH / "gpu_check.sh")
    python = {"PYTHON": sys.executable}  # the script's interpreter: this one, activated venv or not
    if not torch.cuda.is_available():
        done = subprocess.run([script, str(tmp_path / "gpu.log")], env=subprocess_env(**python),
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 1
        environment = dict(HEADLINE.findall((tmp_path / "gpu.log").read_text()))["gpu_check_environment_rc"]
        # It says why in one line, unless importing torch on this loaded machine outlasted the box (124).
        assert environment == "124" or (environment == "1" and "torch.cuda.is_available() is False" in done.stdout)
    done = subprocess.run([script, "--dry-run", str(tmp_path / "dry.log")], env=subprocess_env(**python),
                          capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stdout[-4000:]
    printed = dict(HEADLINE.findall(done.stdout))
    assert all(printed[f"gpu_check_{name}_rc"] == "0" for name in GPU_CHECK_SECTIONS), printed
    assert printed["gpu_grouped_mm_kernel_bf16"] in ("0", "1") and printed["gpu_count"] == "0"
    for name in ("gpu_dense_mfu_bf16", "gpu_moe_mfu_bf16", "gpu_moe_compile_seconds", "gpu_host_syncs_per_step"):
        assert name in printed, name
    assert float(printed["gpu_host_syncs_per_step"]) <= 3 and printed["gpu_recompiles_after_step_1"] == "0"
    assert printed["gpu_demo_quick_steps_succeeded"] == "2"  # hello's two steps
    assert printed["gpu_fsdp2_steps"] == "6" and printed["gpu_fsdp2_replicas_agree"] == "1"
    assert float(printed["gpu_fsdp2_final_train_loss"]) < 6.24
