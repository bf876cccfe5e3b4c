"""nccl_debug: NCCL_DEBUG=INFO logs -> version, algorithm/protocol per collective and size, transports.

Real logs: the shared p3dn, superbench and GB300 nccl-tests captures, and excerpts of public issue threads
in tests/fixtures/nccl-debug/ (source URL on line 1). Short snippets for the tuning-line formats the
real excerpts do not cover are constructed from the formats NVIDIA/nccl prints
section 2; each says so."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from clustercheck.fabric import nccl_debug as nd
from evidence import text as shared_text

FIXTURES = Path(__file__).parent / "fixtures" / "nccl-debug"


def body(raw: str) -> str:
    """A fixture without its two-line source note."""
    return "\n".join(raw.splitlines()[2:])


def fixture(name: str) -> str:
    return body((FIXTURES / name).read_text(encoding="utf-8"))


def shared(name: str) -> str:
    return body(shared_text("nccl-tests", name))


# -- real logs ---------------------------------------------------------------------------------------

def test_p3dn_nccl_248_log_gives_version_network_env_and_invents_no_algorithm() -> None:
    """NCCL 2.4.8 prints no tuning line; the excerpt has no `Channel ... via` lines either."""
    d = nd.parse(shared("allreduce-p3dn-2node-efa-nccl-debug-info.txt"))
    assert d.versions == ("2.4.8+cuda10.0",)
    assert (d.version, d.build) == ("2.4.8", "cuda10.0")
    assert d.info_lines == 45  # every interleaved NCCL INFO line was read (INDEX.md counts 45)
    assert d.choices == () and d.table() == {}
    assert d.transports == () and d.transport_kinds == frozenset() and not d.p2p_suspect
    assert d.networks == ("OFI provider efa",)  # the only transport fact in this excerpt: EFA through aws-ofi
    assert d.env_dict == {"NCCL_TREE_THRESHOLD": "0"}
    assert d.nvls_capable is None
    s = nd.summarise(d, "all_reduce", 1 << 30)
    assert (s.algo, s.proto, s.matched_nbytes, s.label) == (None, None, None, "unknown")
    assert s.version == "2.4.8" and s.transports == frozenset()


def test_superbench_logs_with_one_info_line_parse_to_nothing_invented() -> None:
    for name in ("allgather-8xa100-oldformat-validation0-superbench.txt",
                 "reducescatter-8xa100-oldformat-validation0-superbench.txt"):
        d = nd.parse(shared(name))
        assert d.info_lines == 1  # "Launch mode Parallel"
        assert (d.versions, d.choices, d.transports, d.env) == ((), (), (), ())


def test_gb300_version_line_without_info_lines() -> None:
    d = nd.parse(shared("alltoall-4xgb300-single-node-new-format-na.txt"))
    assert (d.version, d.build, d.info_lines, d.choices) == ("2.28.7", "cuda13.0", 0, ())


def test_nccl_1752_named_format_with_nccl_upper_case_names() -> None:
    d = nd.parse(fixture("nccl-1752-h200-64node-tuning-named.txt"))
    assert [(c.collective, c.nbytes, c.algo, c.proto, c.channels, c.format, c.collective_from) for c in d.choices] == [
        ("AllReduce", 16777216, "Tree", "LL128", (0, 15), ">=2.24", "line"),
        ("AllReduce", 33554432, "NVLSTree", "Simple", (0, 15), ">=2.24", "line"),
    ]
    assert d.choices[0].host == "se2-r1-gpu-1" and d.choices[0].time_us is None
    assert nd.summarise(d, "all_reduce", 32 << 20).label == "NVLSTree/Simple"
    assert nd.summarise(d, "all_reduce", (32 << 20) - 1).label == "Tree/LL128"  # closest at or below
    assert nd.summarise(d, "all_reduce", 1 << 20).algo is None  # nothing logged at or below 1 MiB


def test_nccl_1453_nameless_format_transports_and_a_line_glued_to_a_table_row() -> None:
    d = nd.parse(fixture("nccl-1453-h100-2node-tuning-unnamed.txt"))
    assert len(d.choices) == 6 + 15 + 14  # the glued `[0]  64.18 ... 0[0] host ... NCCL INFO` line counts
    assert {c.format for c in d.choices} == {"2.20-2.22"}
    # the excerpt names no collective (no COLL line, no nccl-tests binary): not guessed
    assert {(c.collective, c.collective_from) for c in d.choices} == {("unknown", "unknown")}
    assert d.table() == {("unknown", 4): ("Tree", "LL"), ("unknown", 8): ("Tree", "LL"),
                         ("unknown", 262144): ("Tree", "LL128")}
    assert d.choices[0].time_us == pytest.approx(25.200462)
    text = fixture("nccl-1453-h100-2node-tuning-unnamed.txt").splitlines()
    row = next(i for i, line in enumerate(text, 1) if line.startswith("[0]     64.18"))
    glued = [c for c in d.choices if c.line == row]
    assert len(glued) == 1 and (glued[0].host, glued[0].nbytes) == ("h100clust-worker-1", 8)
    assert d.transport_kinds == frozenset({"NET/IBext_v8"})
    t = d.transports[2]
    assert (t.channel, t.src_rank, t.dst_rank, t.direction, t.via) == (8, 0, 8, "send", "NET/IBext_v8/7/GDRDMA")
    assert {t.direction for t in d.transports} == {"send", "receive"}
    assert d.version is None  # the excerpt has no version line
    # the caller knows it ran all_reduce: nameless lines take that name, and say where it came from
    named = nd.parse(fixture("nccl-1453-h100-2node-tuning-unnamed.txt"), default_collective="all_reduce")
    assert {(c.collective, c.collective_from) for c in named.choices} == {("AllReduce", "default")}
    s = nd.summarise(named, "AllReduce", 1 << 20)
    assert (s.matched_nbytes, s.algo, s.proto, s.alternatives) == (262144, "Tree", "LL128", (("Tree", "LL128", 14),))


def test_nccl_892_algo_env_p2p_and_nvls_channel_count() -> None:
    d = nd.parse(fixture("nccl-892-h800-algo-env-p2p.txt"))
    assert d.env_dict.get("NCCL_ALGO") == "Tree,Ring,,CollnetDirect,CollnetChain,NVLS"  # three ranks print it; kept once
    assert d.env == (("NCCL_ALGO", "Tree,Ring,,CollnetDirect,CollnetChain,NVLS"),)
    assert d.transport_kinds == frozenset({"P2P"}) and not d.p2p_suspect
    assert [t.via for t in d.transports] == ["P2P/direct pointer", "P2P/direct pointer"]
    assert d.nvls_channels == (0, 0)  # NVLS asked for, none set up
    assert d.choices == ()  # INIT,ENV only: no tuning lines, no algorithm invented


def test_deepseek_shm_between_gpus_is_flagged() -> None:
    d = nd.parse(fixture("deepseek-coder-v2-29-8xa100pcie-shm.txt"))
    assert d.transport_kinds == frozenset({"SHM"})
    assert len(d.shm_between_gpus) == 13 and d.p2p_suspect
    first = d.transports[0]  # older format: "Channel 00 : 7[7] -> 6[6]" without "/0"
    assert (first.channel, first.src_rank, first.dst_rank, first.src_dev, first.via) == (0, 7, 6, "7", "SHM/direct/direct")
    assert nd.summarise(d, "all_reduce", 1 << 20).p2p_suspect


def test_nvls_capability_available_and_not_available() -> None:
    yes = nd.parse(fixture("nccl-1538-nvls-available-2.22.txt"))
    assert sorted(c.dev for c in yes.nvls) == [0, 2, 5, 6, 7] and yes.nvls_capable is True
    assert yes.choices == ()  # capability is not use
    no = nd.parse(fixture("aws-ofi-nccl-715-nvls-not-available-timestamps.txt"))
    assert sorted(c.dev for c in no.nvls) == [1, 2, 3, 5, 6, 7] and no.nvls_capable is False
    assert no.info_lines == 12  # the timestamp lines between them are skipped


def test_every_fixture_has_a_source_url_on_line_one() -> None:
    files = sorted(FIXTURES.glob("*.txt"))
    assert len(files) >= 5
    for f in files:
        first, second = f.read_text(encoding="utf-8").splitlines()[:2]
        assert first.startswith("# source: https://github.com/") and second == "", f.name


# -- the three tuning-line formats -------------------------------------------------------------------
# Constructed from the formats NVIDIA/nccl prints (tuning lines; not captured output):
# >= 2.24 `AllReduce: 1073741824 Bytes -> Algo NVLS proto Simple channel{Lo..Hi}={0..15}`,
# 2.23 `AllReduce: N Bytes -> Algo 4 proto 2 time T`, 2.20-2.22 `N Bytes -> Algo 4 proto 2 time T`.

V224 = """\
node1:100:100 [0] NCCL INFO NCCL version 2.26.2+cuda12.8
node1:100:100 [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo Ring proto LL128 channel{Lo..Hi}={0..7}
node1:100:100 [0] NCCL INFO AllReduce: 1073741824 Bytes -> Algo NVLS proto Simple channel{Lo..Hi}={0..15}
node1:100:100 [0] NCCL INFO AllGather: 1073741824 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..31}
"""
V223 = """\
NCCL version 2.23.4+cuda12.6
node1:100:100 [0] NCCL INFO AllReduce: 1073741824 Bytes -> Algo 4 proto 2 time 2210.500000
node1:100:100 [0] NCCL INFO ReduceScatter: 1073741824 Bytes -> Algo 6 proto 2 time 3100.250000
"""
V220 = """\
NCCL version 2.21.5+cuda12.4
node1:100:100 [0] NCCL INFO 1073741824 Bytes -> Algo 4 proto 2 time 2210.500000
"""


def test_format_224_names() -> None:
    d = nd.parse(V224)
    assert [(c.collective, c.nbytes, c.algo, c.proto, c.channels, c.format) for c in d.choices] == [
        ("AllReduce", 1048576, "Ring", "LL128", (0, 7), ">=2.24"),
        ("AllReduce", 1073741824, "NVLS", "Simple", (0, 15), ">=2.24"),
        ("AllGather", 1073741824, "Ring", "Simple", (0, 31), ">=2.24"),
    ]
    assert d.version == "2.26.2"
    assert nd.summarise(d, "all_reduce", 8 << 30).label == "NVLS/Simple"
    assert nd.summarise(d, "all_gather", 1 << 30).label == "Ring/Simple"
    assert nd.summarise(d, "reduce_scatter", 1 << 30).label == "unknown"


def test_format_223_numeric_indices() -> None:
    d = nd.parse(V223)
    assert [(c.collective, c.algo, c.proto, c.time_us, c.format) for c in d.choices] == [
        ("AllReduce", "NVLS", "Simple", 2210.5, "2.23"), ("ReduceScatter", "PAT", "Simple", 3100.25, "2.23")]


@pytest.mark.parametrize("index, name", list(enumerate(nd.ALGOS)))
def test_every_algo_index(index: int, name: str) -> None:
    assert nd.parse(f"x:1:1 [0] NCCL INFO AllReduce: 8 Bytes -> Algo {index} proto 0 time 1.0").choices[0].algo == name


@pytest.mark.parametrize("index, name", list(enumerate(nd.PROTOS)))
def test_every_proto_index(index: int, name: str) -> None:
    assert nd.parse(f"x:1:1 [0] NCCL INFO AllReduce: 8 Bytes -> Algo 1 proto {index} time 1.0").choices[0].proto == name


@pytest.mark.parametrize("printed, name", [("COLLNET_DIRECT", "CollNetDirect"), ("COLLNET_CHAIN", "CollNetChain"),
                                           ("NVLS_TREE", "NVLSTree"), ("PAT", "PAT"), ("Tree", "Tree")])
def test_algo_names_as_nccl_prints_them(printed: str, name: str) -> None:
    line = f"x:1:1 [0] NCCL INFO AllReduce: 8 Bytes -> Algo {printed} proto LL channel{{Lo..Hi}}={{0..0}}"
    assert nd.parse(line).choices[0].algo == name


def test_unknown_indices_are_kept_not_mapped() -> None:
    c = nd.parse("x:1:1 [0] NCCL INFO AllReduce: 8 Bytes -> Algo 9 proto 5 time 1.0").choices[0]
    assert (c.algo, c.proto) == ("algo9", "proto5")


def test_format_220_nameless_line() -> None:
    d = nd.parse(V220)
    c = d.choices[0]
    assert (c.collective, c.collective_from, c.algo, c.proto, c.format) == ("unknown", "unknown", "NVLS", "Simple",
                                                                              "2.20-2.22")


def test_nameless_line_takes_the_collective_from_a_coll_line_of_the_same_process() -> None:
    # constructed: NCCL_DEBUG_SUBSYS=COLL prints `<Coll>: opCount ...` per rank before rank 0's tuning line
    log = """\
node1:101:101 [1] NCCL INFO Broadcast: opCount 0 sendbuff 0x1 recvbuff 0x1 count 1 datatype 7 op 0 root 0 comm 0x2 [nranks=2] stream 0x3
node1:100:100 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 1 datatype 7 op 0 root 0 comm 0x2 [nranks=2] stream 0x3
node1:101:101 [1] NCCL INFO Broadcast: opCount 1 sendbuff 0x1 recvbuff 0x1 count 1 datatype 7 op 0 root 0 comm 0x2 [nranks=2] stream 0x3
node1:100:100 [0] NCCL INFO 4 Bytes -> Algo 1 proto 0 time 5.000000
"""
    c = nd.parse(log, default_collective="reduce_scatter").choices[0]
    assert (c.collective, c.collective_from) == ("AllReduce", "COLL line")  # its own pid, not the latest line


def test_nameless_line_takes_the_collective_from_the_nccl_tests_binary() -> None:
    # constructed: an nccl-tests banner naming the binary, then a 2.20-2.22 tuning line
    log = "# Collective test starting: reduce_scatter_perf\n" + V220
    c = nd.parse(log, default_collective="all_reduce").choices[0]
    assert (c.collective, c.collective_from) == ("ReduceScatter", "nccl-tests binary")


def test_several_ranks_files_and_interleaved_output() -> None:
    # constructed: rank 1's file has init lines only; rank 0's tuning lines are mixed into a table
    rank0 = """\
#       size         count      type   redop    root     time   algbw   busbw #wrong
node1:100:100 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
     1048576        262144     float     sum      -1   node1:100:100 [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo Ring proto LL128 channel{Lo..Hi}={0..7}
 10.2  102.5  102.5      0
"""
    rank1 = """\
node1:101:101 [1] NCCL INFO NVLS multicast support is available on dev 1
node1:101:101 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read
node1:101:101 [1] NCCL INFO NCCL_NVLS_ENABLE set by environment to 0.
"""
    d = nd.parse([rank0, rank1])
    assert [(c.collective, c.nbytes, c.algo, c.proto) for c in d.choices] == [("AllReduce", 1048576, "Ring", "LL128")]
    assert [(t.src_rank, t.dst_rank, t.kind) for t in d.transports] == [(0, 1, "P2P"), (1, 0, "P2P")]
    assert d.nvls_capable is True and d.env_dict == {"NCCL_NVLS_ENABLE": "0"}


def test_transport_kinds() -> None:
    # constructed from the `via` forms NCCL prints (p2p.cc, shm.cc, net.cc)
    log = "\n".join(f"h:1:1 [0] NCCL INFO Channel 0{i}/0 : 0[0] -> 1[1]{d} via {via}" for i, (d, via) in enumerate([
        ("", "P2P/CUMEM/read"), ("", "P2P/IPC"), ("", "SHM/direct/direct"), (" [send]", "NET/IB/0/GDRDMA"),
        (" [receive]", "NET/Socket/0"), ("", "NVLS")]))
    d = nd.parse(log)
    assert [t.kind for t in d.transports] == ["P2P", "P2P", "SHM", "NET/IB", "NET/Socket", "NVLS"]
    assert d.p2p_suspect and [t.via for t in d.shm_between_gpus] == ["SHM/direct/direct"]


def test_summary_takes_the_most_frequent_choice_and_lists_the_rest() -> None:
    log = "\n".join(["h:1:1 [0] NCCL INFO AllReduce: 4096 Bytes -> Algo Tree proto LL channel{Lo..Hi}={0..1}"] * 3
                    + ["h:1:1 [0] NCCL INFO AllReduce: 4096 Bytes -> Algo Ring proto LL channel{Lo..Hi}={0..1}"])
    s = nd.summarise(nd.parse(log), "AllReduce", 4096)
    assert s.label == "Tree/LL" and s.alternatives == (("Tree", "LL", 3), ("Ring", "LL", 1))


def test_results_are_frozen() -> None:
    d = nd.parse(V224)
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.choices[0].algo = "Ring"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        nd.summarise(d, "all_reduce", 1).algo = "Ring"  # type: ignore[misc]


def test_module_imports_no_torch() -> None:
    import subprocess
    import sys

    code = "import sys, clustercheck.fabric.nccl_debug; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("spelling", ["all_reduce", "allreduce", "AllReduce", "ALL_REDUCE"])
def test_function_name_spellings(spelling: str) -> None:
    assert nd.function_name(spelling) == "AllReduce"
