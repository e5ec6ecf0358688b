//! Published measurements (`shared/calibration/measurements.toml`) and the
//! simulator's prediction for each.
//!
//! A case names a system in words; [`predict`] reads the GPU, PCIe
//! generation, NIC count and speed, memory kind and link description from
//! that text and the case's fields, picks the matching gpucomm-topo preset
//! ([`machine_for`]), and runs
//! the command the measurement used (nccl-tests, p2pBandwidthLatencyTest,
//! bandwidthTest). No case-specific constant is involved: a case the
//! resolver cannot read is an error, not a guess.

use gpucomm_algo::Collective;
use serde::Deserialize;

use crate::SimError;
use crate::collective::{AlgoChoice, CollOptions, simulate};
use crate::machine::{Engine, Machine, NvFabric};
use crate::model;
use crate::transfer::{Endpoint, copy, p2p};

/// One published measurement.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Case {
    /// Identifier.
    pub id: String,
    /// The system, in words.
    pub system: String,
    /// What was measured: busbw, algbw, p2p_bidirectional_bandwidth,
    /// p2p_unidirectional_bandwidth, p2p_latency_us, h2d_bandwidth, d2h_bandwidth.
    pub metric: String,
    /// Collective, for busbw/algbw.
    #[serde(default)]
    pub collective: Option<String>,
    /// Algorithm, when the measurement forced one.
    #[serde(default)]
    pub algorithm: Option<String>,
    /// GPUs in the run.
    #[serde(default)]
    pub gpus: Option<usize>,
    /// Nodes in the run.
    #[serde(default)]
    pub nodes: Option<usize>,
    /// Message size in bytes (for a host copy, the copy's size; without
    /// it, bandwidthTest's default).
    #[serde(default)]
    pub bytes: Option<u64>,
    /// The measured value (GB/s or us).
    pub value: f64,
    /// Where it was published.
    #[serde(default)]
    pub source: String,
}

#[derive(Deserialize)]
struct File {
    case: Vec<Case>,
}

/// Parses the calibration file. A case must measure something: a size of
/// 0 bytes or a value that is not a positive number is refused (its
/// prediction would be 0, or its error not a number).
pub fn parse(text: &str) -> Result<Vec<Case>, SimError> {
    let f: File =
        toml::from_str(text).map_err(|e| SimError::Model(format!("calibration file: {e}")))?;
    for c in &f.case {
        if c.bytes == Some(0) {
            return Err(SimError::Model(format!(
                "case {}: bytes must be positive",
                c.id
            )));
        }
        if !(c.value.is_finite() && c.value > 0.0) {
            return Err(SimError::Model(format!(
                "case {}: value must be a positive number (got {})",
                c.id, c.value
            )));
        }
    }
    Ok(f.case)
}

/// A prediction with the scenario that produced it.
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    /// Predicted value, same unit as the case.
    pub value: f64,
    /// What was simulated (machine, command).
    pub scenario: String,
}

impl Prediction {
    /// Relative error against a measured value.
    pub fn error(&self, measured: f64) -> f64 {
        (self.value - measured) / measured
    }
}

fn has(s: &str, w: &str) -> bool {
    s.to_ascii_lowercase().contains(&w.to_ascii_lowercase())
}

/// The machine a system description names: the gpucomm-topo preset of its
/// GPU or system (read with [`Machine::from_topology`]), with the PCIe
/// generation, NICs and SHARP the text states.
pub fn machine_for(system: &str) -> Result<Machine, SimError> {
    machine_named(system, false)
}

/// As [`machine_for`], for a host copy case: a GPU no preset has, in a
/// text that names its PCIe generation, is read as the generic PCIe
/// server's (what a host copy depends on: the link and the host). Other
/// metrics refuse an unknown GPU.
pub fn copy_machine_for(system: &str) -> Result<Machine, SimError> {
    machine_named(system, true)
}

fn machine_named(system: &str, pcie_fallback: bool) -> Result<Machine, SimError> {
    let base = if has(system, "NVL72") {
        "gb200-nvl72"
    } else if has(system, "GB200") || has(system, "B200") {
        "dgx-b200"
    } else if has(system, "H200") {
        "hgx-h200"
    } else if has(system, "H100") || has(system, "H800") {
        "dgx-h100"
    } else if has(system, "A100") || has(system, "A800") {
        if has(system, "A100 PCIe") {
            "pcie-8gpu"
        } else {
            "dgx-a100"
        }
    } else if has(system, "DGX-2")
        || has(system, "DGX2")
        || has(system, "V100") && has(system, "NVSwitch")
    {
        "dgx2"
    } else if has(system, "V100") || has(system, "DGX-1") {
        "dgx1-v100"
    } else if has(system, "RTX 4090") || has(system, "RTX4090") {
        "workstation-rtx4090"
    } else if pcie_fallback && has(system, "PCIe Gen") {
        "pcie-8gpu"
    } else {
        return Err(SimError::Model(format!(
            "cannot tell the GPU of system {system:?}"
        )));
    };
    let mut m = Machine::preset(base)?;
    // "with SHARP", "NVLS + SHARP" (not "without SHARP", "no SHARP").
    if has(system, "SHARP") && !has(system, "without SHARP") && !has(system, "no SHARP") {
        m = m.with_cluster_options(&gpucomm_topo::ClusterOptions {
            sharp: true,
            ..Default::default()
        })?;
    }
    // "PCIe Gen4 x16"
    let lower = system.to_ascii_lowercase();
    if let Some(i) = lower.find("gen") {
        if let Some(d) = lower[i + 3..].chars().next().and_then(|c| c.to_digit(10)) {
            m.node.pcie_gen = d as u8;
        }
    }
    // "8x HDR 200 Gb/s" or "8x 400G"
    if let Some((count, gbit)) = parse_nics(&lower) {
        m.node.nics = count;
        m.node.nic_gbps = gbit / 8.0;
    }
    Ok(m)
}

fn parse_nics(s: &str) -> Option<(usize, f64)> {
    let words: Vec<&str> = s
        .split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')')
        .collect();
    for (i, w) in words.iter().enumerate() {
        let Some(n) = w.strip_suffix('x').and_then(|n| n.parse::<usize>().ok()) else {
            continue;
        };
        // Look ahead a few words for a speed and a NIC word.
        let rest = &words[i + 1..(i + 6).min(words.len())];
        let joined = rest.join(" ");
        if !(joined.contains("infiniband")
            || joined.contains("nic")
            || joined.contains("gb/s")
            || joined.contains("roce"))
        {
            continue;
        }
        for (j, r) in rest.iter().enumerate() {
            let num = r.trim_end_matches("gb/s").trim_end_matches('g');
            if let Ok(v) = num.parse::<f64>() {
                if v >= 10.0
                    && (r.ends_with('g')
                        || rest.get(j + 1).is_some_and(|x| x.starts_with("gb"))
                        || r.ends_with("gb/s"))
                {
                    return Some((n, v));
                }
            }
        }
    }
    None
}

/// Size p2pBandwidthLatencyTest copies (10 M ints, its `numElems`).
pub const P2P_TEST_BYTES: u64 = 40_000_000;
/// Size bandwidthTest copies by default (32 MB, its `DEFAULT_SIZE`).
pub const BANDWIDTH_TEST_BYTES: u64 = 32 << 20;

/// Predicts a case.
pub fn predict(case: &Case) -> Result<Prediction, SimError> {
    let m = match case.metric.as_str() {
        "h2d_bandwidth" | "d2h_bandwidth" => copy_machine_for(&case.system)?,
        _ => machine_for(&case.system)?,
    };
    match case.metric.as_str() {
        "busbw" | "algbw" | "time_us" => {
            let coll = match case.collective.as_deref().unwrap_or("all_reduce") {
                "all_reduce" => Collective::AllReduce,
                "all_gather" => Collective::AllGather,
                "reduce_scatter" => Collective::ReduceScatter,
                "broadcast" => Collective::Broadcast { root: 0 },
                "reduce" => Collective::Reduce { root: 0 },
                "all_to_all" | "alltoall" => Collective::AllToAll,
                "sendrecv" => Collective::SendRecv { shift: 1 },
                other => return Err(SimError::Model(format!("unknown collective {other}"))),
            };
            let nodes = case.nodes.unwrap_or(1).max(1);
            let gpus = case.gpus.unwrap_or(m.node.gpus * nodes);
            let mut m = m;
            if gpus % nodes != 0 {
                return Err(SimError::Model(format!(
                    "{gpus} GPUs do not split over {nodes} nodes"
                )));
            }
            m.gpus_used = Some(gpus / nodes);
            let bytes = case
                .bytes
                .ok_or_else(|| SimError::Model(format!("case {} has no bytes", case.id)))?;
            let algorithm = match case.algorithm.as_deref() {
                None => None,
                Some(a) => Some(
                    AlgoChoice::parse(a)
                        .ok_or_else(|| SimError::Model(format!("unknown algorithm {a}")))?,
                ),
            };
            let f = m.fabric(Engine::Nccl, nodes)?;
            let r = simulate(
                &f,
                coll,
                bytes,
                &CollOptions {
                    algorithm: algorithm.into(),
                    ..Default::default()
                },
            )?;
            let value = match case.metric.as_str() {
                "busbw" => r.busbw_gbps,
                "algbw" => r.algbw_gbps,
                _ => r.time.as_us(),
            };
            Ok(Prediction {
                value,
                scenario: format!(
                    "gpucomm sim {} --topology {} --nodes {nodes} --gpus {} -b {bytes} -e {bytes} ({})",
                    coll.name(),
                    m.name,
                    gpus / nodes,
                    r.algorithm.name()
                ),
            })
        }
        "p2p_bidirectional_bandwidth" | "p2p_unidirectional_bandwidth" | "p2p_latency_us" => {
            let f = m.fabric(Engine::CopyEngine, 1)?;
            let want_links = if has(&case.system, "two NVLink") {
                Some(2)
            } else if has(&case.system, "one NVLink") {
                Some(1)
            } else if has(&case.system, "no NVLink") {
                Some(0)
            } else if has(&case.system, "over NVLink")
                || has(&case.system, "NVLink") && !has(&case.system, "disabled")
            {
                Some(1)
            } else {
                None
            };
            let disabled = has(&case.system, "P2P disabled");
            let g = m.node.gpus;
            let pair = (0..g)
                .flat_map(|a| (a + 1..g).map(move |b| (a, b)))
                .find(|&(a, b)| match want_links {
                    Some(k) => {
                        f.nvlink_count(a, b) == k
                            && (k > 0 || !matches!(m.node.nvlink, NvFabric::Switch { .. }))
                    }
                    None => true,
                })
                .ok_or_else(|| {
                    SimError::Model(format!(
                        "no GPU pair in {} matches {:?}",
                        m.name, case.system
                    ))
                })?;
            let bidir = case.metric == "p2p_bidirectional_bandwidth";
            let r = p2p(&m, pair.0, pair.1, bidir, !disabled, P2P_TEST_BYTES)?;
            let value = if case.metric == "p2p_latency_us" {
                r.latency_us
            } else {
                r.bandwidth_gbps
            };
            Ok(Prediction {
                value,
                scenario: format!(
                    "gpucomm sim p2p --topology {} --pair {},{}{}{} ({})",
                    m.name,
                    pair.0,
                    pair.1,
                    if bidir { " --bidirectional" } else { "" },
                    if disabled { " --no-p2p" } else { "" },
                    r.path
                ),
            })
        }
        "h2d_bandwidth" | "d2h_bandwidth" => {
            let pageable = has(&case.system, "pageable host memory")
                || (has(&case.system, "pageable") && !has(&case.system, "pinned"));
            let (from, to) = if case.metric == "h2d_bandwidth" {
                (Endpoint::Host, Endpoint::Gpu(0))
            } else {
                (Endpoint::Gpu(0), Endpoint::Host)
            };
            // bandwidthTest's size: its default unless the case names one
            // (`--mode=shmoo`, `--start`).
            let bytes = case.bytes.unwrap_or(BANDWIDTH_TEST_BYTES);
            let r = copy(&m, from, to, pageable, false, bytes)?;
            Ok(Prediction {
                value: r.bandwidth_gbps,
                scenario: format!(
                    "gpucomm sim copy --topology {} --from {} --to {}{}{} (PCIe Gen{})",
                    m.name,
                    if from == Endpoint::Host {
                        "host"
                    } else {
                        "gpu0"
                    },
                    if to == Endpoint::Host { "host" } else { "gpu0" },
                    if pageable { " --pageable" } else { "" },
                    case.bytes
                        .map(|b| format!(" --size {b}"))
                        .unwrap_or_default(),
                    m.node.pcie_gen
                ),
            })
        }
        other => Err(SimError::Model(format!(
            "unknown metric {other:?} in case {}",
            case.id
        ))),
    }
}

/// The efficiency factors and NCCL constants in force, with their sources
/// (printed at the end of `gpucomm sim calibrate`).
pub fn factors() -> Vec<(&'static str, f64, &'static str)> {
    vec![
        (
            "NVLink 1/2 flit efficiency (copy engine)",
            model::NVLINK_FLIT_EFFICIENCY,
            "256 B payload per 16 B header flit (Foley & Danskin, IEEE Micro 2017)",
        ),
        (
            "NVLink 3+ packet efficiency (copy engine)",
            model::NVLINK3_CE_EFFICIENCY,
            "256 B payload + 32 B per packet (NVIDIA/nccl-tests issue 149: 25 GB/s -> ~20 with 128 B payloads; CEs use 256 B)",
        ),
        (
            "PCIe TLP efficiency (copy engine)",
            model::PCIE_TLP_EFFICIENCY,
            "128 B payload + 20 B framing/header/LCRC (PCIe Base Spec)",
        ),
        (
            "Host copy start, us",
            model::HOST_COPY_START_US,
            "median same-GPU 16-byte copy of 16 published p2pBandwidthLatencyTest runs (docs/sim.md, Staged copies)",
        ),
        (
            "Staged copy hand-over, us",
            model::STAGED_SYNC_US,
            "median over the same 16 runs: staged 16-byte copy less two same-GPU copies",
        ),
        (
            "Staged copy chunk, bytes",
            model::STAGED_CHUNK_BYTES,
            "median over the same 16 runs: the chunk giving each its staged bandwidth",
        ),
        (
            "InfiniBand payload efficiency",
            model::IB_EFFICIENCY,
            "4096 B MTU + 26 B LRH/BTH/ICRC/VCRC (IBTA spec vol. 1)",
        ),
        (
            "NCCL NVLink GB/s per link, sm70/80",
            model::nccl_nvlink_gbps(model::Arch::Ampere),
            "NVIDIA/nccl src/graph/topo.h",
        ),
        (
            "NCCL NVLink GB/s per link, sm90",
            model::nccl_nvlink_gbps(model::Arch::Hopper),
            "NVIDIA/nccl src/graph/topo.h",
        ),
        (
            "NCCL NVLink GB/s per link, sm100",
            model::nccl_nvlink_gbps(model::Arch::Blackwell),
            "NVIDIA/nccl src/graph/topo.h",
        ),
        (
            "NCCL PCIe Gen4 x16 GB/s",
            model::nccl_pcie_gbps(4, 16),
            "NVIDIA/nccl src/graph/xml.cc kvDictPciGen, width*gen/80",
        ),
        (
            "NCCL NVLS efficiency, Hopper",
            model::nvls_efficiency(model::Arch::Hopper),
            "NVIDIA/nccl src/graph/tuning.cc nvlsEfficiency",
        ),
        (
            "NVLS channels, Hopper",
            model::nvls_channels(model::Arch::Hopper, 1),
            "NVIDIA/nccl src/transport/nvls.cc NVLS_NCHANNELS_SM90 (Blackwell: 24 in a domain, 32 across nodes)",
        ),
        (
            "NCCL ring channels, DGX A100 (P2P reads)",
            f64::from(model::nccl_nvswitch_ring_channels(
                12.0 * model::nccl_nvlink_gbps(model::Arch::Ampere),
            )),
            "NVIDIA/nccl 2.18 src/graph/search.cc, connect.cc (6 at 40 GB/s, duplicated, doubled); reads: paths.cc, compute capability 8.0",
        ),
        (
            "NCCL P2P NVLink chunk, bytes",
            model::NCCL_P2P_NVL_CHUNK as f64,
            "NVIDIA/nccl src/init.cc NCCL_P2P_NVL_CHUNKSIZE",
        ),
        (
            "NCCL P2P LL threshold, bytes per peer",
            model::NCCL_P2P_LL_THRESHOLD as f64,
            "NVIDIA/nccl src/enqueue.cc NCCL_P2P_LL_THRESHOLD (Simple above)",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_without_a_measurement_are_refused() {
        let case = |extra: &str| {
            format!(
                "[[case]]\nid = \"x\"\nsystem = \"H100 SXM, PCIe Gen5 x16\"\nmetric = \"h2d_bandwidth\"\n{extra}"
            )
        };
        assert!(parse(&case("value = 21.6\nbytes = 100000")).is_ok());
        let zero = parse(&case("value = 21.6\nbytes = 0")).unwrap_err();
        assert!(
            zero.to_string().contains("bytes must be positive"),
            "{zero}"
        );
        for v in ["0.0", "-3.0", "nan", "inf"] {
            let e = parse(&case(&format!("value = {v}"))).unwrap_err();
            assert!(e.to_string().contains("positive number"), "{v}: {e}");
        }
    }

    #[test]
    fn reads_nics_from_text() {
        assert_eq!(
            parse_nics("2x dgx a100, 8x hdr 200 gb/s infiniband nics per node"),
            Some((8, 200.0))
        );
        assert_eq!(parse_nics("8x h100 sxm, nvlink 4"), None);
        let m = machine_for("2x DGX A100, 8x HDR 200 Gb/s InfiniBand NICs per node").unwrap();
        assert_eq!(m.node.nics, 8);
        assert!((m.node.nic_gbps - 25.0).abs() < 1e-9);
        assert!(machine_for("a toaster").is_err());
        // Systems by name, SHARP when the text uses it, and a GPU without
        // a preset on its stated PCIe link.
        assert_eq!(machine_for("DGX-2, 16x V100").unwrap().node.gpus, 16);
        assert_eq!(machine_for("16x V100 on NVSwitch").unwrap().node.gpus, 16);
        assert_eq!(machine_for("DGX-1 V100").unwrap().node.gpus, 8);
        assert_eq!(machine_for("GB200 NVL72").unwrap().name, "gb200-nvl72");
        assert!(machine_for("4x DGX H100 with SHARP").unwrap().network.sharp);
        assert!(
            !machine_for("4x DGX H100 without SHARP")
                .unwrap()
                .network
                .sharp
        );
        assert!(!machine_for("4x DGX H100").unwrap().network.sharp);
        let t4 = copy_machine_for("Tesla T4, PCIe Gen3 x16, pinned host memory").unwrap();
        assert_eq!((t4.name.as_str(), t4.node.pcie_gen), ("pcie-8gpu", 3));
        // Not for collectives: an unknown GPU's NVLink and NCCL figures are
        // unknown, so the case is refused rather than run on another GPU.
        assert!(machine_for("8x L40S, PCIe Gen4").is_err());
        assert_eq!(
            machine_for("V100 SXM2, PCIe Gen3 x16")
                .unwrap()
                .node
                .pcie_gen,
            3
        );
    }
}
