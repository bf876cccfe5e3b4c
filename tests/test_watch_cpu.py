"""The burn's CPU watch: files found once, read at every sample; a file that goes away is an error of
that sample, never a zero. A copied sysfs tree stands in for what this VM lacks (cpufreq, thermal
zones, x86 throttle counts); the machine's own files are read too."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clustercheck.counters import watch as w


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    cpus, thermal = tmp_path / "cpu", tmp_path / "thermal"
    for cpu, khz, count in ((0, 2_400_000, 3), (1, 1_200_000, 4), (2, 3_000_000, 100)):
        (cpus / f"cpu{cpu}/cpufreq").mkdir(parents=True)
        (cpus / f"cpu{cpu}/cpufreq/scaling_cur_freq").write_text(f"{khz}\n")
        (cpus / f"cpu{cpu}/thermal_throttle").mkdir()
        (cpus / f"cpu{cpu}/thermal_throttle/core_throttle_count").write_text(f"{count}\n")
    for zone, milli in ((0, 41_000), (1, 67_500)):
        (thermal / f"thermal_zone{zone}").mkdir(parents=True)
        (thermal / f"thermal_zone{zone}/temp").write_text(f"{milli}\n")
    return cpus, thermal


def test_a_sample_reads_the_ranks_cpus_the_hottest_zone_and_the_throttle_counts(tmp_path: Path) -> None:
    cpus, thermal = _tree(tmp_path)
    read = w.cpu_reader(frozenset({0, 1}), cpus, thermal, tmp_path / "no-cpuinfo")
    s = read()
    assert (s.sm_mhz, s.temp_c, s.throttle_count) == (1800.0, 67.5, 7)  # cpu2 is not the rank's
    (cpus / "cpu1/thermal_throttle/core_throttle_count").write_text("9\n")
    (thermal / "thermal_zone0/temp").write_text("90000\n")
    assert (read().temp_c, read().throttle_count) == (90.0, 12)  # values are read anew at each sample


def test_a_file_that_vanishes_fails_the_sample_and_the_watch_keeps_it_as_an_error(tmp_path: Path) -> None:
    cpus, thermal = _tree(tmp_path)
    read = w.cpu_reader(frozenset({0}), cpus, thermal, tmp_path / "no-cpuinfo")
    (thermal / "thermal_zone1/temp").unlink()
    with pytest.raises(OSError, match="thermal_zone1/temp"):
        read()
    (thermal / "thermal_zone1/temp").write_text("garbage\n")
    watch = w.Watch(60.0, read).start().stop()
    assert watch.samples == [] and len(watch.errors) == 2 and "thermal_zone1/temp" in watch.errors[0]
    assert w.summary(watch.samples, watch.errors)["error_count"] == 2


def test_without_cpufreq_the_frequency_comes_from_cpuinfo(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\ncpu MHz\t\t: 2445.412\n\nprocessor\t: 1\ncpu MHz\t\t: 1000.000\n")
    read = w.cpu_reader(frozenset({1}), tmp_path / "no-cpus", tmp_path / "no-thermal", info)
    s = read()
    assert (s.sm_mhz, s.temp_c, s.throttle_count) == (1000.0, None, None)


def test_this_machines_own_files_give_a_frequency() -> None:
    s = w.cpu_reader(frozenset(os.sched_getaffinity(0)))()
    assert s.sm_mhz is not None and s.sm_mhz > 0


def test_a_cpuinfo_frequency_that_is_not_a_number_fails_the_sample_naming_the_cpu(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\ncpu MHz\t\t: <unknown>\n")
    watch = w.Watch(60.0, w.cpu_reader(frozenset({0}), tmp_path / "no-cpus", tmp_path / "no-thermal", info))
    watch.start().stop()
    assert watch.samples == [] and watch.errors[0] == f"OSError: {info}: 'cpu MHz' of cpu0 is not a number: '<unknown>'"
