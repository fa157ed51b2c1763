"""The metrics add up across processes that share a directory, and read back in Prometheus' format."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from engine.telemetry import metrics, metrics_dir

ROOT = Path(__file__).resolve().parents[4]


def scrape() -> dict[str, float]:
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(metrics.DIRECTORY))
    values = {}
    for family in registry.collect():
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            values[f"{sample.name}{{{labels}}}"] = sample.value
    return values


def test_this_process_counts_in_the_directory_it_prepared():
    assert os.environ[metrics_dir.VARIABLE] == str(metrics.DIRECTORY)
    before = scrape().get('baton_job_retries_total{kind="unit-test"}', 0.0)
    metrics.JOB_RETRIES.labels("unit-test").inc()
    assert scrape()['baton_job_retries_total{kind="unit-test"}'] == before + 1
    assert any(name.endswith(f"_{os.getpid()}.db") for name in os.listdir(metrics.DIRECTORY))


def test_a_child_process_adds_to_the_same_counters():
    """What a supervised worker process does: counts land in the server's directory and add up."""
    before = scrape().get('baton_job_give_ups_total{kind="child-test"}', 0.0)
    subprocess.run([sys.executable, "-c", "from engine.telemetry import metrics\n"
                    "metrics.JOB_GIVE_UPS.labels('child-test').inc(3)"],
                   cwd=ROOT, env=metrics_dir.for_children(dict(os.environ)), check=True, timeout=60)
    metrics.JOB_GIVE_UPS.labels("child-test").inc()
    assert scrape()['baton_job_give_ups_total{kind="child-test"}'] == before + 4


def test_histograms_count_each_observation_in_its_bucket():
    before = scrape()
    metrics.SCRIPT_SECONDS.labels("ok").observe(0.003)
    metrics.SCRIPT_SECONDS.labels("ok").observe(7)
    after = scrape()

    def moved(name):
        return after.get(name, 0.0) - before.get(name, 0.0)

    assert moved('baton_script_duration_seconds_count{outcome="ok"}') == 2
    assert moved('baton_script_duration_seconds_bucket{le="0.0025",outcome="ok"}') == 0
    assert moved('baton_script_duration_seconds_bucket{le="0.005",outcome="ok"}') == 1
    assert moved('baton_script_duration_seconds_bucket{le="10.0",outcome="ok"}') == 2
    assert abs(moved('baton_script_duration_seconds_sum{outcome="ok"}') - 7.003) < 1e-9


def test_every_metric_follows_the_naming_conventions():
    """baton_ prefix; counters end in _total, histograms (all of time) in _seconds."""
    source = (ROOT / "engine" / "telemetry" / "metrics.py").read_text(encoding="utf-8")
    defined = re.findall(r'(Counter|Histogram)\(\s*"([a-z_]+)"', source)
    assert len(defined) == sum(isinstance(v, (metrics.Counter, metrics.Histogram)) for v in vars(metrics).values())
    assert len(defined) >= 14
    for kind, name in defined:
        assert name.startswith("baton_"), name
        assert name.endswith("_total" if kind == "Counter" else "_seconds"), name
