"""Profiles derived from the spec table for any known GPU model and count: PCI device id -> model ->
hardware roles (NVLink or xGMI, PCIe or NVLink-C2C, HBM, tensor cores) -> spec-relative `defaults:` limits.
A node with 1, 2, 4 or 8 GPUs of a known model gets a profile instead of "no profile matches".

A hand-written profile in thresholds/ always wins over a derived one (detection tries the files first;
a derived name equal to a file's, e.g. h100-sxm-8x, is the file's). Derived profiles set only `defaults:`,
so every check of a measured kind is judged by its kind's limit, and the verdict's provenance says so
(`derived:h100-sxm-4x:14 defaults.all_reduce.busbw`); `derived_text` is the YAML they are read from, a
starting point for a hand-written profile (docs/profiles.md).

Every PCI device id below was checked against the PCI ID database, pci.ids version 2026.08.22
(https://github.com/pciutils/pciids, https://pci-ids.ucw.cz); the names are quoted as it gives them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from clustercheck import yamlfile
from clustercheck.judging.thresholds import Profile, parse_profile

_ML_NET = "https://github.com/stas00/ml-engineering/blob/master/network/README.md"
_MAMF = "https://github.com/stas00/ml-engineering/blob/master/compute/accelerator/README.md"
_DCGM = "https://github.com/NVIDIA/DCGM/blob/master/nvvs/diag-skus.yaml.in"


@dataclass(frozen=True)
class Floor:
    """One spec-relative floor: the fraction of a spec value, and why that fraction (public sources)."""

    fraction: float
    source: str


@dataclass(frozen=True)
class Model:
    slug: str                      # derived profile names are <slug>-<count>x
    pci_names: str                 # the device ids' names in the PCI ID database
    device_ids: tuple[int, ...]
    gpu_model: str                 # text the GPU product name contains (expect.gpu_model)
    fabric: str                    # GPU<->GPU: "nvlink" (links > 0), "xgmi", or "" (PCIe, or none known)
    link_spec: str                 # spec of the NVLink generation ("" for none)
    links: int                     # NVLinks per GPU on the usual board (0: none)
    pcie: str                      # PCIe spec of the GPU's host link ("" where the host link is NVLink-C2C)
    hbm: str
    tensor: str
    memory: Floor                  # device_memory bandwidth, of spec.hbm.bandwidth
    gemm: Floor                    # gemm tflops, of spec.tensor.bf16_dense
    max_gpus: int = 8


# -- floors shared by several models ---------------------------------------------------------------------
_NVLINK_ALLREDUCE = Floor(0.6, f"all_reduce busbw with Ring on 8 GPUs at 16 GiB measured H200 367.2 of 450 (82%), "
                               f"B200 682.2 of 900 (76%), A100 234.89 of 300 (78%) ({_ML_NET}, SHARP and Real network "
                               f"throughput); no public figure for fewer GPUs; clustercheck's floor for a derived "
                               f"profile: 0.6 of the NVLink rate, for any all_reduce judged at 1 GiB or more")
_NVLINK_P2P = Floor(0.7, f"worst GPU pair, unidirectional: H100 376 of 450 (83%), A100 274 of 300 (91%), GB200 746 of "
                         f"900 (83%) (p2pBandwidthLatencyTest in {_ML_NET}); clustercheck's floor 0.7 of the NVLink rate")
_XGMI_ALLREDUCE = Floor(0.6, f"8x MI300X all_reduce_bench 4 GiB busbw measured 312.9 of 7 x 64 = 448 (70%; {_ML_NET}, "
                             f"Peer-to-peer bandwidth); clustercheck's floor 0.6 of the xGMI links to the group's peers")
_XGMI_P2P = Floor(0.6, f"one xGMI link per pair; MI300X 2-GPU all_reduce busbw measured 47.7 of 64 (74%; {_ML_NET}, "
                       f"Peer-to-peer bandwidth); clustercheck's floor 0.6")
_PCIE_ALLREDUCE = Floor(0.1, "8x A40 nccl-tests measured 3.9 GB/s across NODE and 1.4 GB/s across SYS with "
                             "NCCL_P2P_DISABLE=1, the broken path (https://github.com/eugenesiow/LLM-Insights/blob/master/"
                             "infrastructure/hardware/README.md); clustercheck's floor 0.1 of the PCIe x16 rate fails it")
_PCIE_P2P = Floor(0.5, "no public per-pair PCIe measurement found; clustercheck's floor half the PCIe x16 rate, as "
                       "in the shipped a40-nvbridge-8x profile")
_HOST = {
    "pcie5_x16": Floor(0.75, f"clustercheck's floor: 0.75 of PCIe Gen5 x16 63.0 GB/s (47.3). Gen5 x16 measured: H200 "
                             f"nvbandwidth H2D 55.43 / D2H 55.06 GB/s, 88% / 87% ({_ML_NET}, PCIe); Azure gates 48 "
                             "(check_gpu_bw 48 in https://github.com/Azure/azurehpc-health-checks/blob/main/conf/"
                             "nd96isr_h100_v5.conf)"),
    "pcie4_x16": Floor(0.75, "clustercheck's floor: 0.75 of PCIe Gen4 x16 31.5 GB/s (23.6). Gen4 x16 measured: Azure ND "
                             "A100 v4 nvbandwidth H2D 26.28 GB/s, 83% (https://github.com/Azure/AI-benchmarking-guide/"
                             "blob/main/Azure_Results/ND_A100_v4_results.md)"),
    "nvlink_c2c": Floor(0.5, f"no public GH200 H2D floor found; GB300 DGX Station nvbandwidth over NVLink-C2C measured "
                             f"H2D 359.05 / D2H 377.15 GB/s ({_ML_NET}, NVLink-C2C); clustercheck's floor half the C2C rate"),
}
_DCGM_H100 = f"DCGM's H100 (2330) minimum_bandwidth 1905000 MB/s = 0.57 x 3350 ({_DCGM})"


def _mamf(part: str, measured: str) -> str:
    return f"{part} bf16 matmul measured {measured} (MAMF table in {_MAMF}); clustercheck's floor leaves room for " \
           f"the 8192-square shape and clock spread"


MODELS: tuple[Model, ...] = (
    Model("h100-sxm", "GH100 [H100 SXM5 80GB]", (0x2330,), "H100", "nvlink", "nvlink4", 18, "pcie5_x16",
          "hbm_h100_sxm", "tensor_h100_sxm",
          Floor(0.55, f"{_DCGM_H100}; clustercheck's floor 0.55, rounded down"),
          Floor(0.6, _mamf("H100 SXM", "794.5 of 989 TFLOPS (80.3%)"))),
    Model("h200-sxm", "GH100 [H200 SXM 141GB]", (0x2335,), "H200", "nvlink", "nvlink4", 18, "pcie5_x16",
          "hbm_h200", "tensor_h200",
          Floor(0.46, f"DCGM's H200 (233b) minimum_bandwidth 2212500 MB/s = 0.46 x 4800 ({_DCGM}); its 2335 entry "
                      "lists 2333, an apparent units slip"),
          Floor(0.6, _mamf("H200 SXM (as H100 SXM)", "794.5 of 989 TFLOPS (80.3%)"))),
    # One model per memory variant (A100 40/80GB, GH200 96/144GB): a floor on the smaller part's bandwidth let a
    # degraded bigger part pass.
    Model("a100-sxm", "GA100 [A100 SXM4 40GB]", (0x20B0,), "A100", "nvlink", "nvlink3", 12,
          "pcie4_x16", "hbm_a100_40gb", "tensor_a100",
          Floor(0.57, f"DCGM's 20b0 entry lists 137500, an apparent units slip; its A100-SXM4-80GB (20b2) "
                      f"minimum_bandwidth 1173000 MB/s = 0.575 x 2039 ({_DCGM}); clustercheck applies 0.57 to the "
                      "40GB part's 1555"),
          Floor(0.65, _mamf("A100 SXM", "271.2 of 312 TFLOPS (86.9%)"))),
    Model("a100-sxm-80gb", "GA100 [A100 SXM4 80GB]", (0x20B2,), "A100", "nvlink", "nvlink3", 12,
          "pcie4_x16", "hbm_a100_80gb", "tensor_a100",
          Floor(0.57, f"DCGM's A100-SXM4-80GB (20b2) minimum_bandwidth 1173000 MB/s = 0.575 x 2039 ({_DCGM}); "
                      "clustercheck's floor 0.57 x 2039 = 1162, just below it"),
          Floor(0.65, _mamf("A100 SXM", "271.2 of 312 TFLOPS (86.9%)"))),
    Model("b200", "GB100 [B200]", (0x2901,), "B200", "nvlink", "nvlink5", 18, "pcie5_x16", "hbm_b200", "tensor_b200",
          Floor(0.509, f"DCGM's B200 (2901) minimum_bandwidth 4072500 MB/s = 0.509 x 8000 ({_DCGM}), NVIDIA's own floor"),
          Floor(0.55, _mamf("B200 SXM", "1745 of 2250 TFLOPS (77.6%)"))),
    Model("gh200", "GH100 [GH200 120GB / 480GB]", (0x2342,), "GH200", "nvlink", "nvlink4",
          0, "", "hbm_gh200_96gb", "tensor_gh200",
          Floor(0.53, f"DCGM's GH200 96GB (2342) minimum_bandwidth 2130000 MB/s = 0.53 x 4000 ({_DCGM}); "
                      "clustercheck's floor 0.53 of the 96GB part's 4000 (2120)"),
          Floor(0.6, _mamf("GH200", "828.6 of 989 TFLOPS (83.8%)")), max_gpus=4),
    Model("gh200-144gb", "GH100 [GH200 144G HBM3e]", (0x2348,), "GH200", "nvlink", "nvlink4",
          0, "", "hbm_gh200_144gb", "tensor_gh200",
          Floor(0.477, f"DCGM's 2348 (GH200 144GB HBM3e) minimum_bandwidth 2340000 MB/s = 0.4776 x 4900 ({_DCGM}); "
                       "clustercheck's floor 0.477 of the 144GB part's 4900 (2337), at NVIDIA's own"),
          Floor(0.6, _mamf("GH200", "828.6 of 989 TFLOPS (83.8%)")), max_gpus=4),
    Model("l40s", "AD102GL [L40S]", (0x26B9,), "L40S", "", "", 0, "pcie4_x16", "gddr6_l40s", "tensor_l40s",
          Floor(0.55, f"clustercheck's floor 0.55 as for H100 ({_DCGM_H100}); DCGM's own L40S (26b9) minimum_bandwidth "
                      "525000 MB/s = 0.61 x 864 is stricter"),
          Floor(0.45, f"no public L40S matmul measurement found; clustercheck's floor 0.45, below every part in the "
                      f"MAMF table ({_MAMF}: 51-87% of dense peak)")),
    Model("a40", "GA102GL [A40]", (0x2235,), "A40", "", "", 0, "pcie4_x16", "gddr6_a40", "tensor_a40",
          Floor(0.55, f"clustercheck's floor 0.55 as for H100 ({_DCGM_H100}); DCGM's own A40 (2235) minimum_bandwidth "
                      "423675 MB/s = 0.61 x 696 is stricter"),
          Floor(0.45, f"no public A40 matmul measurement found; clustercheck's floor 0.45, below every part in the "
                      f"MAMF table ({_MAMF}: 51-87% of dense peak)")),
    Model("mi300x", "Aqua Vanjaram [Instinct MI300X]", (0x74A1,), "MI300X", "xgmi", "xgmi_mi300x", 0, "pcie5_x16",
          "hbm_mi300x", "tensor_mi300x",
          Floor(0.55, f"no public vendor floor for MI300X; clustercheck's floor follows DCGM's for H100 ({_DCGM_H100}), "
                      "rounded down to 0.55"),
          Floor(0.35, f"MI300X bf16 matmul measured 668.4 of 1300 TFLOPS (51.4%) with PYTORCH_TUNABLEOP_ENABLED=1, "
                      f"about 450 with ROCm 6.1 (MAMF table in {_MAMF}); clustercheck's floor 0.35 (458)")),
    Model("mi325x", "Aqua Vanjaram [Instinct MI325X]", (0x74A5,), "MI325X", "xgmi", "xgmi_mi325x", 0, "pcie5_x16",
          "hbm_mi325x", "tensor_mi325x",
          Floor(0.55, f"no public vendor floor for MI325X; clustercheck's floor follows DCGM's for H100 ({_DCGM_H100}), "
                      "rounded down to 0.55"),
          Floor(0.35, f"MI325X bf16 matmul measured 784.9 of 1300 TFLOPS (60.4%) with tunable ops (MAMF table in "
                      f"{_MAMF}); clustercheck's floor 0.35, as MI300X")),
)
_BY_ID = {device: model for model in MODELS for device in model.device_ids}
_NAME = re.compile(r"(?P<count>[1-9][0-9]?)x(?:-nvl(?P<links>[0-9]{1,2}))?")


def known_models() -> tuple[Model, ...]:
    return MODELS


def model_of(device_id: int) -> Model | None:
    return _BY_ID.get(device_id)


def integral_nvlink(device_ids: tuple[int, ...]) -> int:
    """The NVLinks per GPU that every model of `device_ids` has on its board (the SXM parts: 18 on H100, 12
    on A100), 0 when one of them has none built in or is not in the table. Such a GPU with fewer links is
    that board with links disabled or gone, never a smaller platform (platform.matches)."""
    models = [_BY_ID.get(i) for i in device_ids]
    if not models or any(m is None or m.fabric != "nvlink" or not m.links for m in models):
        return 0
    return min(m.links for m in models if m is not None)


def _links(model: Model, gpu_count: int, nvlinks_per_gpu: int | None) -> int:
    """NVLinks per GPU the profile assumes: what NVML found, else the usual board's; none for one GPU."""
    if gpu_count < 2 or model.fabric != "nvlink":
        return 0
    return model.links if nvlinks_per_gpu is None else nvlinks_per_gpu


def derived_name(model: Model, gpu_count: int, nvlinks_per_gpu: int | None = None) -> str:
    links = _links(model, gpu_count, nvlinks_per_gpu)
    return f"{model.slug}-{gpu_count}x" + (f"-nvl{links}" if gpu_count >= 2 and links != model.links else "")


def derived_text(device_id: int, gpu_count: int, nvlinks_per_gpu: int | None = None) -> str | None:
    """The YAML of the derived profile (None: unknown device id, or a count this model does not come in)."""
    model = model_of(device_id)
    if model is None or not 1 <= gpu_count <= model.max_gpus:
        return None
    links = _links(model, gpu_count, nvlinks_per_gpu)
    name = derived_name(model, gpu_count, nvlinks_per_gpu)
    roles = {"hbm": model.hbm, "tensor": model.tensor}
    if model.pcie:
        roles["pcie"] = model.pcie
    else:
        roles["c2c"] = "nvlink_c2c"
    if links:
        roles["nvlink"] = model.link_spec
    if model.fabric == "xgmi":
        roles["xgmi"] = model.link_spec
    detect = {"gpu_count": gpu_count, "pci_device_ids": "[" + ", ".join(f"0x{i:04x}" for i in model.device_ids) + "]"}
    if gpu_count >= 2 and model.fabric == "nvlink":
        detect["nvlinks_per_gpu"] = links
    host = "pcie" if model.pcie else "c2c"
    host_floor = _HOST[model.pcie or "nvlink_c2c"]
    lines = [f"# Derived by clustercheck/derive.py from the spec table: {gpu_count} x {model.pci_names}.",
             f"platform: {name}",
             f"description: {_quote(_description(model, gpu_count, links))}",
             "detect:", *[f"  {k}: {v}" for k, v in detect.items()],
             "hardware:", *[f"  {role}: {spec}" for role, spec in roles.items()],
             "defaults:",
             "  host_device:",
             *_metric("h2d", f">= {host_floor.fraction:g} * spec.{host}.unidirectional", "GB/s", host_floor.source),
             *_metric("d2h", f">= {host_floor.fraction:g} * spec.{host}.unidirectional", "GB/s", host_floor.source),
             "  device_memory:",
             *_metric("bandwidth", f">= {model.memory.fraction:g} * spec.hbm.bandwidth", "GB/s", model.memory.source),
             "  gemm:",
             "    when: {dtype: [auto, bfloat16, float16]}",
             *_metric("tflops", f">= {model.gemm.fraction:g} * spec.tensor.bf16_dense", "TFLOP/s", model.gemm.source)]
    # NVIDIA's own tools judged on the same floors as clustercheck's measurements of the same path: nvbandwidth's
    # host<->device copies as host_device, its GPU-pair copies as p2p, nccl-tests' busbw as all_reduce (its bus
    # bandwidth is defined to compare with the hardware rate whatever the collective, NVIDIA/nccl-tests
    # doc/PERFORMANCE.md). A default on a testcase a check does not run does not judge it (kinds/nvbandwidth.py).
    host_expr = f">= {host_floor.fraction:g} * spec.{host}.unidirectional"
    native = ["  nvbandwidth:", *_metric("host_to_device_memcpy_ce", host_expr, "GB/s", host_floor.source),
              *_metric("device_to_host_memcpy_ce", host_expr, "GB/s", host_floor.source)]
    peers = _peer_limits(model, gpu_count, links)
    if peers:
        (ar_expr, ar_floor), (p2p_expr, p2p_floor) = peers
        lines += ["  all_reduce:", "    when: {min_size: 1GiB}", *_metric("busbw", ar_expr, "GB/s", ar_floor.source),
                  "  p2p:", *_metric("p2p_min", p2p_expr, "GB/s", p2p_floor.source),
                  "  nccl_tests:", "    when: {min_size: 1GiB}", *_metric("busbw", ar_expr, "GB/s", ar_floor.source)]
        for way in ("read", "write"):
            native += _metric(f"device_to_device_memcpy_{way}_ce", p2p_expr, "GB/s", p2p_floor.source)
    lines += native
    expect = {"gpu_count": gpu_count, "gpu_model": model.gpu_model}
    if gpu_count >= 2 and links:
        expect["nvlinks_per_gpu"] = links
    lines += ["expect:", *[f"  {k}: {v}" for k, v in expect.items()]]
    return "\n".join(lines) + "\n"


def _peer_limits(model: Model, count: int, links: int) -> tuple[tuple[str, Floor], tuple[str, Floor]] | None:
    """all_reduce busbw and p2p_min expressions over the GPUs' fabric; None for one GPU or no known fabric."""
    if count < 2:
        return None
    if links:
        rate = "spec.nvlink.unidirectional" if links == model.links else f"{links} * spec.nvlink.per_link_unidirectional"
        return ((f">= {_NVLINK_ALLREDUCE.fraction:g} * {rate}", _NVLINK_ALLREDUCE),
                (f">= {_NVLINK_P2P.fraction:g} * {rate}", _NVLINK_P2P))
    if model.fabric == "xgmi":  # one link to each peer: the group's all-to-all rate is (count - 1) links
        return ((f">= {_XGMI_ALLREDUCE.fraction:g} * {count - 1} * spec.xgmi.peer_unidirectional", _XGMI_ALLREDUCE),
                (f">= {_XGMI_P2P.fraction:g} * spec.xgmi.peer_unidirectional", _XGMI_P2P))
    if model.pcie:
        return ((f">= {_PCIE_ALLREDUCE.fraction:g} * spec.pcie.unidirectional", _PCIE_ALLREDUCE),
                (f">= {_PCIE_P2P.fraction:g} * spec.pcie.unidirectional", _PCIE_P2P))
    return None  # GH200 superchips without NVLink between them: no public figure for their path


def _description(model: Model, count: int, links: int) -> str:
    fabric = (f"NVLink {links} links per GPU" if links else "xGMI point-to-point" if model.fabric == "xgmi"
              else "no NVLink peers" if count == 1 else "PCIe between GPUs")
    return f"{count}x {model.gpu_model}, {fabric} (derived from the spec table)"


def _metric(metric: str, expression: str, unit: str, source: str) -> list[str]:
    return [f"    {metric}:", f"      limit: {_quote(expression)}", f"      unit: {unit}", f"      source: {_quote(source)}"]


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def derived_profile(device_id: int, gpu_count: int, nvlinks_per_gpu: int | None = None) -> Profile | None:
    """The profile for `gpu_count` GPUs of the model with PCI `device_id`, NVLinks as NVML counts them
    (None: unknown, the usual board's); None for an unknown model or count."""
    text = derived_text(device_id, gpu_count, nvlinks_per_gpu)
    if text is None:
        return None
    model = _BY_ID[device_id]
    name = derived_name(model, gpu_count, nvlinks_per_gpu)
    return parse_profile(yamlfile.loads(text, f"derived:{name}"), f"derived:{name}", name)


def parse_name(name: str) -> tuple[Model, int, int | None] | None:
    """(model, count, NVLinks per GPU or None for the usual board's) of a derived name such as h100-sxm-4x."""
    for model in MODELS:
        if not name.startswith(model.slug + "-"):
            continue
        m = _NAME.fullmatch(name[len(model.slug) + 1:])
        if m is None:
            continue
        count = int(m["count"])
        links = None if m["links"] is None else int(m["links"])
        if count <= model.max_gpus and derived_name(model, count, links) == name:  # one spelling (no -1x-nvl3)
            return model, count, links
    return None


def derived_by_name(name: str) -> Profile | None:
    """The derived profile a name stands for (`platforms show h100-sxm-4x`); None when it names none."""
    parsed = parse_name(name)
    if parsed is None:
        return None
    model, count, links = parsed
    return derived_profile(model.device_ids[0], count, links)
