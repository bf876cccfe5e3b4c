"""Hardware spec table: every value with its unit and its public source.

Direction is always in the field name, never implied:
- `unidirectional`: one direction (A -> B). Benchmarks (nccl-tests busbw, nvbandwidth unidirectional,
  ib_write_bw) report this, so limits compare against it.
- `bidirectional`: both directions added (duplex). Datasheets usually quote this number.
- `peer_*` is one GPU to one other GPU; `all_to_all_*` is one GPU to all its peers together (they differ on
  point-to-point fabrics such as AMD xGMI, Gaudi and NeuronLink; on NVSwitch systems they are equal).
Rates are payload rates after line encoding unless the field says `signalling`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SpecValue:
    value: float
    unit: str
    source: str


# -- sources (public) ---------------------------------------------------------------------------
_ML_ENG = ("stas00/ml-engineering network/README.md, intra-node tables "
           "(https://github.com/stas00/ml-engineering/blob/master/network/README.md)")
_ML_ENG_INTER = ("stas00/ml-engineering network/README.md, inter-node tables "
                 "(https://github.com/stas00/ml-engineering/blob/master/network/README.md)")
_LINE_RATES = ("per-direction payload line rates as tabulated in stas00/ml-engineering network/README.md "
               "(https://github.com/stas00/ml-engineering/blob/master/network/README.md)")
_H100_DS = "NVIDIA H100 Tensor Core GPU datasheet (https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet)"
_A100_DS = "NVIDIA A100 Tensor Core GPU datasheet (https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf)"
_H200_DS = "NVIDIA H200 Tensor Core GPU product page/datasheet (https://www.nvidia.com/en-us/data-center/h200/)"
_B200_DS = "NVIDIA DGX B200 / HGX B200 datasheet (https://www.nvidia.com/en-us/data-center/dgx-b200/): 64 TB/s HBM3e per 8 GPUs"
_GH200_DS = "NVIDIA GH200 Grace Hopper Superchip datasheet (https://resources.nvidia.com/en-us-grace-cpu/grace-hopper-superchip)"
_A40_DS = ("NVIDIA A40 product brief PB-09976-001 and datasheet (https://www.nvidia.com/en-us/data-center/a40/): "
           "696 GB/s GDDR6, NVLink 112.5 GB/s bidirectional")
_GA102 = ("NVIDIA Ampere GA102 GPU architecture whitepaper, Third-Generation NVLink (https://www.nvidia.com/content/dam/"
          "en-zz/Solutions/geforce/ampere/pdf/NVIDIA-ampere-GA102-GPU-Architecture-Whitepaper-V1.pdf): four x4 NVLink "
          "links, 14.0625 GB/s per link per direction, 56.25 GB/s per direction, 112.5 GB/s total between two GPUs")
_L40S_DS = "NVIDIA L40S datasheet (https://www.nvidia.com/en-us/data-center/l40s/): 864 GB/s GDDR6, no NVLink"
_MI250X = "AMD Instinct MI250X product page (https://www.amd.com/en/products/accelerators/instinct/mi200/mi250x.html)"
_MI300X = "AMD Instinct MI300X product page / platform brief (https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html)"
_MI325X = "AMD Instinct MI325X product page (https://www.amd.com/en/products/accelerators/instinct/mi300/mi325x.html)"
_GAUDI2 = ("Intel Habana HLS-Gaudi2 datasheet (https://habana.ai/wp-content/uploads/2023/10/HLS-Gaudi2_Datasheet_10_23.pdf): "
           "24 x 100GbE RoCE per card, 21 for the 7 peers (3 each), 3 for scale-out; 96 GB HBM2E at 2.45 TB/s")
_GAUDI3 = ("Intel Gaudi 3 AI accelerator white paper (https://www.intel.com/content/www/us/en/content-details/817486/"
           "intel-gaudi-3-ai-accelerator-white-paper.html): 24 x 200GbE RoCE, 128 GB HBM2e at 3.7 TB/s")
_TRN2 = ("AWS Neuron docs, Trainium2 architecture (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/"
         "neuron-hardware/trn2-arch.html), as read by ml-engineering: 128 GB/s per neighbour per direction, 4 neighbours")
_TFLOPS = ("dense (without sparsity) figures as tabulated in stas00/ml-engineering compute/accelerator/README.md, "
           "TFLOPS comparison table (https://github.com/stas00/ml-engineering/blob/master/compute/accelerator/README.md)")
_PCIE = "PCI-SIG base specifications (https://pcisig.com/specifications); ml-engineering PCIe table"
_IB = ("InfiniBand Trade Association roadmap (https://www.infinibandta.org/infiniband-roadmap/); "
       "ml-engineering IB signalling table (per direction)")
_EFA = "AWS EFA (https://aws.amazon.com/hpc/efa/) instance specs, as tabulated by ml-engineering"


def _pcie(gen: int, gts: float, enc: float, enc_name: str) -> dict[str, SpecValue]:
    """One PCIe generation at x16 and per lane; payload rate = GT/s x lanes x encoding efficiency / 8."""
    lane = gts * enc / 8
    src = f"{_PCIE}: Gen{gen} {gts:g} GT/s per lane, {enc_name}"
    return {
        "transfer_rate": SpecValue(gts, "GT/s", src),
        "encoding_efficiency": SpecValue(round(enc, 6), "ratio", src),
        "lanes": SpecValue(16, "count", f"{_PCIE}: a x16 link has 16 lanes"),
        "per_lane_unidirectional": SpecValue(round(lane, 4), "GB/s", src),
        "per_lane_bidirectional": SpecValue(round(2 * lane, 4), "GB/s", f"{src}; 2 x per-lane unidirectional"),
        "unidirectional": SpecValue(round(16 * lane, 2), "GB/s", f"{src}; x16; {_LINE_RATES}"),
        "bidirectional": SpecValue(round(32 * lane, 2), "GB/s", f"{src}; x16, 2 x unidirectional"),
    }


def _nvlink(gen: int, links: int, per_link: float, gpus: str, extra: str = "") -> dict[str, SpecValue]:
    src = f"NVLink {gen} ({gpus}), {links} links x {per_link:g} GB/s per direction: {_ML_ENG}{extra}"
    return {
        "links": SpecValue(links, "count", src),
        "per_link_unidirectional": SpecValue(per_link, "GB/s", src),
        "unidirectional": SpecValue(links * per_link, "GB/s", src),
        "bidirectional": SpecValue(2 * links * per_link, "GB/s", f"{src}; duplex = 2 x unidirectional"),
    }


def _xgmi(model: str, peer: float, src: str) -> dict[str, SpecValue]:
    base = f"{model} xGMI, {peer:g} GB/s per peer per direction, 7 peers: {_ML_ENG}; {src}"
    return {
        "peers": SpecValue(7, "count", base),
        "peer_unidirectional": SpecValue(peer, "GB/s", base),
        "peer_bidirectional": SpecValue(2 * peer, "GB/s", f"{base}; 2 x peer unidirectional"),
        "all_to_all_unidirectional": SpecValue(7 * peer, "GB/s", f"{base}; 7 x peer"),
        "all_to_all_bidirectional": SpecValue(14 * peer, "GB/s", f"{base}; 2 x 7 x peer"),
    }


def _gaudi(gen: int, nic_gbps: float, src: str) -> dict[str, SpecValue]:
    # 21 of 24 RoCE ports wire the 8 cards all-to-all (3 per peer); the other 3 go to scale-out.
    return {
        "nic_unidirectional": SpecValue(nic_gbps, "Gb/s", src),
        "peer_unidirectional": SpecValue(3 * nic_gbps, "Gb/s", f"{src}; 3 ports per peer ({_ML_ENG})"),
        "all_to_all_unidirectional": SpecValue(21 * nic_gbps, "Gb/s", f"{src}; 21 ports to 7 peers"),
        "scale_out_unidirectional": SpecValue(3 * nic_gbps, "Gb/s", f"{src}; 3 scale-out ports"),
    }


def _ib(name: str, lane_gbps: float) -> dict[str, SpecValue]:
    src = f"InfiniBand {name}, {lane_gbps:g} Gb/s per lane per direction: {_IB}; {_LINE_RATES}"
    return {
        "lane_unidirectional": SpecValue(lane_gbps, "Gb/s", src),
        "port_unidirectional": SpecValue(4 * lane_gbps, "Gb/s", f"{src}; 4x port"),
        "port_bidirectional": SpecValue(8 * lane_gbps, "Gb/s", f"{src}; 4x port, both directions"),
    }


def _efa(version: int, nics: int, nic_gbps: float, instance: str) -> dict[str, SpecValue]:
    src = f"EFA v{version} ({instance}): {nics} x {nic_gbps:g} Gb/s per node: {_EFA}; {_ML_ENG_INTER}"
    return {
        "nics": SpecValue(nics, "count", src),
        "nic_unidirectional": SpecValue(nic_gbps, "Gb/s", src),
        "node_unidirectional": SpecValue(nics * nic_gbps, "Gb/s", src),
    }


def _mem(bandwidth_gbs: float, capacity_gb: float, kind: str, src: str) -> dict[str, SpecValue]:
    return {
        "bandwidth": SpecValue(bandwidth_gbs, "GB/s", f"{kind} peak (read+write, not per direction): {src}"),
        "capacity": SpecValue(capacity_gb, "GB", f"{kind}: {src}"),
    }


def _tensor(model: str, vendor: str, tf32: float, half: float, fp8: float | None = None) -> dict[str, SpecValue]:
    """Dense tensor-core (matrix-core) peak TFLOP/s of one GPU. Datasheets often print the 2:4 structured
    sparsity figure, twice the dense one; these are dense, the rate a plain matmul can approach."""
    src = f"{model} dense tensor-core peak: {vendor}; {_TFLOPS}"
    out = {"tf32_dense": SpecValue(tf32, "TFLOP/s", src),
           "bf16_dense": SpecValue(half, "TFLOP/s", src),
           "fp16_dense": SpecValue(half, "TFLOP/s", f"{src}; FP16 with FP32 accumulate equals BF16 on this part")}
    if fp8 is not None:
        out["fp8_dense"] = SpecValue(fp8, "TFLOP/s", src)
    return out


SPECS: dict[str, dict[str, SpecValue]] = {
    # NVLink, per GPU (all links together)
    "nvlink1": _nvlink(1, 4, 20.0, "P100"),
    "nvlink2": _nvlink(2, 6, 25.0, "V100"),
    "nvlink3": _nvlink(3, 12, 25.0, "A100", f"; {_A100_DS}: 600 GB/s duplex"),
    "nvlink4": _nvlink(4, 18, 25.0, "H100/H200/GH200", f"; {_H100_DS}: 900 GB/s duplex"),
    "nvlink5": _nvlink(5, 18, 50.0, "B200/GB200", "; NVIDIA Blackwell datasheet: 1.8 TB/s duplex"),
    # GA102 (A40, RTX A6000) NVLink bridge pair: 4 links of 14.0625 GB/s per direction.
    "nvlink3_bridge": {
        "links": SpecValue(4, "count", _GA102),
        "per_link_unidirectional": SpecValue(14.0625, "GB/s", _GA102),
        "unidirectional": SpecValue(56.25, "GB/s", _GA102),
        "bidirectional": SpecValue(112.5, "GB/s", f"{_GA102}; {_A40_DS}"),
    },
    # Grace <-> Hopper chip-to-chip link of GH200.
    "nvlink_c2c": {
        "unidirectional": SpecValue(450.0, "GB/s", f"{_GH200_DS}: NVLink-C2C 900 GB/s total, 450 per direction"),
        "bidirectional": SpecValue(900.0, "GB/s", f"{_GH200_DS}: NVLink-C2C 900 GB/s"),
    },
    # PCIe. Gen3-5 use 128b/130b; Gen6/7 use PAM4 FLIT mode, 242 payload bytes per 256-byte flit.
    "pcie3_x16": _pcie(3, 8.0, 128 / 130, "128b/130b encoding"),
    "pcie4_x16": _pcie(4, 16.0, 128 / 130, "128b/130b encoding"),
    "pcie5_x16": _pcie(5, 32.0, 128 / 130, "128b/130b encoding"),
    "pcie6_x16": _pcie(6, 64.0, 242 / 256, "PAM4 FLIT mode, 242/256 payload per flit"),
    "pcie7_x16": _pcie(7, 128.0, 242 / 256, "PAM4 FLIT mode, 242/256 payload per flit"),
    # AMD Infinity Fabric (xGMI): point-to-point, one link per peer.
    "xgmi_mi250x": _xgmi("MI250X", 50.0, _MI250X),
    "xgmi_mi300x": _xgmi("MI300X", 64.0, _MI300X),
    "xgmi_mi325x": _xgmi("MI325X", 64.0, _MI325X),
    # Intel Gaudi: on-chip RoCE ports are both the scale-up and scale-out fabric.
    "gaudi2": _gaudi(2, 100.0, _GAUDI2),
    "gaudi3": _gaudi(3, 200.0, _GAUDI3),
    # AWS Trainium2 NeuronLink v3: a torus, 4 intra-node neighbours.
    "neuronlink3": {
        "peer_unidirectional": SpecValue(128.0, "GB/s", _TRN2),
        "neighbours": SpecValue(4, "count", _TRN2),
        "all_to_all_unidirectional": SpecValue(512.0, "GB/s", f"{_TRN2}; 4 x 128"),
        "all_to_all_bidirectional": SpecValue(1024.0, "GB/s", f"{_TRN2}; AWS quotes 1024 GB/s per chip, duplex"),
    },
    # InfiniBand, per port (4 lanes).
    "ib_edr": _ib("EDR", 25.0),
    "ib_hdr": _ib("HDR", 50.0),
    "ib_ndr": _ib("NDR", 100.0),
    "ib_xdr": _ib("XDR", 200.0),
    # AWS Elastic Fabric Adapter, per node.
    "efa_v1": _efa(1, 4, 100.0, "p4d"),
    "efa_v2": _efa(2, 32, 100.0, "p5"),
    "efa_v3": _efa(3, 16, 200.0, "p5en, trn2"),
    # Device memory per GPU model.
    # The two A100 SXM4 parts (PCI 0x20b0, 0x20b2) differ only in memory: each has its own profile.
    "hbm_a100_40gb": _mem(1555.0, 40, "HBM2", f"{_A100_DS}: A100 40GB SXM 1,555 GB/s"),
    "hbm_a100_80gb": _mem(2039.0, 80, "HBM2e", f"{_A100_DS}: A100 80GB SXM 2,039 GB/s"),
    "hbm_h100_sxm": _mem(3350.0, 80, "HBM3", _H100_DS),
    "hbm_h200": _mem(4800.0, 141, "HBM3e", _H200_DS),
    "hbm_b200": _mem(8000.0, 180, "HBM3e", _B200_DS),
    # The two GH200 parts (PCI 0x2342, 0x2348) differ only in memory: each has its own profile.
    "hbm_gh200_96gb": _mem(4000.0, 96, "HBM3", f"{_GH200_DS}: 96GB HBM3, 4 TB/s"),
    "hbm_gh200_144gb": _mem(4900.0, 144, "HBM3e", f"{_GH200_DS}: 144GB HBM3e, 4.9 TB/s"),
    "hbm_mi250x": _mem(3276.8, 128, "HBM2e", _MI250X),
    "hbm_mi300x": _mem(5300.0, 192, "HBM3", _MI300X),
    "hbm_mi325x": _mem(6000.0, 256, "HBM3e", _MI325X),
    "hbm_gaudi2": _mem(2450.0, 96, "HBM2E", _GAUDI2),
    "hbm_gaudi3": _mem(3700.0, 128, "HBM2e", _GAUDI3),
    "gddr6_a40": _mem(696.0, 48, "GDDR6", _A40_DS),
    "gddr6_l40s": _mem(864.0, 48, "GDDR6", _L40S_DS),
    # Tensor-core throughput per GPU model, dense (the datasheets' "with sparsity" figures halved).
    "tensor_a100": _tensor("A100 SXM4 (no FP8)", f"{_A100_DS}: BF16/FP16 312 | 624 with sparsity, TF32 156 | 312",
                           156.0, 312.0),
    "tensor_h100_sxm": _tensor("H100 SXM5", f"{_H100_DS}: BF16/FP16 1,979, FP8 3,958, TF32 989 TFLOPS, each "
                               "marked 'with sparsity', halved", 494.5, 989.0, 1979.0),
    "tensor_h200": _tensor("H200 SXM", f"{_H200_DS}: BF16/FP16 1,979, FP8 3,958, TF32 989 TFLOPS with sparsity, "
                           "halved (the H100 SXM's compute)", 494.5, 989.0, 1979.0),
    "tensor_gh200": _tensor("GH200 (Hopper GPU)", f"{_GH200_DS}: BF16/FP16 1,979, FP8 3,958, TF32 989 TFLOPS with "
                            "sparsity, halved", 494.5, 989.0, 1979.0),
    "tensor_b200": _tensor("B200 (HGX/DGX B200)", "NVIDIA DGX B200 datasheet (https://resources.nvidia.com/en-us-dgx-"
                           "systems/dgx-b200-datasheet): 72 PFLOPS FP8 training per 8 GPUs, with sparsity; dense per GPU "
                           "FP8 4,500, BF16/FP16 2,250, TF32 1,125", 1125.0, 2250.0, 4500.0),
    "tensor_l40s": _tensor("L40S", f"{_L40S_DS}: BF16/FP16 362.05 | 733, FP8 733 | 1,466, TF32 183 | 366 TFLOPS "
                           "(dense | with sparsity)", 183.0, 362.05, 733.0),
    "tensor_a40": _tensor("A40 (no FP8)", f"{_A40_DS}; datasheet BF16/FP16 149.7 | 299.4, TF32 74.8 | 149.6 TFLOPS "
                          "(dense | with sparsity)", 74.8, 149.7),
    "tensor_mi300x": _tensor("MI300X", f"{_MI300X}: peak BF16/FP16 1307.4, FP8 2614.9, TF32 653.7 TFLOPS dense "
                             "(AMD prints the structured-sparsity figures separately, at twice these)",
                             653.7, 1307.4, 2614.9),
    "tensor_mi325x": _tensor("MI325X", f"{_MI325X}: peak BF16/FP16 1307.4, FP8 2614.9, TF32 653.7 TFLOPS dense, "
                             "the MI300X's compute", 653.7, 1307.4, 2614.9),
}


def lookup(name: str, field: str) -> SpecValue:
    """Return SPECS[name][field]; KeyError with the valid choices when absent."""
    try:
        entry = SPECS[name]
    except KeyError:
        raise KeyError(f"no spec {name!r}; known: {', '.join(sorted(SPECS))}") from None
    try:
        return entry[field]
    except KeyError:
        raise KeyError(f"spec {name!r} has no field {field!r}; known: {', '.join(sorted(entry))}") from None
