"""clustercheck.toolout.gdsio: a result line whose numbers do not read, or read below 0, is refused naming
its line (the offline probe exits 4 with one line), never a traceback and never a result."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercheck.cli import main
from clustercheck.toolout import NotToolOutput
from clustercheck.toolout import gdsio as reader
from evidence import text

WRX90 = "wrx90-2gpu-raid0-write-gpud-cpuonly-stelline.txt"


@pytest.mark.parametrize("old, new", [
    ("Throughput: 25.112706", "Throughput: 2.5.112706"),
    ("Throughput: 25.112706", "Throughput: -25.112706"),
    ("Avg_Latency: 38738.000000", "Avg_Latency: 3.8738.0"),
    ("Avg_Latency: 38738.000000", "Avg_Latency: -38738.000000"),
    ("total_time 1.991024", "total_time -1.991024"),
    ("total_time 1.991024", "total_time 1e400"),
    ("ops: 50 total_time 1.991024", "ops: -50 total_time 1.991024"),
])
def test_a_result_that_does_not_read_or_is_below_0_is_refused_naming_its_line(old, new):
    capture = text("gdsio", WRX90)
    assert capture.count(old) == 1 and reader.parse(capture).results[0].seconds == 1.991024
    with pytest.raises(NotToolOutput, match=r"^line 2: "):
        reader.parse(capture.replace(old, new))


def test_the_probe_says_so_in_one_line_exit_4(tmp_path, capsys):
    path = tmp_path / "gdsio.txt"
    path.write_text(text("gdsio", WRX90).replace("Throughput: 25.112706", "Throughput: 1.2.22.0"), encoding="utf-8")
    code = main(["probe", "gdsio", "--input", str(path), "--expect", "gdsio_write_min=1"])
    err = capsys.readouterr().err
    assert code == 4 and "1.2.22.0" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err



@pytest.mark.parametrize("old, new, why", [
    ("ops: 50 total_time 1.991024", "ops: 0 total_time 1.991024", "0 ops"),
    ("Avg_Latency: 38738.000000 usecs ops: 50 total_time 1.991024",
     "Avg_Latency: 0.000000 usecs ops: 50 total_time 0", "a total_time of 0"),
    ("total_time 1.991024", "total_time 0.000000", "a total_time of 0"),
    ("DataSetSize: 52428800/52428800(KiB) IOSize: 1048576(KiB) Throughput: 25.112706",
     "DataSetSize: 0/52428800(KiB) IOSize: 1048576(KiB) Throughput: 25.112706", "a DataSetSize of 0 KiB done"),
])
def test_a_throughput_over_no_op_or_no_time_is_refused_saying_why(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                   old: str, new: str, why: str) -> None:
    """25.11 GiB/s beside `ops: 0` or `total_time 0` read as a measurement and passed GPU0 against its floor:
    gdsio's throughput is the bytes done over the time taken, so neither can be 0 beside it."""
    capture = text("gdsio", WRX90)
    assert capture.count(old) == 1
    with pytest.raises(NotToolOutput, match=rf"^line 2: a throughput of 25.1127 GiB/s over {why}, "):
        reader.parse(capture.replace(old, new))
    path = tmp_path / "gdsio.txt"
    path.write_text(capture.replace(old, new), encoding="utf-8")
    code = main(["probe", "gdsio", "--input", str(path), "--expect", "gdsio_write_min=20"])
    out, err = capsys.readouterr()
    assert code == 4 and why in err and len(err.strip().splitlines()) == 1 and "PASS" not in out


# Result lines of public gdsio captures beyond tests/fixtures (one line each, as printed): -T runs that loop
# past the size asked, 8 and 16 threads, an IOSize range, and a -V (verify) write that prints Avg_Latency 0
PUBLIC = {
    "-T 10, 1 thread, 256K (a VM's NVMe, ext4)":
        "IoType: READ XferType: GPUD Threads: 1 DataSetSize: 16117760/10485760(KiB) IOSize: 256(KiB) Throughput: "
        "1.564272 GiB/sec, Avg_Latency: 155.969457 usecs ops: 62960 total_time 9.826353 secs",
    "-T 120, 8 threads (a DGX-2 example)":
        "IoType: READ XferType: GPUD Threads: 8 DataSetSize: 818796544/4096000(KiB) IOSize: 1024(KiB) Throughput: "
        "6.524658 GiB/sec, Avg_Latency: 1197.370995 usecs ops: 799606 total_time 119.679102 secs",
    "16 threads, IOSize 16-32 MiB in 4 MiB steps (a parser's docstring)":
        "IoType: READ XferType: GPUD Threads: 16 DataSetSize: 103993344/104857600(KiB) IOSize: 16384-32768-4096(KiB) "
        "Throughput: 6.168589 GiB/sec, Avg_Latency: 60200.233629 usecs ops: 4236 total_time 16.077547 secs",
    "-V, 4 KiB, 1 op: Avg_Latency 0 (CUDA 12.4 gdsio, NVMe in compat mode)":
        "IoType: WRITE XferType: GPUD Threads: 1 DataSetSize: 4/4(KiB) IOSize: 4(KiB) Throughput: 0.001974 GiB/sec, "
        "Avg_Latency: 0.000000 usecs ops: 1 total_time 0.001932 secs",
}


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_public_result_lines_read_as_printed(name: str) -> None:
    """A timed run (-T) loops over its file, so its DataSetSize done exceeds the size asked; gdsio -V prints
    an Avg_Latency of 0 for a run it measured. Each is a real result: its throughput is its KiB done over its
    total_time to the printed digits, as in every capture of tests/fixtures."""
    line = PUBLIC[name]
    result = reader.parse(line).results[0]
    assert result.gibs == float(line.split("Throughput: ")[1].split()[0]) > 0


def test_an_avg_latency_of_0_is_shown_as_not_reported_never_as_a_0_us_one(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """gdsio -V printed `Avg_Latency: 0.000000` for a write it measured (its throughput is its 4 KiB over its
    1.932 ms): a real line, read, and its latency is not reported rather than `0 us average`."""
    path = tmp_path / "gdsio.txt"
    path.write_text("$ gdsio -f /mnt/nvme0/gdstest/gdsio.0 -d 0 -w 1 -s 4k -x 0 -i 4K -I 1 -V\n"
                    + PUBLIC["-V, 4 KiB, 1 op: Avg_Latency 0 (CUDA 12.4 gdsio, NVMe in compat mode)"] + "\n",
                    encoding="utf-8")
    code = main(["probe", "gdsio", "--input", str(path), "--expect", "gdsio_write_min=0.001"])
    out = capsys.readouterr().out
    assert code == 0 and "1 thread(s), no latency reported (Avg_Latency 0) on /mnt/nvme0/gdstest/gdsio.0" in out
    assert "0 us average" not in out


def test_a_zero_throughput_over_nothing_done_still_reads() -> None:
    """Nothing moved at 0 GiB/s over 0 KiB done is consistent, and is left to the floor to fail."""
    idle = text("gdsio", WRX90).replace(
        "DataSetSize: 52428800/52428800(KiB) IOSize: 1048576(KiB) Throughput: 25.112706 GiB/sec, Avg_Latency: "
        "38738.000000 usecs ops: 50", "DataSetSize: 0/52428800(KiB) IOSize: 1048576(KiB) Throughput: 0.000000 "
        "GiB/sec, Avg_Latency: 0.000000 usecs ops: 0")
    assert idle != text("gdsio", WRX90) and reader.parse(idle).results[0].gibs == 0


def test_every_fixture_throughput_is_its_kib_done_over_its_time() -> None:
    """The rule's tolerance (a printed step of each) holds every gdsio capture in tests/fixtures."""
    for name in ("wrx90-2gpu-raid0-write-gpud-cpuonly-stelline.txt", "asus-4gpu-raid0-write-gpud-cpuonly-stelline.txt"):
        assert len(reader.parse(text("gdsio", name)).results) == (4 if "wrx90" in name else 17)


@pytest.mark.parametrize("old, new", [
    ("DataSetSize: 52428800/52428800(KiB) IOSize: 1048576(KiB) Throughput: 25.112706",  # 1 GiB in 1.99 s
     "DataSetSize: 1048576/52428800(KiB) IOSize: 1048576(KiB) Throughput: 25.112706"),
    ("Throughput: 25.112706 GiB/sec, Avg_Latency: 38738.000000 usecs ops: 50",  # 0 GiB/s over 50 GiB done
     "Throughput: 0.000000 GiB/sec, Avg_Latency: 38738.000000 usecs ops: 50"),
    ("Throughput: 25.112706", "Throughput: 26.112706"),
    ("Throughput: 25.112706", "Throughput: 25.112806"),  # 1e-4 off: beyond a step of either printed number
    ("total_time 1.991024", "total_time 2.991024"),
    ("total_time 1.991024", "total_time 0.000001"),  # within a step of 0: 50 GiB in at most 2 us
])
def test_a_throughput_that_is_not_its_kib_done_over_its_time_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str) -> None:
    """25.11 GiB/s beside 1 GiB done in 1.99 s (0.50 GiB/s), or 0 GiB/s beside 50 GiB done, read as measured:
    GPU0 passed (or failed) on a number gdsio never printed beside those."""
    capture = text("gdsio", WRX90)
    assert capture.count(old) == 1
    with pytest.raises(NotToolOutput, match=r"^line 2: a throughput of [\d.]+ GiB/s where its \d+ KiB done over "
                                            r"[\d.]+ s make [\d.]+ GiB/s, beyond print rounding"):
        reader.parse(capture.replace(old, new))
    path = tmp_path / "gdsio.txt"
    path.write_text(capture.replace(old, new), encoding="utf-8")
    code = main(["probe", "gdsio", "--input", str(path), "--expect", "gdsio_write_min=20"])
    out, err = capsys.readouterr()
    assert code == 4 and "beyond print rounding" in err and len(err.strip().splitlines()) == 1 and "PASS" not in out


def test_a_throughput_within_a_printed_step_still_reads() -> None:
    capture = text("gdsio", WRX90).replace("Throughput: 25.112706", "Throughput: 25.112708")
    assert reader.parse(capture).results[0].gibs == 25.112708


# -- a GPU the capture never measured, or measured twice: failed by name, never a pass ---------------

GPU1_GPUD = ("IoType: WRITE XferType: GPUD Threads: 1 DataSetSize: 52428800/52428800(KiB) IOSize: 1048576(KiB) "
             "Throughput: 25.034021 GiB/sec")


def _probe(tmp_path, capsys, body: str) -> tuple[int, str]:
    path = tmp_path / "gdsio.txt"
    path.write_text(body, encoding="utf-8")
    code = main(["probe", "gdsio", "--input", str(path), "--expect", "gdsio_write_min=10"])
    return code, capsys.readouterr().out


def test_a_capture_cut_off_after_a_command_fails_naming_its_gpu(tmp_path, capsys):
    """The real capture's first 5 lines (`head -5`): GPU1's command line, then nothing."""
    body = "\n".join(text("gdsio", WRX90).split("\n")[:5]) + "\n"
    assert body.rstrip().endswith("-x 0 -d 1 -s 50G -I 1 -i 1G")
    code, out = _probe(tmp_path, capsys, body)
    assert code == 1, out
    assert ("FAIL GPU1: run: cut off: the gdsio command on output line 3 (-d 1, /mnt/nvme-raid/test.bin) printed "
            "no result line: never measured") in out
    assert "PASS GPU0: write GPUDirect: WRITE GPUD 25.11 GiB/s" in out  # what was measured is still shown


def test_a_command_whose_result_line_is_gone_fails_naming_its_gpu(tmp_path, capsys):
    """The real capture with GPU0's GPUDirect result line deleted: its command runs straight into GPU1's."""
    lines = text("gdsio", WRX90).split("\n")
    assert lines[3].startswith("IoType: WRITE XferType: GPUD") and "25.112706" in lines[3]
    code, out = _probe(tmp_path, capsys, "\n".join(lines[:3] + lines[4:]))
    assert code == 1, out
    assert "FAIL GPU0: run: cut off: the gdsio command on output line 1 (-d 0, /mnt/nvme-raid/test.bin)" in out
    assert reader.parse("\n".join(lines[:3] + lines[4:])).cut_off[0].gpu == 0


def test_a_gpu_measured_twice_fails(tmp_path, capsys):
    """The real capture with the second and fourth commands' `-d 1` edited to `-d 0`: GPU0 twice, GPU1 gone."""
    body = text("gdsio", WRX90).replace("-d 1 ", "-d 0 ")
    assert text("gdsio", WRX90).count("-d 1 ") == 2
    code, out = _probe(tmp_path, capsys, body)
    assert code == 1, out
    assert ("FAIL GPU0: measured twice: WRITE GPUD on /mnt/nvme-raid/test.bin of GPU0 on output lines 2 and 4" in out
            and "FAIL GPU0: measured twice: WRITE CPUONLY on /mnt/nvme-raid/test.bin of GPU0 on output lines 6 and 8"
            in out)
    assert out.count("PASS GPU0: write GPUDirect") == 1


def _without_gpud_of(body: str, gpu: int) -> str:
    """The capture less one GPU's GPUDirect command and result lines (`-x 0 -d GPU`, the line after it)."""
    lines = body.split("\n")
    at = next(i for i, x in enumerate(lines) if f"-x 0 -d {gpu} " in x)
    assert lines[at + 1].startswith("IoType: WRITE XferType: GPUD")
    return "\n".join(lines[:at] + lines[at + 2:])


def test_a_gpu_whose_gpudirect_command_and_result_are_both_gone_fails_by_name(tmp_path, capsys):
    """The 4-GPU capture less GPU2's GPUDirect write on both RAID sets, and the 2-GPU capture less GPU1's:
    each read as a capture of the GPUs left, and passed. GPU2 is missed by the numbering (0, 1, 3 have one);
    GPU1 of 2 only by the platform's gpu_count (its CPU-only result is still there)."""
    asus = text("gdsio", "asus-4gpu-raid0-write-gpud-cpuonly-stelline.txt")
    code, out = _probe(tmp_path, capsys, _without_gpud_of(_without_gpud_of(asus, 2), 2))
    assert code == 1, out
    assert ("FAIL GPU2: write GPUDirect: no GPUDirect WRITE result for GPU2 in the capture, while GPU 0, 1, 3 have "
            "one: never measured") in out
    wrx90 = _without_gpud_of(text("gdsio", WRX90), 1)
    assert _probe(tmp_path, capsys, wrx90)[0] == 0  # one GPU measured: nothing says there were two ...
    path = tmp_path / "gdsio.txt"
    code = main(["probe", "gdsio", "--input", str(path), "--expect", "gdsio_write_min=10", "--expect", "gpu_count=2"])
    out = capsys.readouterr().out
    assert code == 1 and ("FAIL GPU1: write GPUDirect: no GPUDirect WRITE result for GPU1 in the capture, while "
                          "GPU 0 has one (the platform has 2): never measured") in out, out  # ... but the platform


@pytest.mark.parametrize("name", [WRX90, "asus-4gpu-raid0-write-gpud-cpuonly-stelline.txt"])
def test_the_real_captures_have_no_command_cut_off_and_no_gpu_twice(tmp_path, capsys, name):
    assert reader.parse(text("gdsio", name)).cut_off == ()
    code, out = _probe(tmp_path, capsys, text("gdsio", name))
    assert code == 0 and "FAIL" not in out, out


def test_the_kind_fails_a_gpu_run_twice_or_never():
    """`measure: gdsio`: the rank's runs, each the real capture's result line for its GPU; GPU1's run
    relabelled GPU0 (GPU0 twice, GPU1 never) fails both by name."""
    from clustercheck.kinds.base import Answers, CheckSpec, Rules
    from clustercheck.kinds.gdsio import judge

    lines = text("gdsio", WRX90).split("\n")
    gpud = [line for line in lines if line.startswith("IoType: WRITE XferType: GPUD")]

    def verdicts(gpus: list[int], count: int | None) -> list[tuple[str | None, bool, str]]:
        runs = [{"gpu": g, "io": "write", "outcome": "ran", "stdout": out + "\n", "returncode": 0, "timed_out": False}
                for g, out in zip(gpus, gpud)]
        check = CheckSpec("c", "gdsio", "node", {"io": ["write"], "gpus": count}, (), 60, "", "s.yaml", 1)
        answers = Answers(check, [{"host": "n1", "binary": "gdsio", "outcome": "ran", "runs": runs}, {}],
                          [{"host": "n1"}, {"host": "n1"}], "nccl")
        _, got = judge(answers, Rules({}, expect={"gdsio_write_min": 10}))
        return [(v.subject, v.passed, str(v.detail)) for v in got]

    assert [(s, p) for s, p, _ in verdicts([0, 1], 2)] == [("GPU0", True), ("GPU1", True)]
    twice = verdicts([0, 0], 2)
    assert ("GPU0", False, "write: 2 runs of GPU0 in the answer: one GPU measured twice") in twice
    assert ("GPU1", False, "write: no gdsio run of GPU1 in the answer: never measured") in twice
    assert [p for s, p, _ in twice if s == "GPU0"].count(True) == 1
    assert ("GPU1", False, "write: no gdsio run of GPU1 in the answer: never measured") in verdicts([0], 2)


# gdsio in batch mode (-x 6, GPU_BATCH) prints IoDepth between Threads and DataSetSize. The line as a public
# gdsio wrapper script quotes it in its comments (gdsio's own output, its numbers consistent: 524206080 KiB over
# 300.27 s is 1.6649 GiB/s), with the `IoType: ` that gdsio prints first.
BATCH = ("IoType: WRITE XferType: GPU_BATCH Threads: 1 IoDepth: 8 DataSetSize: 524206080/8388608(KiB) "
         "IOSize: 16384(KiB) Throughput: 1.664916 GiB/sec, Avg_Latency: 9383.000000 usecs ops: 31995 "
         "total_time 300.268538 secs")


def test_a_batch_mode_result_with_its_io_depth_reads():
    (result,) = reader.parse(BATCH + "\n").results
    assert (result.io, result.gibs, result.seconds) == ("WRITE", 1.664916, 300.268538)
