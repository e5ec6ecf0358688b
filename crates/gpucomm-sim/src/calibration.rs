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
use gpucomm_topo::{IbSpeed, LinkKind};
use serde::Deserialize;

use crate::SimError;
use crate::collective::{AlgoChoice, CollOptions, Select, simulate};
use crate::machine::{Engine, Machine, NvFabric};
use crate::model::{self, Protocol};
use crate::transfer::{Endpoint, copy, p2p};

/// One published measurement. A field that is none of these (nor one of
/// their other names: `algo` or `nccl_algo` for `algorithm`, `proto` or
/// `nccl_proto` for `protocol`, `size`, `size_bytes`, `message_size` or
/// `message_bytes` for `bytes`, `ranks`, `nranks` or `num_gpus` for `gpus`,
/// `num_nodes` or `nnodes` for `nodes`, `gpu_pair` or `gpus_pair` for
/// `pair`) is kept in [`Case::unread`] and said (`sim calibrate` warns): not
/// refused, since a file of cases from elsewhere may carry documentation
/// fields of its own. Before the other names were read, `algo = "ring"`
/// ran as the tuner's pick.
///
/// Numbers are read as a file written by hand may give them: `bytes` as an
/// integer, a whole float (`8.589934592e9`) or a size in nccl-tests' terms
/// (`"8G"`, `"128 MiB"`: K, M, G, T are powers of 1024); `gpus` and
/// `nodes` as integers, whole floats or digits in a string; `value` as a
/// number or a number in a string. `metric` takes the names below and
/// their spellings ([`Metric::parse`]).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Case {
    /// Identifier.
    pub id: String,
    /// The system, in words.
    pub system: String,
    /// What was measured: busbw, algbw, time_us, p2p_bidirectional_bandwidth,
    /// p2p_unidirectional_bandwidth, p2p_latency_us, h2d_bandwidth,
    /// d2h_bandwidth ([`Metric`]).
    pub metric: String,
    /// Collective, for busbw/algbw.
    #[serde(default)]
    pub collective: Option<String>,
    /// Algorithm, when the measurement forced one (`NCCL_ALGO`).
    #[serde(default, alias = "algo", alias = "nccl_algo")]
    pub algorithm: Option<String>,
    /// NCCL protocol, when the measurement forced one (`NCCL_PROTO`:
    /// LL, LL128, Simple); collectives only.
    #[serde(default, alias = "proto", alias = "nccl_proto")]
    pub protocol: Option<String>,
    /// GPUs in the run.
    #[serde(
        default,
        alias = "ranks",
        alias = "nranks",
        alias = "num_gpus",
        deserialize_with = "de_count"
    )]
    pub gpus: Option<usize>,
    /// Nodes in the run.
    #[serde(
        default,
        alias = "num_nodes",
        alias = "nnodes",
        deserialize_with = "de_count"
    )]
    pub nodes: Option<usize>,
    /// Message size in bytes (for a host copy, the copy's size; without
    /// it, bandwidthTest's default).
    #[serde(
        default,
        alias = "size",
        alias = "size_bytes",
        alias = "message_size",
        alias = "message_bytes",
        deserialize_with = "de_bytes"
    )]
    pub bytes: Option<u64>,
    /// The GPU pair of a point-to-point case, as `[0, 5]`, `"0,5"` or
    /// `"GPU0-GPU5"`; without it the pair is the first one the system
    /// text's words fit ("two NVLink links", "no NVLink", "P2P disabled",
    /// "same PCIe switch").
    #[serde(
        default,
        alias = "gpu_pair",
        alias = "gpus_pair",
        deserialize_with = "de_pair"
    )]
    pub pair: Option<(usize, usize)>,
    /// The measured value (GB/s or us).
    #[serde(deserialize_with = "de_value")]
    pub value: f64,
    /// Where it was published.
    #[serde(default)]
    pub source: String,
    /// How far apart the published figures are (documentation only).
    #[serde(default)]
    pub tolerance_note: Option<String>,
    /// Fields the simulator does not read, by name.
    #[serde(flatten)]
    pub unread: std::collections::BTreeMap<String, toml::Value>,
}

/// What a case measured, read from its `metric` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// nccl-tests' bus bandwidth, GB/s.
    Busbw,
    /// nccl-tests' algorithm bandwidth, GB/s.
    Algbw,
    /// A collective's time, us.
    TimeUs,
    /// p2pBandwidthLatencyTest's bidirectional bandwidth, GB/s.
    P2pBidirectional,
    /// p2pBandwidthLatencyTest's unidirectional bandwidth, GB/s.
    P2pUnidirectional,
    /// p2pBandwidthLatencyTest's latency, us.
    P2pLatencyUs,
    /// bandwidthTest's host-to-device bandwidth, GB/s.
    H2d,
    /// bandwidthTest's device-to-host bandwidth, GB/s.
    D2h,
}

impl Metric {
    /// Reads a metric name: the file's own names (`busbw`, `algbw`,
    /// `time_us`, `p2p_bidirectional_bandwidth`,
    /// `p2p_unidirectional_bandwidth`, `p2p_latency_us`, `h2d_bandwidth`,
    /// `d2h_bandwidth`) in any case, with `-`, spaces or none for `_`, a
    /// unit suffix (`_gbps`, `_gb_s`) and the usual shortenings (`bidir`,
    /// `unidir`, `host_to_device`). `latency_us` is a collective's time when
    /// the case names a collective, else a GPU pair's latency.
    ///
    /// ```
    /// use gpucomm_sim::calibration::Metric;
    /// assert_eq!(Metric::parse("busbw", false), Some(Metric::Busbw));
    /// assert_eq!(Metric::parse("BusBW_GBps", false), Some(Metric::Busbw));
    /// assert_eq!(Metric::parse("p2p-bidir-bandwidth", false), Some(Metric::P2pBidirectional));
    /// assert_eq!(Metric::parse("latency_us", true), Some(Metric::TimeUs));
    /// assert_eq!(Metric::parse("latency_us", false), Some(Metric::P2pLatencyUs));
    /// assert_eq!(Metric::parse("host_to_device_memcpy_ce", false), Some(Metric::H2d));
    /// assert_eq!(Metric::parse("HtoD", false), Some(Metric::H2d));
    /// assert_eq!(Metric::parse("flops", false), None);
    /// ```
    pub fn parse(name: &str, collective: bool) -> Option<Metric> {
        Some(match metric_key(name).as_str() {
            "busbw" | "busbandwidth" => Metric::Busbw,
            "algbw" | "algobw" | "algorithmbandwidth" => Metric::Algbw,
            "timeus" | "time" => Metric::TimeUs,
            "latencyus" | "latency" if collective => Metric::TimeUs,
            "latencyus" | "latency" | "p2platencyus" | "p2platency" => Metric::P2pLatencyUs,
            "p2pbidirectionalbandwidth"
            | "p2pbidirbandwidth"
            | "p2pbidirectional"
            | "p2pbidir"
            | "bidirectionalbandwidth"
            | "p2pbidirectionalbw"
            | "p2pbidirbw" => Metric::P2pBidirectional,
            "p2punidirectionalbandwidth"
            | "p2punidirbandwidth"
            | "p2punidirectional"
            | "p2punidir"
            | "unidirectionalbandwidth"
            | "p2pbandwidth"
            | "p2punidirectionalbw"
            | "p2punidirbw"
            | "p2pbw" => Metric::P2pUnidirectional,
            "h2dbandwidth" | "h2d" | "h2dbw" | "hosttodevicebandwidth" | "hosttodevice" => {
                Metric::H2d
            }
            "d2hbandwidth" | "d2h" | "d2hbw" | "devicetohostbandwidth" | "devicetohost" => {
                Metric::D2h
            }
            // Longer names by their start: "h2d_pinned_bandwidth", "HtoD",
            // nvbandwidth's "host_to_device_memcpy_ce" and
            // "device_to_device_bidirectional_memcpy_read_ce".
            k if ["h2d", "htod", "hosttodevice"]
                .iter()
                .any(|p| k.starts_with(p)) =>
            {
                Metric::H2d
            }
            k if ["d2h", "dtoh", "devicetohost"]
                .iter()
                .any(|p| k.starts_with(p)) =>
            {
                Metric::D2h
            }
            k if k.starts_with("devicetodevice") || k.starts_with("d2d") => {
                if k.contains("bidir") {
                    Metric::P2pBidirectional
                } else {
                    Metric::P2pUnidirectional
                }
            }
            _ => return None,
        })
    }

    /// The metric of a case, or an error naming it and the names read. A
    /// bare `bandwidth` (or `bandwidth_gbps`, `bw`) takes its kind from the
    /// system text: a collective's bus bandwidth where the case names a
    /// collective, else "host to device"/"H2D", "device to host"/"D2H",
    /// "bidirectional", "unidirectional" or "P2P".
    pub fn of(case: &Case) -> Result<Metric, SimError> {
        if matches!(metric_key(&case.metric).as_str(), "bandwidth" | "bw") {
            let s = &case.system;
            let said = |words: &[&str]| words.iter().any(|w| has(s, w));
            let found = if case.collective.is_some() {
                Some(Metric::Busbw)
            } else if said(&["host to device", "host-to-device", "h2d", "htod"]) {
                Some(Metric::H2d)
            } else if said(&["device to host", "device-to-host", "d2h", "dtoh"]) {
                Some(Metric::D2h)
            } else if said(&["bidirectional", "bi-directional"]) {
                Some(Metric::P2pBidirectional)
            } else if said(&["unidirectional", "uni-directional", "p2p", "peer"]) {
                Some(Metric::P2pUnidirectional)
            } else {
                None
            };
            if let Some(m) = found {
                return Ok(m);
            }
        }
        Metric::parse(&case.metric, case.collective.is_some()).ok_or_else(|| {
            SimError::Model(format!(
                "unknown metric {:?} in case {} (one of busbw, algbw, time_us, \
                 p2p_bidirectional_bandwidth, p2p_unidirectional_bandwidth, p2p_latency_us, \
                 h2d_bandwidth, d2h_bandwidth)",
                case.metric, case.id
            ))
        })
    }
}

/// A metric's name as [`Metric::parse`] matches it: its letters and digits
/// in lower case, less a unit suffix ("BusBW_GBps" is "busbw").
fn metric_key(name: &str) -> String {
    let key: String = name
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect::<String>()
        .to_ascii_lowercase();
    match ["gbps", "gbs"]
        .iter()
        .find_map(|u| key.strip_suffix(u).filter(|k| !k.is_empty()))
    {
        Some(k) => k.to_string(),
        None => key,
    }
}

/// A number as a file may write it.
#[derive(Deserialize)]
#[serde(untagged)]
enum Num {
    Int(i64),
    Float(f64),
    Text(String),
}

/// `x` as a whole number, if it is one in `u64`'s range.
fn whole(x: f64) -> Option<u64> {
    // 2^64 is exactly representable; anything from it up is out of range.
    (x.is_finite() && x >= 0.0 && x.fract() == 0.0 && x < 18_446_744_073_709_551_616.0)
        .then_some(x as u64)
}

/// A size: an integer, a whole float, or a number with an optional K, M,
/// G or T suffix (powers of 1024, as nccl-tests' `-b`/`-e`; a trailing
/// `B` or `iB` is read too) in a string.
fn size_of(n: &Num) -> Result<u64, String> {
    let bad = |what: &dyn std::fmt::Display| {
        format!(
            "bytes = {what} is not a whole number of bytes (an integer, or a size such as \
             \"8G\": K, M, G, T are powers of 1024)"
        )
    };
    match n {
        Num::Int(i) => u64::try_from(*i).map_err(|_| bad(i)),
        Num::Float(x) => whole(*x).ok_or_else(|| bad(x)),
        Num::Text(t) => gpucomm_algo::parse_size(t).map_err(|_| bad(&format!("{t:?}"))),
    }
}

fn de_bytes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Option::<Num>::deserialize(d)?
        .map(|n| size_of(&n).map_err(serde::de::Error::custom))
        .transpose()
}

fn de_count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    let count = |n: &Num| -> Option<usize> {
        let v = match n {
            Num::Int(i) => u64::try_from(*i).ok(),
            Num::Float(x) => whole(*x),
            Num::Text(t) => t.trim().parse::<u64>().ok(),
        };
        v.and_then(|v| usize::try_from(v).ok())
    };
    Option::<Num>::deserialize(d)?
        .map(|n| {
            count(&n).ok_or_else(|| {
                let shown = match &n {
                    Num::Int(i) => i.to_string(),
                    Num::Float(x) => x.to_string(),
                    Num::Text(t) => format!("{t:?}"),
                };
                serde::de::Error::custom(format!(
                    "{shown} is not a count (a whole number of GPUs or nodes)"
                ))
            })
        })
        .transpose()
}

/// A GPU pair as a file may write it: `[0, 5]`, `"0,5"`, `"0-5"`,
/// `"GPU0-GPU5"`, `"gpu0 gpu5"`.
#[derive(Deserialize)]
#[serde(untagged)]
enum PairText {
    List(Vec<i64>),
    Text(String),
}

fn de_pair<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<(usize, usize)>, D::Error> {
    let Some(p) = Option::<PairText>::deserialize(d)? else {
        return Ok(None);
    };
    let nums: Option<Vec<usize>> = match &p {
        PairText::List(v) => v.iter().map(|&i| usize::try_from(i).ok()).collect(),
        PairText::Text(t) => t
            .to_ascii_lowercase()
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(|w| w.strip_prefix("gpu").unwrap_or(w).parse().ok())
            .collect(),
    };
    match nums.as_deref() {
        Some(&[a, b]) if a != b => Ok(Some((a, b))),
        _ => Err(serde::de::Error::custom(format!(
            "pair = {} is not two different GPU indices (as [0, 5], \"0,5\" or \"GPU0-GPU5\")",
            match &p {
                PairText::List(v) => format!("{v:?}"),
                PairText::Text(t) => format!("{t:?}"),
            }
        ))),
    }
}

fn de_value<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    match Num::deserialize(d)? {
        Num::Int(i) => Ok(i as f64),
        Num::Float(x) => Ok(x),
        Num::Text(t) => t.trim().parse::<f64>().map_err(|_| {
            serde::de::Error::custom(format!(
                "value = {t:?} is not a number (GB/s or us, without the unit)"
            ))
        }),
    }
}

#[derive(Deserialize)]
struct File {
    #[serde(alias = "cases")]
    case: Vec<toml::Value>,
}

/// A case of a file that could not be read, with its id (or its place in
/// the file where it has none) and why.
#[derive(Debug)]
pub struct Unreadable {
    /// The case's `id`, or `case N` (1-based) where it has no string id.
    pub id: String,
    /// Why it was not read.
    pub error: SimError,
}

/// The smallest measured value a case may state: 1e-6 GB/s (1 KB/s) or
/// 1e-6 us (1 ps). The tools measured print two decimals; a value below
/// this one is no measurement (5e-324 made every error infinite).
pub const MIN_VALUE: f64 = 1e-6;

/// Parses the calibration file, every case or none: the first case that
/// cannot be read is the error ([`parse_each`] reads the others too). A
/// case must measure something: a size of 0 bytes, 0 GPUs or nodes, or a
/// value that is not a number of at least [`MIN_VALUE`] is refused (its
/// prediction would be 0, or run on other hardware than stated, or its
/// error not a number).
pub fn parse(text: &str) -> Result<Vec<Case>, SimError> {
    parse_each(text)?
        .into_iter()
        .map(|c| c.map_err(|u| u.error))
        .collect()
}

/// Parses the calibration file case by case: an error only where the file
/// is not TOML or has no `[[case]]` array; a case that cannot be read (a
/// field of the wrong kind, a missing one, a value [`parse`] refuses) is
/// its own [`Unreadable`] entry, and the cases around it are still read.
///
/// ```
/// let text = r#"
/// [[case]]
/// id = "good"
/// system = "H100 SXM, PCIe Gen5 x16"
/// metric = "h2d_bandwidth"
/// value = "53.0"
/// bytes = "32M"
///
/// [[case]]
/// id = "bad"
/// system = "H100 SXM, PCIe Gen5 x16"
/// metric = "h2d_bandwidth"
/// value = [53.0]
/// "#;
/// let cases = gpucomm_sim::calibration::parse_each(text).unwrap();
/// assert_eq!(cases[0].as_ref().unwrap().bytes, Some(32 << 20));
/// let bad = cases[1].as_ref().unwrap_err();
/// assert_eq!(bad.id, "bad");
/// ```
pub fn parse_each(text: &str) -> Result<Vec<Result<Case, Unreadable>>, SimError> {
    let f: File = toml::from_str(text).map_err(|e| SimError::Parse {
        what: "calibration file",
        why: e.to_string(),
    })?;
    Ok(f.case
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let (id, label) = match v.get("id").and_then(toml::Value::as_str) {
                Some(id) => (id.to_string(), format!("case {id}")),
                None => (
                    format!("case {}", i + 1),
                    format!("case {} (it has no id)", i + 1),
                ),
            };
            let case = Case::deserialize(v)
                .map_err(|e| SimError::Parse {
                    what: "calibration case",
                    // toml puts the field's name on a line of its own.
                    why: format!("{label}: {}", e.to_string().trim_end().replace('\n', " ")),
                })
                .and_then(|c| check(&c).map(|()| c));
            case.map_err(|error| Unreadable { id, error })
        })
        .collect())
}

/// What [`parse`] refuses in a case it could read.
fn check(c: &Case) -> Result<(), SimError> {
    if c.bytes == Some(0) {
        return Err(SimError::Model(format!(
            "case {}: bytes must be positive",
            c.id
        )));
    }
    for (name, n) in [("gpus", c.gpus), ("nodes", c.nodes)] {
        if n == Some(0) {
            return Err(SimError::Model(format!(
                "case {}: {name} must be at least 1",
                c.id
            )));
        }
    }
    if !(c.value.is_finite() && c.value >= MIN_VALUE) {
        return Err(SimError::Model(format!(
            "case {}: value must be a positive number of at least {MIN_VALUE:e} \
             (GB/s or us; got {:?})",
            c.id, c.value
        )));
    }
    Ok(())
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

/// The words of a system text, lower case, split at spaces and
/// punctuation ("A100-PCIE-40GB" is `a100 pcie 40gb`).
fn words(system: &str) -> Vec<String> {
    system
        .to_ascii_lowercase()
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '.'))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// Counts written as words ("eight V100", "two DGX A100", "four NICs").
const NUMBER_WORDS: &[&str] = &[
    "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
    "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
];

/// GPU model words, as products and `nvidia-smi` name them: those made
/// as modules (SXM, superchips) as well as cards, then those made as PCIe
/// cards only.
const MODULE_GPU_WORDS: &[&str] = &[
    "p100", "v100", "a100", "a800", "h20", "h100", "h800", "h200", "b100", "b200", "gb200", "gh200",
];
const CARD_GPU_WORDS: &[&str] = &[
    "t4", "l4", "l40", "l40s", "a10", "a10g", "a30", "a40", "a6000", "4090", "4090d", "3090",
];

/// The GPUs a one-node text counts: "8x H100", "4 x NVIDIA A100-SXM4-80GB",
/// "eight V100": a count, then (past "NVIDIA", "Tesla", "GeForce", "RTX")
/// a GPU's word. For a collective case without `gpus`.
fn text_gpu_count(system: &str) -> Option<usize> {
    let t = words(&system.replace('×', " x "));
    let w: Vec<&str> = t.iter().map(String::as_str).collect();
    let vendor = |x: &&str| ["nvidia", "tesla", "geforce", "rtx"].contains(x);
    let before = (0..w.len()).find_map(|i| {
        let (n, next, bare) = count_at(&w, i)?;
        let gpu = w[next.min(w.len())..].iter().find(|x| !vendor(x))?;
        (!bare && gpu_word(gpu)).then_some(n)
    });
    // "dual RTX 4090", "RTX 3090 24GB x4", "RTX 4090 x 2": "dual" before
    // the GPU, a count after it (past its memory size).
    let after = || {
        (0..w.len()).find_map(|i| {
            if w[i] == "dual" {
                let gpu = w[i + 1..].iter().find(|x| !vendor(x))?;
                return gpu_word(gpu).then_some(2);
            }
            if !gpu_word(w[i]) {
                return None;
            }
            let k = (i + 1..w.len()).find(|&k| !memory_size(w[k]))?;
            match (w[k], w.get(k + 1)) {
                ("x", Some(n)) => n.parse().ok(),
                (x, _) => x.strip_prefix('x').and_then(|n| n.parse().ok()),
            }
        })
    };
    before.or_else(after)
}

/// The nodes a text counts: "2 nodes", "4x DGX H100", "2 x HGX A100",
/// "two servers", "16 VMs"; a count of GPUs ("8x H100") is not one.
fn text_node_count(system: &str) -> Option<usize> {
    const NODE: &[&str] = &[
        "node",
        "nodes",
        "server",
        "servers",
        "dgx",
        "hgx",
        "host",
        "hosts",
        "machine",
        "machines",
        "vm",
        "vms",
        "instance",
        "instances",
        "system",
        "systems",
    ];
    let t = plain(system);
    let w: Vec<&str> = t.split_whitespace().collect();
    (0..w.len()).find_map(|i| {
        let (n, next, _) = count_at(&w, i)?;
        let after = *w.get(next)?;
        // "2 DGX H100 nodes", "2 8-GPU nodes": the node's word may follow
        // its model.
        let named = NODE.contains(&after)
            || (after.starts_with("dgx") || after.starts_with("hgx"))
            || w.get(next + 1)
                .is_some_and(|x| matches!(*x, "nodes" | "servers"))
                && !gpu_word(after);
        (n > 0 && named).then_some(n)
    })
}

/// A GPU model's word ([`MODULE_GPU_WORDS`], [`CARD_GPU_WORDS`]), also
/// in the plural ("8x H20s", "two 4090s").
fn gpu_word(w: &str) -> bool {
    let w = model_word(w);
    MODULE_GPU_WORDS.contains(&w) || CARD_GPU_WORDS.contains(&w)
}

/// A GPU model's word without an "rtx" run into it ("rtx4090" is `4090`),
/// in the singular; any other word as it is.
fn model_word(w: &str) -> &str {
    let w = singular(w);
    w.strip_prefix("rtx")
        .map(singular)
        .filter(|x| MODULE_GPU_WORDS.contains(x) || CARD_GPU_WORDS.contains(x))
        .unwrap_or(w)
}

/// A GPU model's word in the singular ("h20s" is `h20`; "l40s" is its
/// own model); any other word as it is.
fn singular(w: &str) -> &str {
    let model = |x: &str| MODULE_GPU_WORDS.contains(&x) || CARD_GPU_WORDS.contains(&x);
    match w.strip_suffix('s') {
        Some(one) if !model(w) && model(one) => one,
        _ => w,
    }
}

/// A memory size word ("80gb").
fn memory_size(w: &str) -> bool {
    w.strip_suffix("gb")
        .is_some_and(|n| n.parse::<u32>().is_ok())
}

/// A count at word `i` of `w`: "8x", "8 x", "8", "eight" (case ignored);
/// the count, the index of the word after it, and whether it is a bare
/// number (which only some contexts take for a count).
fn count_at(w: &[&str], i: usize) -> Option<(usize, usize, bool)> {
    let x = w[i].to_ascii_lowercase();
    if let Some(n) = x.strip_suffix('x').and_then(|n| n.parse().ok()) {
        return Some((n, i + 1, false));
    }
    if let Ok(n) = x.parse() {
        return Some(match w.get(i + 1) {
            Some(y) if y.eq_ignore_ascii_case("x") => (n, i + 2, false),
            _ => (n, i + 1, true),
        });
    }
    let k = NUMBER_WORDS.iter().position(|y| *y == x)?;
    Some((k + 1, i + 1, false))
}

/// The text names a PCIe card: a GPU made only as one (L40S, T4), or a
/// module GPU's word followed (past memory sizes such as "80GB") by "PCIe"
/// that does not start a link ("PCIe Gen5", "PCIe 4.0") or that follows it
/// in the same phrase ("H100 PCIe Gen5", no comma between), or by "NVL"
/// (H100 NVL, H200 NVL: PCIe cards joined by NVLink bridges), or preceded
/// by "PCIe" ("8x PCIe H100"). "H100 SXM, PCIe Gen5 x16" and "B200, PCIe
/// Gen6 x16" name a module and its PCIe link, not a card. Only the GPU
/// the text is about counts, its first named ([`first_gpu`]).
fn names_pcie_card(system: &str) -> bool {
    // Words, each with whether punctuation (",;:()") stands before it.
    let mut w: Vec<(String, bool)> = Vec::new();
    let mut cur = String::new();
    let mut punct = false;
    for c in system.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_alphanumeric() || c == '.' {
            cur.push(c.to_ascii_lowercase());
        } else {
            if !cur.is_empty() {
                w.push((std::mem::take(&mut cur), punct));
                punct = false;
            }
            if matches!(c, ',' | ';' | ':' | '(' | ')') {
                punct = true;
            }
        }
    }
    let words: Vec<String> = w.iter().map(|(x, _)| x.clone()).collect();
    // The GPU the text is about, wherever it is named.
    let subject = first_gpu(system);
    words.iter().enumerate().any(|(i, x)| {
        let x = model_word(x);
        if Some(x) != subject.as_deref() {
            return false;
        }
        if CARD_GPU_WORDS.contains(&x) {
            return true;
        }
        if i > 0 && words[i - 1] == "pcie" && !w[i].1 {
            return true;
        }
        let Some(k) = (i + 1..words.len()).find(|&k| !memory_size(&words[k])) else {
            return false;
        };
        let joined = (i + 1..=k).all(|j| !w[j].1);
        words[k] == "nvl" || words[k] == "pcie" && (joined || generation_at(&words, k).is_none())
    })
}

/// The text names an SXM module ("SXM", "SXM4"), not "not SXM" or
/// "non-SXM".
fn sxm(system: &str) -> bool {
    let t = plain(system);
    let w: Vec<&str> = t.split_whitespace().collect();
    w.iter()
        .enumerate()
        .any(|(i, x)| x.starts_with("sxm") && !(i > 0 && matches!(w[i - 1], "not" | "non" | "no")))
}

/// "V100 PCIe" for the words of "Tesla V100-PCIE-32GB".
fn card_name(w: &[String]) -> String {
    let gpu = w
        .iter()
        .find(|x| gpu_word(x))
        .map_or("GPU".to_string(), |x| model_word(x).to_ascii_uppercase());
    format!("{gpu} PCIe")
}

/// The text names GPU model `model` as a word, or as one followed by
/// letters ("A100s", "H100SXM") or after a count ("8xH100"), never
/// followed by more digits nor after other letters: an "RTX A1000" is no
/// A100, a "Quadro GV100" no V100 (gpucomm-topo's product-name match).
fn gpu_named(system: &str, model: &str) -> bool {
    gpucomm_topo::hardware::names_gpu(system, model)
}

fn machine_named(system: &str, pcie_fallback: bool) -> Result<Machine, SimError> {
    let w = words(system);
    // A word, also in the plural ("8x H20s").
    let word = |x: &str| w.iter().any(|y| y == x || singular(y) == x);
    // Grace-based superchips reach host memory over NVLink-C2C: the NVL72
    // rack, the GH200 (one superchip per node) and the quad-GH200 node
    // (Alps, JUPITER, Isambard-AI) are presets; any other (GH200 NVL32,
    // GB200 NVL4, a Grace CPU Superchip) is refused rather than run on a
    // PCIe host.
    // "Quad GH200" or "quad-GH200", not "Quadro" nor "quad-rail".
    // "4x GH200 nodes" or "one GH200 per node" count nodes of one.
    let one_per_node = ["4x GH200 node", "4 x GH200 node", "one GH200 per node"]
        .iter()
        .any(|q| has(system, q));
    let quad = (word("quad") && has(system, "GH200"))
        || !one_per_node
            && ["4x GH200", "4 x GH200", "Alps", "JUPITER", "Isambard"]
                .iter()
                .any(|q| has(system, q));
    // Machines no preset describes, whose links the nearest preset would
    // misstate, are refused but for a host copy (which crosses the GPU's
    // PCIe link and the host, as the nearest preset has them): a DGX
    // Station (four GPUs joined by NVLink, no NVSwitch), and NICs run over
    // TCP (GCP's GPUDirect-TCPX/TCPXO, sockets), where the network model is
    // RDMA's (InfiniBand, RoCE, EFA).
    if !pcie_fallback {
        if has(system, "DGX Station") {
            return Err(SimError::Model(format!(
                "system {system:?}: a DGX Station (four GPUs joined by NVLink, no NVSwitch) \
                 has no preset; the DGX's NVSwitch would misstate its links"
            )));
        }
        if ["tcp", "tcpx", "tcpxo"].iter().any(|t| word(t)) {
            return Err(SimError::Model(format!(
                "system {system:?}: NICs over TCP (GPUDirect-TCPX, sockets) are not modeled; \
                 the network model is RDMA's (InfiniBand, RoCE, EFA)"
            )));
        }
    }
    // Machines with no preset whose links the nearest would misstate: a
    // GB200 NVL36 rack, CPUs joined to their GPUs by NVLink (IBM POWER8/9:
    // Minsky, AC922); the 4-GPU HGX boards below.
    for (names, what) in [
        (
            &["NVL36"][..],
            "a GB200 NVL36 rack has no preset (gb200-nvl72 is the 72-GPU rack)",
        ),
        (
            &["POWER8", "POWER9", "AC922", "S822LC", "Minsky"][..],
            "an IBM POWER host joined to its GPUs by NVLink has no preset",
        ),
    ] {
        if names.iter().any(|n| has(system, n)) {
            return Err(SimError::Model(format!("system {system:?}: {what}")));
        }
    }
    let gh200 = (has(system, "GH200") || quad) && !has(system, "NVL32");
    if !has(system, "NVL72") && !gh200 && ["GH200", "Grace", "C2C"].iter().any(|w| has(system, w)) {
        return Err(SimError::Model(format!(
            "system {system:?}: a Grace superchip (NVLink-C2C to the CPU) has no preset \
             but the GB200 NVL72 rack (gb200-nvl72), one GH200 per node (gh200) and four \
             (quad-gh200)"
        )));
    }
    let card =
        names_pcie_card(system) && !(sxm(system) || has(system, "DGX") || has(system, "HGX"));
    let base = if has(system, "NVL72") {
        "gb200-nvl72"
    } else if gh200 && quad {
        "quad-gh200"
    } else if gh200 {
        "gh200"
    } else if geforce_4090(system)
        && (pcie_fallback || text_gpu_count(system).is_none_or(|n| n <= 1))
    {
        // A host copy crosses one GPU's link: the workstation's, however
        // many cards the text counts.
        "workstation-rtx4090"
    } else if card {
        "pcie-8gpu"
    } else if gpu_named(system, "gb200") || gpu_named(system, "b200") || word("b100") {
        // HGX B100 joins its eight GPUs as the B200's board does (NVLink 5,
        // 1.8 TB/s a GPU, NVSwitch).
        "dgx-b200"
    } else if gpu_named(system, "h200") {
        "hgx-h200"
    } else if gpu_named(system, "h800") {
        "hgx-h800"
    } else if gpu_named(system, "h100") || word("h20") {
        // HGX H20 joins its eight GPUs as the H100's board does (18 NVLink
        // 4 links, 900 GB/s a GPU, NVSwitch gen 3), unlike the H800's 8.
        "dgx-h100"
    } else if gpu_named(system, "a800") {
        "hgx-a800"
    } else if gpu_named(system, "a100") {
        "dgx-a100"
    } else if has(system, "DGX-2")
        || has(system, "DGX2")
        || has(system, "HGX-2")
        || has(system, "HGX2")
        || gpu_named(system, "v100") && has(system, "NVSwitch")
    {
        "dgx2"
    } else if gpu_named(system, "p100") {
        "dgx1-p100"
    } else if gpu_named(system, "v100") || has(system, "DGX-1") || has(system, "DGX1") {
        "dgx1-v100"
    } else if pcie_fallback && has(system, "PCIe Gen") {
        "pcie-8gpu"
    } else {
        return Err(SimError::Model(format!(
            "cannot tell the GPU of system {system:?}"
        )));
    };
    // "8x HDR 200 Gb/s", "8x 400G", "8 x ConnectX-7 400Gbps": the node's
    // NICs replaced as `gpucomm sim --nics N --nic-speed S` replaces them.
    let preset = Machine::preset(base)?;
    let nics = nic_port(system, preset.node.gpus, preset.node.nics)?;
    let mut m = Machine::select_with_nics(base, nics.map(|n| n.0), nics.map(|n| n.1))?;
    // An NVSwitch preset for GPUs the text joins without one (the 4-GPU HGX
    // boards' direct NVLinks) misstates every pair but for a host copy,
    // which crosses the GPU's PCIe link as the preset has it.
    if !pcie_fallback
        && matches!(m.node.nvlink, NvFabric::Switch { .. })
        && ["no NVSwitch", "without NVSwitch", "4-GPU"]
            .iter()
            .any(|n| has(system, n))
    {
        return Err(SimError::Model(format!(
            "system {system:?}: GPUs joined by direct NVLinks without an NVSwitch have no \
             preset (but the DGX-1's hybrid cube mesh)"
        )));
    }
    // A module GPU on a board the preset describes under another GPU's
    // name (H20 on the H100's, B100 on the B200's): its name and memory.
    for (gpu, board, other) in [("H20", "dgx-h100", "H100"), ("B100", "dgx-b200", "B200")] {
        if base == board && word(&gpu.to_ascii_lowercase()) && !has(system, other) {
            if let Some((_, hbm)) = gpucomm_topo::hardware::gpu_from_label(gpu) {
                m.node.gpu_name = gpu.to_string();
                m.node.hbm_gbps = hbm;
            }
        }
    }
    // Cards joined in pairs by NVLink bridges (RTX 3090, RTX A6000): the
    // PCIe server has no such links; but for a host copy, which crosses
    // the card's PCIe link.
    if !pcie_fallback && card && nvlink_bridged(system) {
        return Err(SimError::Model(format!(
            "system {system:?}: NVLink bridges between PCIe cards are not modeled (the PCIe \
             server's cards reach each other over PCIe only)"
        )));
    }
    if base == "pcie-8gpu" && card {
        // The generic PCIe server with this card: its architecture and
        // memory where the GPU is known and not the preset's A100 (refused
        // for anything but a host copy where it is not known), its PCIe
        // generation unless the text states one.
        match gpucomm_topo::hardware::gpu_from_label(system) {
            // The preset's own A100 keeps its figures; another card of its
            // architecture (A30) takes its name and memory.
            Some((arch, hbm)) if arch == m.node.arch => {
                if !word("a100") {
                    m.node.hbm_gbps = hbm;
                    m.node.gpu_name = card_name(&w);
                }
            }
            Some((arch, hbm)) => {
                m.node.arch = arch;
                m.node.hbm_gbps = hbm;
                m.node.pcie_gen = match arch {
                    model::Arch::Pascal | model::Arch::Volta => 3,
                    model::Arch::Ampere | model::Arch::Ada => 4,
                    _ => 5,
                };
                m.node.gpu_name = card_name(&w);
            }
            // A Turing card (T4) is PCIe Gen3; the others left unknown
            // keep the generic server's.
            None if pcie_fallback => {
                if word("t4") {
                    m.node.pcie_gen = 3;
                }
            }
            None => {
                return Err(SimError::Model(format!(
                    "cannot tell the architecture of the GPU of system {system:?}"
                )));
            }
        }
    }
    // "with SHARP", "NVLS + SHARP" (not "without SHARP", "no SHARP",
    // "SHARP disabled", "SHARP off", "non-SHARP", nor "NVLink SHARP",
    // which is NVLS inside the node).
    let t = plain(system)
        .replace(" nvlink sharp", " ")
        .replace(" nvswitch sharp", " ");
    let tw: Vec<&str> = t.split_whitespace().collect();
    // "SHARP", "SHARPv3"; not "sharply".
    let is_sharp = |x: &str| {
        x == "sharp"
            || x.strip_prefix("sharpv")
                .is_some_and(|v| v.parse::<u8>().is_ok())
    };
    let ib_sharp = tw.iter().any(|x| is_sharp(x));
    // A SHARP word with a negation, or "capable" (no use said), within
    // three words either side; after it, "not" or "no" only where it
    // negates a state ("SHARP was not enabled"), not the next noun
    // ("SHARP enabled, not NVLS").
    let negated = tw.iter().enumerate().any(|(i, x)| {
        is_sharp(x)
            && (i.saturating_sub(3)..(i + 4).min(tw.len())).any(|j| match tw[j] {
                "no" | "not" if j > i => tw.get(j + 1).is_none_or(|next| {
                    matches!(
                        *next,
                        "enabled" | "used" | "available" | "supported" | "active" | "on" | "in"
                    )
                }),
                "no" | "without" | "non" | "not" | "disabled" | "disable" | "off"
                | "unavailable" | "capable" => true,
                _ => false,
            })
    });
    if ib_sharp && !negated {
        m = m.with_cluster_options(&gpucomm_topo::ClusterOptions {
            sharp: true,
            ..Default::default()
        })?;
    }
    if let Some(g) = pcie_generation(&w) {
        m.node.pcie_gen = g;
    }
    // A host CPU the text names ("2x AMD EPYC 7742", "Xeon Platinum
    // 8480C"): its memory, its one core's copy (pageable copies), its
    // vendor (NCCL's network overheads); one not in the tables keeps the
    // preset's.
    if let Some(cpu) = cpu_named(system) {
        let lower = cpu.to_ascii_lowercase();
        if let Some(family) = gpucomm_topo::hardware::CpuFamily::from_label(&cpu) {
            m.node.host_mem_gbps = family.memory_gbps();
            // A server CPU with no one-core figure (EPYC 7003, Genoa)
            // keeps the preset's copy: one core reaches nothing like half
            // its memory.
            let core = family.core_read_gbps();
            if core.is_some() || family.is_desktop() {
                m.node.cpu_memcpy_gbps = model::memcpy_gbps(m.node.host_mem_gbps, core);
            }
        }
        m.node.amd_cpu = ["epyc", "ryzen", "threadripper"]
            .iter()
            .any(|v| lower.starts_with(v));
    }
    // SHARP the network cannot do (not InfiniBand, EDR's switches) is
    // refused with the reason, by the check `gpucomm sim --sharp` makes,
    // rather than run without it under a text that says it reduced.
    if m.network.sharp && !pcie_fallback {
        crate::innet::sharp_usable(&m, 2).map_err(|e| {
            let why = match e {
                SimError::Model(why) => why,
                other => other.to_string(),
            };
            SimError::Model(format!("system {system:?} states SHARP: {why}"))
        })?;
    }
    Ok(m)
}

/// The text joins its cards by NVLink bridges: "NVLink bridge(s)" not
/// negated ("no NVLink bridges", "NVLink bridge not installed", "bridge
/// removed").
fn nvlink_bridged(system: &str) -> bool {
    let t = plain(system);
    let w: Vec<&str> = t.split_whitespace().collect();
    (0..w.len().saturating_sub(1)).any(|i| {
        w[i] == "nvlink"
            && w[i + 1].starts_with("bridge")
            && !(i > 0 && matches!(w[i - 1], "no" | "without" | "non"))
            && !w[i + 2..(i + 5).min(w.len())]
                .iter()
                .any(|x| matches!(*x, "not" | "removed" | "absent" | "uninstalled" | "none"))
    })
}

/// The host CPU a system text names: from "Xeon", "EPYC" or "Core" (an
/// Intel desktop part, "Core i9-13900K") to the end of its phrase
/// ("2x AMD EPYC 7742 (Rome)" is `EPYC 7742`); `None` where it names
/// none.
fn cpu_named(system: &str) -> Option<String> {
    // Trademark marks as lscpu and vendors write them: "Intel(R) Xeon(R)
    // Platinum 8480+", "Core(TM) i9", "EPYC™ 7763".
    let mut system = system.to_string();
    for mark in ["(R)", "(r)", "(TM)", "(tm)", "®", "™"] {
        system = system.replace(mark, "");
    }
    let system = system.as_str();
    let lower = system.to_ascii_lowercase();
    let start = ["xeon", "epyc", "core i", "ryzen", "threadripper"]
        .iter()
        .filter_map(|w| {
            lower.match_indices(w).map(|(i, _)| i).find(|&i| {
                // A word's start, or after a count ("2xEPYC"); "Core i"
                // only before the tier's digit ("Core i9", not "Tensor
                // Core in").
                let before = &lower[..i];
                let counted = before
                    .strip_suffix('x')
                    .is_some_and(|b| b.ends_with(|c: char| c.is_ascii_digit()));
                (counted
                    || !before
                        .chars()
                        .next_back()
                        .is_some_and(|c| c.is_ascii_alphanumeric()))
                    && (*w != "core i"
                        || lower[i + w.len()..].starts_with(|c: char| c.is_ascii_digit()))
            })
        })
        .min()?;
    let rest = &system[start..];
    let end = rest.find([',', ';', '(', ')']).unwrap_or(rest.len());
    Some(rest[..end].trim().to_string())
}

/// The NICs a system text states ([`parse_nics`]) as the count and port
/// `gpucomm sim --nics N --nic-speed S` takes: the InfiniBand generation
/// the text names at that rate ("HDR", "NDR200"); else RoCE at the rate
/// where it names Ethernet ("RoCE", "Ethernet", "GbE", "EFA"); else the
/// InfiniBand port of that rate (EDR 100, HDR 200, NDR 400, XDR 800 Gb/s),
/// or RoCE where none has it. An InfiniBand generation named without a
/// count ("HDR InfiniBand") is the preset's `preset_nics` NICs at that
/// generation's rate.
fn nic_port(
    system: &str,
    gpus: usize,
    preset_nics: usize,
) -> Result<Option<(usize, LinkKind)>, SimError> {
    let generation = || {
        let w = words(system);
        let named: Vec<IbSpeed> = w.iter().filter_map(|x| IbSpeed::parse(x)).collect();
        // One generation, on a preset with NICs.
        match named.as_slice() {
            [g, rest @ ..] if preset_nics > 0 && rest.iter().all(|r| r == g) => {
                Some((preset_nics, g.nominal_gbit()))
            }
            _ => None,
        }
    };
    let Some((count, gbit)) = parse_nics(system).or_else(generation) else {
        return Ok(None);
    };
    // "one 400G NIC per GPU": as many as the node's GPUs; "per GPU pair",
    // "per 2 GPUs": half.
    let t = plain(system);
    let count = if count != 1 {
        count
    } else if [
        " per gpu pair",
        " per pair of gpus",
        " per 2 gpus",
        " per two gpus",
    ]
    .iter()
    .any(|p| t.contains(p))
    {
        (gpus / 2).max(1)
    } else if [" per gpu", " each gpu", " for every gpu"]
        .iter()
        .any(|p| t.contains(p))
    {
        gpus
    } else {
        count
    };
    let w = words(system);
    let ib = |speed| LinkKind::Infiniband { speed, count: 1 };
    // Texts state a port's nominal rate (FDR's 56 Gb/s, not its 54.55 of
    // data).
    let named = IbSpeed::ALL.into_iter().find(|s| {
        s.nominal_gbit() == gbit
            && w.iter().any(|x| {
                x == s.name()
                    || x.strip_prefix(s.name())
                        .is_some_and(|r| r.parse::<f64>() == Ok(gbit))
            })
    });
    if let Some(s) = named {
        return Ok(Some((count, ib(s))));
    }
    let ethernet = w
        .iter()
        .any(|x| x.starts_with("roce") || x.ends_with("gbe") || x == "ethernet" || x == "efa");
    let any_ib = IbSpeed::ALL.into_iter().find(|s| s.nominal_gbit() == gbit);
    let port = match any_ib {
        Some(s) if !ethernet => ib(s),
        _ if gbit.fract() == 0.0 && (1.0..=f64::from(u16::MAX)).contains(&gbit) => {
            LinkKind::Ethernet {
                gbit: gbit as u16,
                count: 1,
                roce: true,
            }
        }
        _ => {
            return Err(SimError::Model(format!(
                "system {system:?}: NICs of {gbit} Gb/s name no port (a whole number of Gb/s)"
            )));
        }
    };
    Ok(Some((count, port)))
}

/// The PCIe generation a system text states: "PCIe Gen4", "PCIe Gen 4",
/// "PCIe 4.0", "PCIe4" (a generation not after "PCIe", such as "3rd-gen
/// NVSwitch", is not one).
fn pcie_generation(w: &[String]) -> Option<u8> {
    // Where a text states two (a Gen5 card in a Gen4 slot), the link runs
    // at the lower.
    (0..w.len()).filter_map(|i| generation_at(w, i)).min()
}

/// The PCIe generation stated at word `i` ([`pcie_generation`]'s forms).
fn generation_at(w: &[String], i: usize) -> Option<u8> {
    let digit = |x: &str| {
        x.chars()
            .next()
            .and_then(|c| c.to_digit(10))
            .filter(|d| (1..=6).contains(d))
            .map(|d| d as u8)
    };
    let x = &w[i];
    if let Some(rest) = x.strip_prefix("pcie").filter(|r| !r.is_empty()) {
        return digit(rest.trim_start_matches("gen"));
    }
    // "Gen4 slot", "a Gen 3 server": a generation of its own, not a GPU
    // link's ("3rd-gen NVSwitch", "Gen 3 NVLink", "NVLink gen4") nor one
    // after "PCIe" (read there).
    let link_after = |k: usize| w.get(k).is_some_and(|n| gpu_link(n));
    let after_pcie = i > 0 && matches!(w[i - 1].as_str(), "pcie" | "e" | "express");
    let after_link = i > 0 && gpu_link(&w[i - 1]);
    if after_link {
        return None;
    }
    // Only where a slot, host or link follows: "EPYC Gen 4", "Gen3 Tensor
    // Cores", "Gen4 NVMe" are no PCIe generation.
    let of_pcie = |k: usize| {
        w.get(k).is_some_and(|n| {
            matches!(
                n.as_str(),
                "slot"
                    | "slots"
                    | "server"
                    | "servers"
                    | "host"
                    | "hosts"
                    | "system"
                    | "platform"
                    | "link"
                    | "bus"
                    | "riser"
                    | "motherboard"
                    | "x16"
                    | "x8"
                    | "x4"
            )
        })
    };
    if let Some(r) = x.strip_prefix("gen").filter(|_| !after_pcie) {
        return match r {
            "" => w
                .get(i + 1)
                .filter(|n| n.len() == 1)
                .and_then(|n| digit(n))
                .filter(|_| !link_after(i + 2) && of_pcie(i + 2)),
            r if r.len() == 1 => digit(r).filter(|_| !link_after(i + 1) && of_pcie(i + 1)),
            _ => None,
        };
    }
    // "PCI-E 3.0", "PCI Express 4.0" read as "PCIe".
    let at = match x.as_str() {
        "pcie" => i,
        "pci" if matches!(w.get(i + 1).map(String::as_str), Some("e" | "express")) => i + 1,
        _ => return None,
    };
    let next = w.get(at + 1)?;
    match next.strip_prefix("gen") {
        Some("") => w.get(at + 2).and_then(|n| digit(n)),
        Some(r) => digit(r),
        // "PCIe 4.0" or "PCIe 4" or "PCIe v4", not "PCIe 16 lanes".
        None => {
            let n = next.strip_prefix('v').unwrap_or(next);
            (n.len() == 1 || n.ends_with(".0"))
                .then(|| digit(n))
                .flatten()
        }
    }
}

/// A word naming a GPU link, not a network: NVLink, NVSwitch, C2C.
fn gpu_link(word: &str) -> bool {
    let w = word.to_ascii_lowercase();
    w.starts_with("nvlink") || w.starts_with("nvswitch") || w == "c2c"
}

/// NIC count and per-port speed (Gb/s) a system text states: a count ("8x",
/// "8 x", "8×", "eight") followed within a few words by a speed in Gb/s
/// ("200 Gb/s", "400G", "400Gbps", "100 GbE") or, without one, an
/// InfiniBand generation ("HDR", "HDR200", "NDR", "EDR": its port speed),
/// where those words also name a network ("InfiniBand", "IB", "NIC",
/// "HCA", "RoCE", "Ethernet", "ConnectX", "NDR", "HDR", "EDR", "EFA", a
/// "Gb/s" unit); or such words followed by a count ("NDR 400 Gb/s x8"). A
/// count followed by a system or GPU ("2x DGX A100", "2 x H100 nodes") is
/// the node's, not the NICs'. A speed in bytes ("50 GB/s", "50GBps") is
/// read as bytes: 400 Gb/s.
fn parse_nics(s: &str) -> Option<(usize, f64)> {
    let s = s.replace('×', " x ");
    // "8x200G" is "8x 200G".
    let split: Vec<String> = s
        .split(|c: char| c.is_whitespace() || matches!(c, ',' | '(' | ')' | ';'))
        .filter(|w| !w.is_empty())
        .flat_map(|w| {
            let lower = w.to_ascii_lowercase();
            let digits = lower.chars().take_while(char::is_ascii_digit).count();
            match lower[digits..].strip_prefix('x') {
                Some(rest) if digits > 0 && rest.starts_with(|c: char| c.is_ascii_digit()) => {
                    vec![w[..=digits].to_string(), w[digits + 1..].to_string()]
                }
                _ => vec![w.to_string()],
            }
        })
        .collect();
    let words: Vec<&str> = split.iter().map(String::as_str).collect();
    const NET: &[&str] = &[
        "mellanox",
        "infiniband",
        "ib",
        "nic",
        "nics",
        "hca",
        "hcas",
        "roce",
        "ethernet",
        "connectx",
        "ndr",
        "hdr",
        "edr",
        "xdr",
        "efa",
        "gb/s",
        "gbps",
        "gbe",
        "gbit/s",
    ];
    // What a count names when it is not the NICs': a node or its GPUs.
    const SYSTEM: &[&str] = &[
        "dgx", "hgx", "node", "nodes", "server", "servers", "gpu", "gpus", "host", "hosts",
    ];
    // A speed in Gb/s: "400g", "400gb/s", "400gbps", "100gbe", or a
    // number followed by such a unit; "GB/s" or "GBps" in capitals is
    // bytes per second, eight times as many bits.
    fn gbits(tok: &str, next: Option<&&str>) -> Option<f64> {
        let per_gbit = |unit: &str| {
            ["gbit/s", "gbps", "gbe", "gb/s", "g"]
                .contains(&unit.to_ascii_lowercase().as_str())
                .then(|| if unit.contains("GB") { 8.0 } else { 1.0 })
        };
        // The number and its unit in one token, else the unit in the next.
        let (n, factor) = match tok.find(|c: char| c.is_ascii_alphabetic()) {
            Some(k) if k > 0 => (&tok[..k], per_gbit(&tok[k..])?),
            Some(_) => return None,
            None => (tok, per_gbit(next?)?),
        };
        Some(n.parse::<f64>().ok()? * factor)
    }
    // The port speed an InfiniBand generation names (gpucomm-topo's
    // `IbSpeed`: "hdr", "hdr100", "ndr200"), also with its own speed
    // written after it ("HDR200", "NDR400").
    fn generation_gbits(tok: &str) -> Option<f64> {
        let t = tok.split(['-', '/']).next().unwrap_or("");
        if let Some(speed) = IbSpeed::parse(t) {
            return Some(speed.nominal_gbit());
        }
        let name = t.trim_end_matches(|c: char| c.is_ascii_digit());
        let speed = IbSpeed::parse(name)?;
        let nominal = speed.nominal_gbit();
        (t[name.len()..].parse::<f64>().ok()? == nominal).then_some(nominal)
    }
    // Network words among `around` and `rest`, and a speed among `rest`:
    // the first stated speed, else the first generation's. `around` is
    // what may name the network before a count ("RoCE 8x 100G",
    // "InfiniBand: 4x 200G").
    let speed_of = |around: &[&str], rest: &[&str]| -> Option<f64> {
        // NVLink's figures are no NIC's ("18x NVLink 4 (900 GB/s)", "NVLink
        // 3 x12"): the words stop at NVLink's name.
        let rest = &rest[..rest.iter().position(|r| gpu_link(r)).unwrap_or(rest.len())];
        let around = &around[around
            .iter()
            .rposition(|r| gpu_link(r))
            .map_or(0, |k| k + 1)..];
        let lower: Vec<String> = around
            .iter()
            .chain(rest)
            .flat_map(|r| r.split(['-', '/', ':']).map(str::to_ascii_lowercase))
            .chain(rest.iter().map(|r| r.to_ascii_lowercase()))
            .collect();
        // An Ethernet speed names the network by itself ("100GbE").
        let ethernet = |r: &str| {
            r.strip_suffix("gbe")
                .is_some_and(|n| !n.is_empty() && n.parse::<f64>().is_ok())
        };
        let net = lower.iter().any(|r| {
            NET.iter().any(|n| r == n)
                || r.starts_with("connectx")
                || r.starts_with("roce")
                || generation_gbits(r).is_some()
                || ethernet(r)
        });
        if !net {
            return None;
        }
        let stated = rest
            .iter()
            .enumerate()
            .find_map(|(j, r)| gbits(r, rest.get(j + 1)).filter(|&v| v >= 10.0));
        // ("HDR, 8 HCAs": the generation just before the count.)
        stated
            .or_else(|| rest.iter().find_map(|r| generation_gbits(r)))
            .or_else(|| around.iter().rev().find_map(|r| generation_gbits(r)))
    };
    // A count: "8x", "8 x" (the number then "x"), "eight"; and the index
    // of the word after it.
    // NIC words a bare number may count ("4 NDR HCAs", "2 ConnectX-7").
    let nic_word = |x: &str| {
        let l = x.to_ascii_lowercase();
        matches!(
            l.as_str(),
            "ndr"
                | "hdr"
                | "edr"
                | "xdr"
                | "nic"
                | "nics"
                | "hca"
                | "hcas"
                | "infiniband"
                | "ib"
                | "roce"
                | "efa"
                | "mellanox"
        ) || l.starts_with("connectx")
            || l.starts_with("cx")
            || generation_gbits(&l).is_some()
    };
    // A PCIe link's width ("PCIe 4.0 x16", "Gen5 x16", "x16 slots"), not
    // a NIC count.
    let pcie_width = |i: usize| {
        let l = |k: usize| words.get(k).map(|x| x.to_ascii_lowercase());
        (i.saturating_sub(2)..i).any(|k| {
            l(k).is_some_and(|p| p.starts_with("pcie") || p.starts_with("gen") || p.contains('.'))
        }) || l(i + 1).is_some_and(|n| matches!(n.as_str(), "slot" | "slots" | "lanes" | "link"))
    };
    let nic_count_at = |i: usize| -> Option<(usize, usize)> {
        let w = words[i].to_ascii_lowercase();
        match count_at(&words, i) {
            Some((n, next, false)) => return Some((n, next)),
            Some((n, next, true)) => {
                // "4 NDR HCAs", not a speed ("FDR 56 InfiniBand", "HDR 200
                // InfiniBand").
                let speed_before = i
                    .checked_sub(1)
                    .is_some_and(|j| IbSpeed::parse(&words[j].to_ascii_lowercase()).is_some())
                    && [10, 14, 25, 40, 50, 56].contains(&n);
                return (n <= 64 && !speed_before && words.get(next).is_some_and(|x| nic_word(x)))
                    .then_some((n, next));
            }
            None => {}
        }
        if let Some(n) = w
            .strip_prefix('x')
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|_| !pcie_width(i))
            .filter(|_| words.get(i + 1).is_some_and(|x| nic_word(x)))
        {
            // "x4 HDR".
            return Some((n, i + 1));
        }
        // "a single ConnectX-6", "dual 200G NICs".
        match w.as_str() {
            "single" => Some((1, i + 1)),
            "dual" => Some((2, i + 1)),
            _ => None,
        }
    };
    let is_count = |x: &&str| {
        let l = x.to_ascii_lowercase();
        *x == "x"
            || l.strip_suffix('x')
                .is_some_and(|n| n.parse::<usize>().is_ok())
    };
    for i in 0..words.len() {
        let Some((count, from)) = nic_count_at(i) else {
            continue;
        };
        let from = from.min(words.len());
        // "2x DGX A100", "2 x H100 nodes", "2x 8xH100", "2x 8-GPU nodes":
        // the nodes' count.
        if let Some(next) = words.get(from) {
            let full = next.to_ascii_lowercase();
            let l = full.split('-').next().unwrap_or("");
            let digits = full.chars().take_while(char::is_ascii_digit).count();
            let gpus_of_node = digits > 0
                && (full[digits..].starts_with("x")
                    && full[digits + 1..].starts_with(|c: char| c.is_ascii_alphabetic())
                    || full[digits..].starts_with("-gpu"));
            if SYSTEM.contains(&l) || gpu_word(l) || gpus_of_node {
                continue;
            }
        }
        // The words up to the next count ("2x DGX A100, 8x HDR ...": the
        // NICs are the second count's).
        let end = words[from..(from + 6).min(words.len())]
            .iter()
            .position(is_count)
            .map_or((from + 6).min(words.len()), |k| from + k);
        // "2 IB switches", "two NDR leaf switches": switches, not NICs.
        if words[from..end].iter().any(|x| {
            let l = x.to_ascii_lowercase();
            l.starts_with("switch") || matches!(l.as_str(), "leaf" | "leaves" | "spine" | "spines")
        }) {
            continue;
        }
        // NICs for another job than the GPUs' traffic ("2x 100GbE in-band
        // management", "1x 25 GbE storage NIC", "storage: 2x 200G"), unless
        // the phrase says compute.
        let role = |x: &str| {
            let l = x.trim_end_matches(':').to_ascii_lowercase();
            matches!(
                l.as_str(),
                "management"
                    | "mgmt"
                    | "storage"
                    | "in-band"
                    | "inband"
                    | "out-of-band"
                    | "oob"
                    | "frontend"
                    | "front-end"
                    | "bmc"
            )
        };
        // The phrase ends at the next label ("...; compute: 8x ...").
        let phrase = &words[from..end];
        let phrase = &phrase[..phrase
            .iter()
            .position(|x| x.ends_with(':'))
            .unwrap_or(phrase.len())];
        let before = i
            .checked_sub(1)
            .map(|j| words[j])
            .filter(|b| b.ends_with(':'));
        let compute = phrase
            .iter()
            .any(|x| x.to_ascii_lowercase().starts_with("compute"));
        if !compute && (before.is_some_and(role) || phrase.iter().any(|x| role(x))) {
            continue;
        }
        // The count's own word and up to two before it may name the network.
        if let Some(v) = speed_of(&words[i.saturating_sub(2)..i], &words[from..end]) {
            if count > 0 {
                return Some((count, v));
            }
        }
    }
    // A count after the NICs' words: "NDR 400 Gb/s x8", "HDR x 4" (not a
    // PCIe link's width: "PCIe Gen5 x16").
    for i in 0..words.len() {
        let l = words[i].to_ascii_lowercase();
        let count = match l.strip_prefix('x') {
            Some("") => words.get(i + 1).and_then(|n| n.parse::<usize>().ok()),
            Some(n) => n.parse::<usize>().ok(),
            None => None,
        };
        let Some(count) = count.filter(|&n| n > 0) else {
            continue;
        };
        let before = &words[i.saturating_sub(4)..i];
        if pcie_width(i) {
            continue;
        }
        let before = &before[before
            .iter()
            .rposition(|r| gpu_link(r))
            .map_or(0, |k| k + 1)..];
        if let Some(v) = speed_of(&[], before) {
            return Some((count, v));
        }
    }
    None
}

/// Cloud instances published runs name instead of their hardware: the
/// instance's name (as a word of the text, case ignored), its GPUs in the
/// words [`machine_for`] reads, and its RDMA NICs where the provider
/// documents them (`None`: none, or not RDMA: GCP's A2 and A3 High/Mega
/// run over TCP, AWS's p3.16xlarge has ENA only).
///
/// Sources: AWS EC2 accelerated-computing instance pages (P3, P4d/P4de,
/// P5/P5e/P5en, P6-B200: EFA interfaces and their rates); Azure ND A100 v4,
/// NDm A100 v4, ND H100 v5 and ND H200 v5 series pages (one HDR or NDR
/// InfiniBand port per GPU); Google Cloud's GPU machine types (A2, A3, A4;
/// their NICs not taken here); OCI's bare-metal GPU shapes (BM.GPU4.8,
/// BM.GPU.A100-v2.8: 1,600 Gb/s of RDMA over 16 ports; BM.GPU.H100.8:
/// 3,200 over 16).
const INSTANCES: &[(&str, &str, Option<&str>)] = &[
    ("p3.16xlarge", "8x V100 SXM2", None),
    ("p3dn.24xlarge", "8x V100 SXM2", Some("1x 100 Gb/s EFA")),
    ("p4d.24xlarge", "8x A100 SXM4 40GB", Some("4x 100 Gb/s EFA")),
    (
        "p4de.24xlarge",
        "8x A100 SXM4 80GB",
        Some("4x 100 Gb/s EFA"),
    ),
    ("p5.48xlarge", "8x H100 SXM", Some("32x 100 Gb/s EFA")),
    ("p5e.48xlarge", "8x H200 SXM", Some("32x 100 Gb/s EFA")),
    ("p5en.48xlarge", "8x H200 SXM", Some("16x 200 Gb/s EFA")),
    ("p6-b200.48xlarge", "8x B200", Some("8x 400 Gb/s EFA")),
    (
        "nd96asr_v4",
        "8x A100 SXM4 40GB",
        Some("8x HDR 200 Gb/s InfiniBand"),
    ),
    (
        "nd96amsr_a100_v4",
        "8x A100 SXM4 80GB",
        Some("8x HDR 200 Gb/s InfiniBand"),
    ),
    (
        "nd96isr_h100_v5",
        "8x H100 SXM",
        Some("8x NDR 400 Gb/s InfiniBand"),
    ),
    (
        "nd96isr_h200_v5",
        "8x H200 SXM",
        Some("8x NDR 400 Gb/s InfiniBand"),
    ),
    ("a2-highgpu-8g", "8x A100 SXM4 40GB", None),
    ("a2-ultragpu-8g", "8x A100 SXM4 80GB", None),
    ("a3-highgpu-8g", "8x H100 SXM", None),
    ("a3-megagpu-8g", "8x H100 SXM", None),
    ("a3-ultragpu-8g", "8x H200 SXM", None),
    ("a4-highgpu-8g", "8x B200", None),
    ("bm.gpu4.8", "8x A100 SXM4 40GB", Some("16x 100 Gb/s RoCE")),
    (
        "bm.gpu.a100-v2.8",
        "8x A100 SXM4 80GB",
        Some("16x 100 Gb/s RoCE"),
    ),
    ("bm.gpu.h100.8", "8x H100 SXM", Some("16x 200 Gb/s RoCE")),
];

/// The system text with what a cloud instance it names implies and it does
/// not say: the GPUs where it names none, the RDMA NICs where it states
/// none. Azure's series names ("ND A100 v4", "ND H100 v5") name their GPU;
/// their InfiniBand is added where no NIC is stated.
///
/// ```
/// use gpucomm_sim::calibration::with_instance_hardware;
/// let s = with_instance_hardware("2x AWS p4d.24xlarge");
/// assert!(s.contains("8x A100 SXM4 40GB") && s.contains("4x 100 Gb/s EFA"));
/// // What the text states is kept.
/// let s = with_instance_hardware("2x p5.48xlarge, 8x 400G EFA");
/// assert!(s.contains("H100") && !s.contains("32x"));
/// assert_eq!(with_instance_hardware("8x H100 SXM"), "8x H100 SXM");
/// ```
pub fn with_instance_hardware(system: &str) -> String {
    let Some((_, gpus, nics)) = instance(system) else {
        return system.to_string();
    };
    let mut out = system.to_string();
    let names_gpu = MODULE_GPU_WORDS.iter().any(|g| has(system, g));
    if let Some(g) = gpus.filter(|_| !names_gpu) {
        out.push_str(", ");
        out.push_str(g);
    }
    if let Some(n) = nics.filter(|_| parse_nics(system).is_none()) {
        out.push_str(", ");
        out.push_str(n);
    }
    out
}

/// The cloud instance a system text names ([`INSTANCES`], an Azure ND
/// series): its name, GPUs (`None` where the series name states them) and
/// RDMA NICs (`None`: it has none).
fn instance(system: &str) -> Option<(&'static str, Option<&'static str>, Option<&'static str>)> {
    let lower = system.to_ascii_lowercase();
    let found = lower
        .split(|c: char| c.is_whitespace() || matches!(c, ',' | '(' | ')' | ';' | ':'))
        .filter(|t| !t.is_empty())
        .find_map(|t| {
            // Azure's sizes are written Standard_ND96asr_v4 too.
            let t = t.strip_prefix("standard_").unwrap_or(t);
            // The size or, on AWS, its family alone ("p4d.24xlarge", "p4d").
            let t = t.replace('-', "_");
            INSTANCES.iter().find(|(name, ..)| {
                let name = name.replace('-', "_");
                t == name || name.contains("xlarge") && name.split('.').next() == Some(t.as_str())
            })
        });
    if let Some(&(name, gpus, nics)) = found {
        return Some((name, Some(gpus), nics));
    }
    [
        ("nd a100 v4", "8x HDR 200 Gb/s InfiniBand"),
        ("ndm a100 v4", "8x HDR 200 Gb/s InfiniBand"),
        ("nd h100 v5", "8x NDR 400 Gb/s InfiniBand"),
        ("nd h200 v5", "8x NDR 400 Gb/s InfiniBand"),
    ]
    .into_iter()
    .find(|(series, _)| lower.contains(series))
    .map(|(series, nics)| (series, None, Some(nics)))
}

/// The text's words, lower case, every run of other characters one space
/// ("P2P=Disabled" is "p2p disabled"), with a space at each end so that
/// phrases match whole words.
fn plain(system: &str) -> String {
    let mut out = String::from(" ");
    for c in system.chars() {
        if c.is_ascii_alphanumeric() || c == '.' {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with(' ') {
            out.push(' ');
        }
    }
    if !out.ends_with(' ') {
        out.push(' ');
    }
    out
}

/// The NVLinks a point-to-point text says join its pair: 0 ("no NVLink",
/// "without NVLink", "not connected by NVLink", "P2P over PCIe"), 2 ("two
/// NVLink links", "2 NVLinks", "NVLink x2", "double NVLink"), 1 ("one
/// NVLink", "single NVLink", "NVLink x1", or NVLink named otherwise, P2P
/// not disabled); `None` where it names none.
fn nvlinks_named(system: &str) -> Option<u32> {
    let t = plain(system);
    let any = |ps: &[&str]| ps.iter().any(|p| t.contains(p));
    // nvidia-smi topo -m's NV1, NV2, ... name the count.
    if let Some(n) = t
        .split_whitespace()
        .find_map(|x| x.strip_prefix("nv").and_then(|n| n.parse::<u32>().ok()))
        .filter(|&n| (1..=18).contains(&n))
    {
        return Some(n);
    }
    if any(&[
        " nvlink less",
        " not nvlink",
        " no nvlink",
        " without nvlink",
        " not connected by nvlink",
        " not joined by nvlink",
        " no direct nvlink",
        " over pcie",
        " through pcie",
        " via pcie",
        " pcie only",
    ]) {
        return Some(0);
    }
    let w: Vec<&str> = t.split_whitespace().collect();
    let mut named = None;
    for (i, x) in w.iter().enumerate() {
        if !x.starts_with("nvlink") {
            continue;
        }
        let before = i.checked_sub(1).map(|j| w[j]);
        let after: Vec<&str> = w[i + 1..].iter().take(2).copied().collect();
        let count = match before {
            Some("two" | "2" | "2x" | "double" | "dual") => Some(2),
            Some("one" | "1" | "1x" | "single") => Some(1),
            _ => match after.as_slice() {
                ["x2", ..] | ["x", "2", ..] => Some(2),
                ["x1", ..] | ["x", "1", ..] => Some(1),
                _ => None,
            },
        };
        if count.is_some() {
            return count;
        }
        named = Some(1);
    }
    // "2 links of NVLink2", "a 2-link NVLink connection", "(2 links)".
    if named.is_some() {
        if let Some(n) = w.windows(2).find_map(|p| {
            matches!(p[1], "link" | "links")
                .then(|| p[0].parse::<u32>().ok())
                .flatten()
        }) {
            return Some(n);
        }
    }
    named.filter(|_| !p2p_disabled(system))
}

/// The text names GeForce RTX 4090s, whose driver grants no peer access
/// between them (`cudaDeviceCanAccessPeer` 0, "P2P=Disabled" both ways in
/// p2pBandwidthLatencyTest): one is the workstation preset, more the PCIe
/// server's with its card.
fn geforce_4090(system: &str) -> bool {
    matches!(first_gpu(system).as_deref(), Some("4090" | "4090d"))
}

/// The GPU a text is about: its first GPU model word, in the singular
/// ("rtx4090" is `4090`). A text names its machine first; a GPU named
/// after it ("8x H100, one 4090 workstation used for the baseline") is
/// another machine's.
fn first_gpu(system: &str) -> Option<String> {
    words(system)
        .iter()
        .find(|w| gpu_word(w))
        .map(|w| model_word(w).to_string())
}

/// Whether GPUs of the text reach each other without peer access: the
/// text says P2P is off ([`p2p_disabled`]), or the machine built from it
/// has GPUs that have none ([`geforce_4090`]; a text about another machine
/// that mentions one is not about them).
fn no_peer_access(system: &str, m: &Machine) -> bool {
    p2p_disabled(system) || geforce_4090(system) && m.node.gpu_name.contains("4090")
}

/// The `NCCL_P2P_LEVEL` a text sets ("NCCL_P2P_LEVEL=SYS",
/// "NCCL_P2P_LEVEL: PHB"; NCCL's old numbers 0-5, `levelsOldToNew` in
/// `src/graph/paths.cc`: LOC, PIX, PXB, PHB, SYS, SYS), the last one that
/// names a level, if any.
fn p2p_level_stated(system: &str) -> Option<crate::machine::P2pLevel> {
    use crate::machine::P2pLevel;
    let upper = system.to_ascii_uppercase();
    upper
        .split("NCCL_P2P_LEVEL")
        .skip(1)
        .filter_map(|rest| {
            let value = rest.trim_start().strip_prefix(['=', ':'])?.trim_start();
            let word: String = value
                .chars()
                .take_while(char::is_ascii_alphanumeric)
                .collect();
            match word.parse::<usize>() {
                Ok(old) => [
                    P2pLevel::Loc,
                    P2pLevel::Pix,
                    P2pLevel::Pxb,
                    P2pLevel::Phb,
                    P2pLevel::Sys,
                    P2pLevel::Sys,
                ]
                .get(old)
                .copied(),
                Err(_) => P2pLevel::parse(&word),
            }
        })
        .last()
}

/// Whether a point-to-point text says P2P is off: "P2P disabled",
/// p2pBandwidthLatencyTest's "P2P=Disabled", "disabled P2P", "P2P off",
/// "peer access off", "without P2P", "staged through host memory".
fn p2p_disabled(system: &str) -> bool {
    let t = plain(system);
    [
        " p2p disabled",
        " disabled p2p",
        " p2p off ",
        " p2p not enabled",
        " peer access off",
        " peer access disabled",
        " without p2p",
        " no p2p ",
        " staged through host",
        " peer to peer disabled",
        " p2p access disabled",
        " p2p turned off",
        " p2p no ",
        " p2p unsupported",
        " p2p not supported",
        " p2p not available",
        " peer access not available",
        " canaccesspeer 0",
        " cudadevicecanaccesspeer 0",
        " canaccesspeer returns 0",
        " cudadevicecanaccesspeer returns 0",
        " nccl p2p disable 1 ",
        " p2p is disabled",
        " p2p is off",
        " p2p is not supported",
        " p2p is not available",
        " p2p is unsupported",
        " cannot access peer",
        " nccl p2p level loc ",
    ]
    .iter()
    .any(|p| t.contains(p))
        // simpleP2P's "> Peer access from ... (GPU0) -> ... (GPU1) : No".
        || t.contains(" peer access from ") && t.ends_with(" no ")
}

/// Whether a host copy's case names pageable memory: its metric
/// ("h2d_pageable_bandwidth") or its text. Pageable: "pageable", "paged",
/// "unpinned", "non-pinned", "not pinned", "malloc"; pinned: "pinned",
/// "page-locked", "cudaMallocHost", "cudaHostAlloc". Where the text names
/// both, what it says outside parentheses counts ("pageable (vs. pinned)"),
/// "pageable host memory" wins, else the last named ("pinned and pageable
/// compared: pageable").
fn pageable_named(system: &str, metric: &str) -> bool {
    // "Non-pageable" memory is pinned.
    let mut lower = system.to_ascii_lowercase();
    for negated in ["non-pageable", "non pageable", "not pageable", "unpageable"] {
        lower = lower.replace(negated, "pinned");
    }
    let system = lower.as_str();
    let m = plain(metric);
    if m.contains("pageable") || m.contains("paged") {
        return true;
    }
    if m.contains("pinned") {
        return false;
    }
    // The last position of each kind in `t`, if any.
    let last = |t: &str| {
        const PAGEABLE: &[&str] = &[
            " pageable",
            " paged ",
            " unpinned",
            " non pinned",
            " not pinned",
            " malloc",
            " non page locked",
            " not page locked",
        ];
        const PINNED: &[&str] = &[
            " pinned",
            " page locked",
            " cudamallochost",
            " cudahostalloc",
            " cudahostregister",
        ];
        // A negated "pinned" is pageable: blank it before looking for
        // pinned.
        let mut rest = t.to_string();
        for n in [
            " unpinned",
            " non pinned",
            " not pinned",
            " non page locked",
            " not page locked",
            " no cudahostregister",
            " without cudahostregister",
            " no cudamallochost",
            " without cudamallochost",
        ] {
            rest = rest.replace(n, &" ".repeat(n.len()));
        }
        let at = |t: &str, words: &[&str]| words.iter().filter_map(|w| t.rfind(w)).max();
        (at(t, PAGEABLE), at(&rest, PINNED))
    };
    let mut outside = String::new();
    let mut depth = 0usize;
    for c in system.chars() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth = depth.saturating_sub(1),
            _ if depth == 0 => outside.push(c),
            _ => {}
        }
    }
    // bandwidthTest's own flag (`--memory=pinned`) names what the run
    // measured, whatever else the text mentions.
    let flag = system.replace(' ', "");
    if flag.contains("memory=pageable") {
        return true;
    }
    if flag.contains("memory=pinned") {
        return false;
    }
    let decide = |t: &str| match last(t) {
        (Some(_), None) => Some(true),
        (None, Some(_)) => Some(false),
        (Some(a), Some(b)) => Some(t.contains(" pageable host memory") || a > b),
        (None, None) => None,
    };
    decide(&plain(&outside))
        .or_else(|| decide(&plain(system)))
        .unwrap_or(false)
}

/// The GPU pair a text names: "GPU0 <-> GPU5", "GPU 0 and GPU 3",
/// "between GPU0 and GPU3", "GPUs 0 and 5"; `None` unless it names two
/// different GPUs.
fn text_pair(system: &str) -> Option<(usize, usize)> {
    let t = plain(system);
    let w: Vec<&str> = t.split_whitespace().collect();
    let mut ids: Vec<usize> = Vec::new();
    for (i, x) in w.iter().enumerate() {
        let found = if let Some(n) = x.strip_prefix("gpu").and_then(|n| n.parse().ok()) {
            vec![n]
        } else if *x == "gpu" {
            w.get(i + 1)
                .and_then(|n| n.parse().ok())
                .into_iter()
                .collect()
        } else if *x == "gpus" {
            // "GPUs 0 and 5", "GPUs 0,5".
            let a = w.get(i + 1).and_then(|n| n.parse().ok());
            let k = if w.get(i + 2) == Some(&"and") {
                i + 3
            } else {
                i + 2
            };
            let b = w.get(k).and_then(|n| n.parse().ok());
            a.into_iter().chain(b).collect()
        } else {
            Vec::new()
        };
        for n in found {
            if !ids.contains(&n) {
                ids.push(n);
            }
        }
    }
    match ids.as_slice() {
        [a, b] => Some((*a, *b)),
        _ => None,
    }
}

/// Size p2pBandwidthLatencyTest copies (10 M ints, its `numElems`).
pub const P2P_TEST_BYTES: u64 = 40_000_000;
/// Size bandwidthTest copies by default (32 MB, its `DEFAULT_SIZE`).
pub const BANDWIDTH_TEST_BYTES: u64 = 32 << 20;

/// Predicts a case.
pub fn predict(case: &Case) -> Result<Prediction, SimError> {
    let metric = Metric::of(case)?;
    let collective = matches!(metric, Metric::Busbw | Metric::Algbw | Metric::TimeUs);
    if case.protocol.is_some() && !collective {
        return Err(SimError::Model(format!(
            "case {}: protocol names an NCCL protocol, which only a collective's metric \
             (busbw, algbw, time_us) has; {} is measured without NCCL",
            case.id, case.metric
        )));
    }
    // A cloud instance's hardware, where the text names the instance only.
    let system = with_instance_hardware(&case.system);
    let case = &Case {
        system,
        ..case.clone()
    };
    let m = match metric {
        Metric::H2d | Metric::D2h => copy_machine_for(&case.system)?,
        _ => machine_for(&case.system)?,
    };
    let (flags, note) = changes_from_preset(&m, &case.system)?;
    let mut p = predict_on(case, metric, m, &flags)?;
    p.scenario.push_str(&note);
    // A busbw of one GPU (nccl-tests' factor is 0), an operation of no
    // whole element (NCCL runs nothing): no error against a measurement
    // means anything (it was a fake -100%).
    if !(p.value.is_finite() && p.value > 0.0) {
        return Err(SimError::Model(format!(
            "case {}: the simulated {} is {} (`{}`): the operation moves no data between \
             GPUs (one GPU, or no whole element), so a measurement of it cannot be checked",
            case.id, case.metric, p.value, p.scenario
        )));
    }
    Ok(p)
}

/// What the system text changed in its preset, for the scenario: as
/// `gpucomm sim` options where it has them (the NICs, `--nics N
/// --nic-speed S`, which build the machine the text does; `--sharp`), and
/// as a note where it has none (GPU, PCIe generation).
fn changes_from_preset(m: &Machine, system: &str) -> Result<(String, String), SimError> {
    let base = Machine::preset(&m.name)?;
    let mut flags = String::new();
    if let Some((n, port)) = nic_port(system, base.node.gpus, base.node.nics)? {
        if (m.node.nics, m.node.nic_gbps, m.network.ib)
            != (base.node.nics, base.node.nic_gbps, base.network.ib)
        {
            let name = gpucomm_topo::catalog::port_name(port).unwrap_or_default();
            flags.push_str(&format!(" --nics {n} --nic-speed {name}"));
        }
    }
    if m.network.sharp && !base.network.sharp {
        flags.push_str(" --sharp");
    }
    let mut changes = Vec::new();
    if m.node.gpu_name != base.node.gpu_name {
        changes.push(format!("GPU {}", m.node.gpu_name));
    }
    if m.node.pcie_gen != base.node.pcie_gen {
        changes.push(format!("PCIe Gen{}", m.node.pcie_gen));
    }
    let host = |n: &crate::machine::NodeModel| (n.host_mem_gbps, n.cpu_memcpy_gbps, n.amd_cpu);
    if host(&m.node) != host(&base.node) {
        changes.push(format!("CPU {}", cpu_named(system).unwrap_or_default()));
    }
    let note = if changes.is_empty() {
        String::new()
    } else {
        format!(" [preset with {}]", changes.join(", "))
    };
    Ok((flags, note))
}

fn predict_on(
    case: &Case,
    metric: Metric,
    m: Machine,
    flags: &str,
) -> Result<Prediction, SimError> {
    match metric {
        Metric::Busbw | Metric::Algbw | Metric::TimeUs => {
            let named = case.collective.as_deref().unwrap_or("all_reduce");
            let coll = Collective::from_name(named)
                .filter(|c| *c != Collective::Barrier)
                .ok_or_else(|| SimError::Model(format!("unknown collective {named}")))?;
            // (0 nodes ran as 1.) Without `nodes`: the text's count ("2
            // nodes", "4x DGX H100"), else one.
            let nodes = case
                .nodes
                .or_else(|| text_node_count(&case.system))
                .unwrap_or(1);
            if nodes == 0 {
                return Err(SimError::Model(format!(
                    "case {}: nodes must be at least 1",
                    case.id
                )));
            }
            if let Some((name, _, None)) = instance(&case.system).filter(|_| nodes > 1) {
                if parse_nics(&case.system).is_none() {
                    return Err(SimError::Model(format!(
                        "case {}: the NICs of {name} instances are not modeled (TCP: ENA, \
                         GPUDirect-TCPX; or not documented here); state the NICs to run it \
                         on them",
                        case.id
                    )));
                }
            }
            // Without `gpus`: the text's count on one node ("4x A100"), else
            // every GPU of the nodes.
            let gpus = case
                .gpus
                .or_else(|| (nodes == 1).then(|| text_gpu_count(&case.system)).flatten())
                .map_or_else(
                    || {
                        m.node.gpus.checked_mul(nodes).ok_or_else(|| {
                            SimError::Model(format!(
                                "{nodes} nodes are more than the simulator takes"
                            ))
                        })
                    },
                    Ok,
                )?;
            let mut m = m;
            if gpus % nodes != 0 {
                return Err(SimError::Model(format!(
                    "{gpus} GPUs do not split over {nodes} nodes"
                )));
            }
            m.use_gpus(gpus / nodes)?;
            // Without peer access no pair of a node is peer to peer, as at
            // NCCL_P2P_LEVEL=LOC: NCCL joins them through host memory.
            let no_peer = no_peer_access(&case.system, &m);
            m.nccl_p2p_level = if no_peer {
                Some(crate::machine::P2pLevel::Loc)
            } else {
                p2p_level_stated(&case.system)
            };
            let bytes = case
                .bytes
                .ok_or_else(|| SimError::Model(format!("case {} has no bytes", case.id)))?;
            // NCCL_ALGO's syntax too: "ring,tree", "^nvls".
            let algorithm = match case.algorithm.as_deref() {
                None => Select::Any,
                Some(a) => Select::parse(a, AlgoChoice::parse).map_err(|e| {
                    SimError::Model(format!(
                        "case {}: unknown algorithm {a:?}: {e} (ring, tree, nvls, ... as NCCL_ALGO)",
                        case.id
                    ))
                })?,
            };
            // NCCL_PROTO's syntax: one name, a list, or `^` and those left out.
            let protocol = match case.protocol.as_deref() {
                None => Select::Any,
                Some(p) => Select::parse(p, Protocol::parse).map_err(|e| {
                    SimError::Model(format!(
                        "case {}: protocol {p:?}: {e} (LL, LL128, Simple, as NCCL_PROTO)",
                        case.id
                    ))
                })?,
            };
            let f = m.fabric(Engine::Nccl, nodes)?;
            // GPUs NCCL joins through host memory (its SHM transport, which
            // the simulator does not model): a run over P2P would overstate
            // it several times.
            if let Some((x, y)) = crate::collective::nccl_shm_pair(&f, coll) {
                let reason = if no_peer {
                    "no peer access between them".to_string()
                } else {
                    f.nccl_shm_reason()
                };
                return Err(SimError::Model(format!(
                    "case {}: NCCL passes data between GPU{x} and GPU{y} of {} ({reason}) \
                     through host memory, its SHM transport, which the simulator does not \
                     model (its collectives run over P2P)",
                    case.id, m.name
                )));
            }
            let r = simulate(
                &f,
                coll,
                bytes,
                &CollOptions {
                    algorithm,
                    protocol,
                    ..Default::default()
                },
            )?;
            let value = match metric {
                Metric::Busbw => r.busbw_gbps,
                Metric::Algbw => r.algbw_gbps,
                _ => r.time.as_us(),
            };
            Ok(Prediction {
                value,
                scenario: format!(
                    "gpucomm sim {} --topology {}{flags} --nodes {nodes} --gpus {} -b {bytes} -e {bytes}{}{} ({})",
                    coll.name(),
                    m.name,
                    gpus / nodes,
                    case.protocol
                        .as_deref()
                        .map(|p| format!(" --protocol {:?}", p.trim()))
                        .unwrap_or_default(),
                    m.nccl_p2p_level
                        .map(|l| format!(" --nccl-p2p-level {}", l.name().to_ascii_lowercase()))
                        .unwrap_or_default(),
                    r.algorithm.name()
                ),
            })
        }
        Metric::P2pBidirectional | Metric::P2pUnidirectional | Metric::P2pLatencyUs => {
            let f = m.fabric(Engine::CopyEngine, 1)?;
            let want_links = match nvlinks_named(&case.system) {
                // Through an NVSwitch every pair is joined the same way.
                Some(k) if k > 0 && matches!(m.node.nvlink, NvFabric::Switch { .. }) => None,
                k => k,
            };
            let disabled = no_peer_access(&case.system, &m);
            let g = m.node.gpus;
            // Where the pair sits in the PCIe tree, as `nvidia-smi topo -m`
            // names it: behind one switch (PIX/PXB), on one socket (NODE),
            // across sockets (SYS).
            let place = |a: usize, b: usize| {
                if f.switch_of_gpu(a).is_some() && f.switch_of_gpu(a) == f.switch_of_gpu(b) {
                    "switch"
                } else if f.socket_of_gpu(a) == f.socket_of_gpu(b) {
                    "socket"
                } else {
                    "sys"
                }
            };
            // nvidia-smi's labels in capitals ("NODE", not "one node").
            let label = |x: &str| {
                case.system
                    .split(|c: char| !c.is_ascii_alphanumeric())
                    .any(|w| w == x)
            };
            let want_place =
                if has(&case.system, "same PCIe switch") || label("PIX") || label("PXB") {
                    Some("switch")
                } else if has(&case.system, "across sockets")
                    || has(&case.system, "different sockets")
                    || has(&case.system, "different CPUs")
                    || has(&case.system, "across CPUs")
                    || has(&case.system, "cross-socket")
                    || label("SYS")
                {
                    Some("sys")
                } else if has(&case.system, "same socket")
                    || has(&case.system, "same CPU")
                    || has(&case.system, "same NUMA")
                    || label("NODE")
                {
                    Some("socket")
                } else {
                    None
                };
            // A pair the case names is the one measured: run as given
            // (the text's words only pick a pair where none is named).
            let pair = match case.pair.or_else(|| text_pair(&case.system)) {
                Some((a, b)) if a.max(b) >= g => {
                    return Err(SimError::Model(format!(
                        "case {}: pair {a},{b} is past {}'s {g} GPUs",
                        case.id, m.name
                    )));
                }
                // A pair named in the text whose links the text misstates
                // ("GPUs 0 and 4 (no NVLink)" where two join them): which
                // of the two was measured cannot be told.
                Some((a, b))
                    if case.pair.is_none()
                        && want_links.is_some_and(|k| f.nvlink_count(a, b) != k) =>
                {
                    return Err(SimError::Model(format!(
                        "case {}: the text names GPUs {a} and {b}, which {} NVLink(s) join in \
                         {}, and {} NVLink(s); give the pair measured as `pair`",
                        case.id,
                        f.nvlink_count(a, b),
                        m.name,
                        want_links.unwrap_or_default()
                    )));
                }
                Some(pair) => pair,
                None => (0..g)
                    .flat_map(|a| (a + 1..g).map(move |b| (a, b)))
                    .find(|&(a, b)| {
                        (match want_links {
                            Some(k) => {
                                f.nvlink_count(a, b) == k
                                    && (k > 0 || !matches!(m.node.nvlink, NvFabric::Switch { .. }))
                            }
                            None => true,
                        }) && want_place.is_none_or(|p| place(a, b) == p)
                    })
                    .ok_or_else(|| {
                        SimError::Model(format!(
                            "no GPU pair in {} matches {:?}",
                            m.name, case.system
                        ))
                    })?,
            };
            let bidir = metric == Metric::P2pBidirectional;
            let r = p2p(&m, pair.0, pair.1, bidir, !disabled, P2P_TEST_BYTES)?;
            let value = if metric == Metric::P2pLatencyUs {
                r.latency_us
            } else {
                r.bandwidth_gbps
            };
            Ok(Prediction {
                value,
                scenario: format!(
                    "gpucomm sim p2p --topology {}{flags} --pair {},{}{}{} ({})",
                    m.name,
                    pair.0,
                    pair.1,
                    if bidir { " --bidirectional" } else { "" },
                    if disabled { " --no-p2p" } else { "" },
                    r.path
                ),
            })
        }
        Metric::H2d | Metric::D2h => {
            let pageable = pageable_named(&case.system, &case.metric);
            let (from, to) = if metric == Metric::H2d {
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
                    "gpucomm sim copy --topology {}{flags} --from {} --to {}{}{} (PCIe Gen{})",
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
            "NVLink-C2C copy engines to the GPU, GB/s",
            model::C2C_CE_TO_GPU_GBPS,
            "median of three published GH200 host-to-device runs (docs/sim.md); the link binds first below 380 GB/s each way (GB200: 200)",
        ),
        (
            "NVLink-C2C copy engines from the GPU, GB/s",
            model::C2C_CE_FROM_GPU_GBPS,
            "median of the same runs' device-to-host rates (docs/sim.md)",
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
            "Peer copy start, direct link, us",
            model::CE_COPY_OVERHEAD_US,
            "assumption (published 16-byte peer copies: 1.3-1.4 P100, 1.6-2.0 DGX-1 V100, 1.67-2.49 A100 over PCIe)",
        ),
        (
            "Peer copy start, NVSwitch, Ampere, us",
            model::nvswitch_peer_copy_start_us(model::Arch::Ampere),
            "median published HGX A100 peer copy (3 runs, 3.16 us) less the route's 0.3 us (docs/sim.md)",
        ),
        (
            "Peer copy start, NVSwitch, Hopper, us",
            model::nvswitch_peer_copy_start_us(model::Arch::Hopper),
            "one published HGX H100 run (2.805 us) less the route's 0.3 us; Blackwell the same (assumption)",
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
            "NVIDIA/nccl src/enqueue.cc NCCL_P2P_LL_THRESHOLD (Simple above; across nodes Simple: no LL buffers for network peers, src/transport/net.cc)",
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

    /// Numbers written as a hand-made file may write them are read as the
    /// same case; what is not a number of the field's kind is an error for
    /// that case only, naming it, and the cases around it are still read.
    #[test]
    fn numbers_are_read_leniently_and_a_bad_case_spoils_only_itself() {
        let case = |id: &str, extra: &str| {
            format!(
                "[[case]]\nid = \"{id}\"\nsystem = \"8x H100 SXM, NVSwitch\"\nmetric = \"busbw\"\n\
                 collective = \"all_reduce\"\n{extra}\n"
            )
        };
        let plain = parse(&case(
            "x",
            "gpus = 8\nnodes = 1\nbytes = 8589934592\nvalue = 368.0",
        ))
        .unwrap()
        .remove(0);
        for extra in [
            "gpus = \"8\"\nnodes = 1.0\nbytes = \"8G\"\nvalue = \"368.0\"",
            "gpus = 8.0\nnodes = \" 1 \"\nbytes = 8.589934592e9\nvalue = 368",
            "gpus = 8\nnodes = 1\nbytes = \"8 GiB\"\nvalue = 368.0",
            "gpus = 8\nnodes = 1\nbytes = \"8192M\"\nvalue = 368.0",
            "gpus = 8\nnodes = 1\nbytes = \"8g\"\nvalue = \" 368 \"",
            "gpus = 8\nnodes = 1\nbytes = \"8_589_934_592\"\nvalue = 368.0",
        ] {
            let c = parse(&case("x", extra)).unwrap().remove(0);
            assert_eq!(c, plain, "{extra}");
        }
        assert_eq!(
            parse(&case("x", "bytes = \"1536\"\nvalue = 1.0")).unwrap()[0].bytes,
            Some(1536)
        );
        for (extra, says) in [
            (
                "bytes = \"8 gigs\"\nvalue = 1.0",
                "bytes = \"8 gigs\" is not a whole number",
            ),
            (
                "bytes = 1.5\nvalue = 1.0",
                "bytes = 1.5 is not a whole number",
            ),
            (
                "bytes = -8\nvalue = 1.0",
                "bytes = -8 is not a whole number",
            ),
            ("bytes = \"0.3K\"\nvalue = 1.0", "is not a whole number"),
            (
                "bytes = \"99999999T\"\nvalue = 1.0",
                "is not a whole number",
            ),
            ("gpus = 2.5\nvalue = 1.0", "2.5 is not a count"),
            ("nodes = \"two\"\nvalue = 1.0", "\"two\" is not a count"),
            ("gpus = -1\nvalue = 1.0", "-1 is not a count"),
            (
                "value = \"368 GB/s\"",
                "value = \"368 GB/s\" is not a number",
            ),
            ("value = [368.0]", "case bad"),
            ("bytes = 8", "missing field `value`"),
            ("value = 1.0\nbytes = \"0\"", "bytes must be positive"),
        ] {
            let text = format!(
                "{}{}{}",
                case("a", "value = 1.0"),
                case("bad", extra),
                case("b", "value = 2.0")
            );
            let e = parse(&text).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("bad"), "{extra}: {e}");
            let each = parse_each(&text).unwrap();
            assert_eq!(each.len(), 3);
            assert_eq!(each[0].as_ref().unwrap().value, 1.0);
            assert_eq!(each[2].as_ref().unwrap().value, 2.0);
            let u = each[1].as_ref().unwrap_err();
            assert_eq!(u.id, "bad");
            assert!(u.error.to_string().contains(says), "{extra}: {}", u.error);
        }
        // No id: named by its place; `[[cases]]` read as `[[case]]`.
        let text = "[[cases]]\nid = \"a\"\nsystem = \"s\"\nmetric = \"busbw\"\nvalue = 1.0\n\
                    [[cases]]\nsystem = \"s\"\nmetric = \"busbw\"\nvalue = 1.0\n";
        let each = parse_each(text).unwrap();
        assert!(each[0].is_ok());
        let u = each[1].as_ref().unwrap_err();
        assert_eq!(u.id, "case 2");
        assert!(
            u.error
                .to_string()
                .contains("case 2 (it has no id): missing field `id`"),
            "{}",
            u.error
        );
        // Not TOML, or no cases: the whole file is refused.
        assert!(parse_each("[[case]\n").is_err());
        assert!(parse_each("title = \"no cases\"\n").is_err());
    }

    /// The metric's spellings read as the file's names; a protocol forces
    /// NCCL_PROTO on a collective and is refused elsewhere.
    #[test]
    fn metric_spellings_and_a_forced_protocol() {
        let case = |metric: &str, extra: &str| {
            format!(
                "[[case]]\nid = \"x\"\nsystem = \"8x H100 SXM, NVLink 4, NVSwitch, one node\"\n\
                 metric = \"{metric}\"\ngpus = 8\nnodes = 1\nbytes = 1073741824\nvalue = 100.0\n{extra}"
            )
        };
        let predicted = |metric: &str, extra: &str| {
            let c = parse(&case(metric, extra)).unwrap().remove(0);
            predict(&c)
        };
        let busbw = predicted("busbw", "collective = \"all_reduce\"").unwrap();
        for spelling in [
            "BusBW",
            "busbw_gbps",
            "bus-bandwidth",
            "bus bandwidth (GB/s)",
        ] {
            let p = predicted(spelling, "collective = \"all_reduce\"").unwrap();
            assert_eq!(p, busbw, "{spelling}");
        }
        let time = predicted("time_us", "collective = \"all_reduce\"").unwrap();
        assert_eq!(
            predicted("latency_us", "collective = \"all_reduce\"").unwrap(),
            time
        );
        let e = predicted("flops", "").unwrap_err().to_string();
        assert!(e.contains("unknown metric \"flops\" in case x"), "{e}");
        assert_eq!(
            predicted("bandwidth_gbps", "collective = \"all_reduce\"").unwrap(),
            busbw
        );
        // A bare bandwidth without a collective: the text says which.
        let kind = |system: &str| {
            let c = Case {
                id: "k".into(),
                system: system.into(),
                metric: "Bandwidth".into(),
                collective: None,
                algorithm: None,
                protocol: None,
                pair: None,
                gpus: None,
                nodes: None,
                bytes: None,
                value: 1.0,
                source: String::new(),
                tolerance_note: None,
                unread: Default::default(),
            };
            Metric::of(&c).ok()
        };
        assert_eq!(
            kind("H100 SXM, PCIe Gen5, pinned, host to device"),
            Some(Metric::H2d)
        );
        assert_eq!(kind("A100 PCIe, D2H, pageable"), Some(Metric::D2h));
        assert_eq!(
            kind("DGX-1 V100, one NVLink, bidirectional"),
            Some(Metric::P2pBidirectional)
        );
        assert_eq!(
            kind("DGX-1 V100, P2P over one NVLink"),
            Some(Metric::P2pUnidirectional)
        );
        assert_eq!(kind("DGX-1 V100"), None);
        // NCCL_PROTO=LL at 1 GiB on one DGX H100 ring: slower than the
        // tuner's pick (Simple), and said in the scenario; NCCL_PROTO's
        // `^` syntax reads too.
        let ring = "collective = \"all_reduce\"\nalgorithm = \"ring\"";
        let tuned = predicted("busbw", ring).unwrap();
        let ll = predicted("busbw", &format!("{ring}\nprotocol = \"LL\"")).unwrap();
        assert!(ll.value < 0.8 * tuned.value, "{ll:?} {tuned:?}");
        assert!(ll.scenario.contains("--protocol \"LL\""), "{}", ll.scenario);
        let only_ll = predicted("busbw", &format!("{ring}\nprotocol = \"^LL128,Simple\"")).unwrap();
        assert_eq!(only_ll.value, ll.value);
        let e = predicted("busbw", &format!("{ring}\nprotocol = \"LL256\"")).unwrap_err();
        assert!(e.to_string().contains("protocol \"LL256\""), "{e}");
        let e = predicted("p2p_latency_us", "protocol = \"LL\"").unwrap_err();
        assert!(e.to_string().contains("only a collective's metric"), "{e}");
    }

    /// A cloud instance named without its hardware runs on what its
    /// provider documents; what the text states is kept; an instance
    /// without RDMA NICs is refused across nodes, run inside one.
    #[test]
    fn cloud_instances_read_as_their_hardware() {
        let case = |system: &str, nodes: usize| {
            parse(&format!(
                "[[case]]\nid = \"c\"\nsystem = \"{system}\"\nmetric = \"busbw\"\n\
                 collective = \"all_reduce\"\ngpus = {}\nnodes = {nodes}\nbytes = 1073741824\nvalue = 100.0\n",
                8 * nodes
            ))
            .unwrap()
            .remove(0)
        };
        for (named, stated) in [
            ("2x AWS p4d.24xlarge", "2x A100 SXM4 nodes, 4x 100 Gb/s EFA"),
            ("2x p5.48xlarge", "2x H100 SXM nodes, 32x 100 Gb/s EFA"),
            (
                "2x Standard_ND96asr_v4",
                "2x A100 SXM4 nodes, 8x HDR 200 Gb/s InfiniBand",
            ),
            (
                "2x Azure ND H100 v5 VMs",
                "2x H100 nodes, 8x NDR 400 Gb/s InfiniBand",
            ),
            ("2x p6-b200.48xlarge", "2x B200 nodes, 8x 400 Gb/s EFA"),
        ] {
            let a = predict(&case(named, 2)).unwrap();
            let b = predict(&case(stated, 2)).unwrap();
            assert_eq!(a, b, "{named}");
        }
        // The text's own NICs win.
        let own = predict(&case("2x p5.48xlarge, 8x 400G EFA", 2)).unwrap();
        assert!(own.scenario.contains("--nics 8 "), "{}", own.scenario);
        // GCP's A3 High runs its NICs over TCP: one node runs, two do not.
        assert!(
            predict(&case("a3-highgpu-8g", 1))
                .unwrap()
                .scenario
                .contains("dgx-h100")
        );
        let e = predict(&case("2x a3-highgpu-8g", 2))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the NICs of a3-highgpu-8g instances are not modeled"),
            "{e}"
        );
        assert_eq!(
            with_instance_hardware("AWS p4d instances"),
            with_instance_hardware("AWS p4d.24xlarge instances").replace(".24xlarge", "")
        );
        assert_eq!(with_instance_hardware("p4"), "p4");
    }

    /// The text's words for a pair's links, P2P being off and the GPUs
    /// named, as published runs word them.
    #[test]
    fn reads_point_to_point_phrasings() {
        for (text, want) in [
            (
                "DGX-1 V100, hybrid cube mesh; GPU pair joined by two NVLink 2 links",
                Some(2),
            ),
            ("DGX-1 V100, pair joined by 2 NVLinks", Some(2)),
            ("DGX-1 (V100), GPU0<->GPU3, NVLink x2", Some(2)),
            ("DGX-1 V100, double NVLink pair", Some(2)),
            ("DGX-1 V100, single NVLink 2 connection", Some(1)),
            ("DGX-1 V100; GPU pair joined by one NVLink 2 link", Some(1)),
            ("DGX-1 V100; P2P enabled over NVLink", Some(1)),
            ("DGX-1 V100; GPU pair with no NVLink between them", Some(0)),
            ("DGX-1 V100, GPUs not connected by NVLink", Some(0)),
            ("DGX-1 V100, P2P over PCIe", Some(0)),
            (
                "DGX-1 V100; P2P disabled (copies staged through host memory)",
                None,
            ),
            ("DGX-1 V100", None),
        ] {
            assert_eq!(nvlinks_named(text), want, "{text}");
        }
        for (text, want) in [
            (
                "DGX-1 V100; P2P disabled (copies staged through host memory)",
                true,
            ),
            ("DGX-1 V100, P2P=Disabled", true),
            ("DGX-1 V100 (p2pBandwidthLatencyTest, disabled P2P)", true),
            ("DGX-1 V100, peer access off", true),
            ("DGX-1 V100; P2P enabled over NVLink", false),
            ("DGX-1 V100, P2P enabled but not possible", false),
        ] {
            assert_eq!(p2p_disabled(text), want, "{text}");
        }
        for (text, want) in [
            ("DGX-1 V100, GPU0 <-> GPU5", Some((0, 5))),
            ("between GPU 0 and GPU 3", Some((0, 3))),
            ("DGX-1 V100 GPUs 0 and 4", Some((0, 4))),
            ("GPU0-GPU1 over one NVLink", Some((0, 1))),
            ("8 GPUs, NVLink", None),
            ("GPU0 only", None),
        ] {
            assert_eq!(text_pair(text), want, "{text}");
        }
        // A text whose pair and links disagree is refused; on an NVSwitch
        // machine "NVLink" picks any pair.
        let run = |system: &str| {
            predict(
                &parse(&format!(
                    "[[case]]\nid = \"t\"\nsystem = \"{system}\"\nmetric = \"p2p_latency_us\"\nvalue = 2.0\n"
                ))
                .unwrap()
                .remove(0),
            )
        };
        let e = run("DGX-1 V100 GPUs 0 and 4 (no NVLink)")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("names GPUs 0 and 4, which 2 NVLink(s) join"),
            "{e}"
        );
        assert!(
            run("DGX-1 V100, GPU0 <-> GPU5")
                .unwrap()
                .scenario
                .contains("--pair 0,5 ")
        );
        assert!(
            run("DGX H100, P2P over NVLink 4")
                .unwrap()
                .scenario
                .contains("--pair 0,1 ")
        );
        assert!(
            run("DGX-1 V100, P2P=Disabled")
                .unwrap()
                .scenario
                .contains("--no-p2p")
        );
    }

    /// Second review's wordings: SHARP named but not in use, P2P off,
    /// nvidia-smi's NV2, "Gen" of other things, machines with no preset.
    #[test]
    fn reads_second_review_phrasings() {
        let sharp = |t: &str| machine_for(t).unwrap().network.sharp;
        assert!(sharp("2x DGX H100, 8x NDR 400G, SHARPv3 enabled"));
        assert!(sharp("4x DGX H100 with SHARP"));
        // A negation after SHARP of another thing.
        assert!(sharp("2x DGX H100, 8x NDR 400G, SHARP enabled, not NVLS"));
        assert!(sharp(
            "2x DGX H100, 8x NDR 400G, SHARP on, no CollNet chains"
        ));
        for t in [
            "2x DGX H100, 8x NDR 400G (SHARP-capable; SHARP was not enabled)",
            "2x DGX A100, SHARPv2-capable Quantum HDR switches, CollNet off",
            "2x DGX H100, NVLS on; no InfiniBand SHARP",
            "2x DGX H100, NVSwitch SHARP (NVLS) inside the node",
            "2x DGX H100, busbw drops sharply below 64 MB",
            "2x DGX H100, 8x NDR 400G, SHARP: no",
            "2x DGX H100, 8x NDR 400G, SHARP not in use",
        ] {
            assert!(!sharp(t), "{t}");
        }
        for t in [
            "DGX-1 V100; peer-to-peer disabled, copies through host",
            "DGX-1 V100; P2P access disabled",
            "DGX-1 V100; with P2P turned off",
            "DGX-1 V100, hybrid cube mesh; P2P: no (cudaDeviceCanAccessPeer = 0)",
            "8x L40S server, P2P unsupported (peer access not available)",
        ] {
            assert!(p2p_disabled(t), "{t}");
        }
        for (t, want) in [
            (
                "DGX-1 V100, GPU pair shown as NV2 by nvidia-smi topo -m",
                Some(2),
            ),
            ("DGX-1 V100, connected by 2 links of NVLink2", Some(2)),
            ("DGX-1 V100, a 2-link NVLink connection", Some(2)),
            ("DGX-1 V100, NVLink-connected pair (2 links)", Some(2)),
            (
                "DGX-1 V100, pair not NVLink-connected (PCIe, same CPU)",
                Some(0),
            ),
            ("DGX-1 V100, NVLink-less pair on different sockets", Some(0)),
        ] {
            assert_eq!(nvlinks_named(t), want, "{t}");
        }
        for (t, want) in [
            (
                "H100 SXM5, PCIe Gen5 x16, AMD EPYC Gen 4 (Genoa) host, pinned",
                Some(5),
            ),
            (
                "A100 SXM4 80GB, PCIe Gen4, AMD EPYC Gen3 (Milan) host",
                Some(4),
            ),
            ("A100 SXM4 40GB (Gen 3 Tensor Cores), PCIe 4.0", Some(4)),
            (
                "H100 SXM (HGX), PCIe Gen5, ConnectX-6 Dx Gen4 NIC in the box",
                Some(5),
            ),
        ] {
            assert_eq!(pcie_generation(&words(t)), want, "{t}");
        }
        assert_eq!(pcie_generation(&words("DGX H100 (Gen4 NVMe)")), None);
        assert_eq!(
            machine_for("HGX-2, 16x Tesla V100 SXM3").unwrap().name,
            "dgx2"
        );
        for t in [
            "GB200 NVL36, 2 trays",
            "V100 SXM2 16GB, IBM Power System AC922, NVLink 2.0 CPU-GPU link",
            "4x A100 SXM4 (HGX A100 4-GPU, direct NVLink, no NVSwitch)",
        ] {
            assert!(machine_for(t).is_err(), "{t}");
        }
        // A host copy crosses the PCIe link, as the NVSwitch preset has it.
        assert!(copy_machine_for("HGX A100 4-GPU, PCIe Gen4, pinned").is_ok());
        assert!(machine_for("8x L40S PCIe, no NVLink, no NVSwitch").is_ok());
        let port = |t: &str| nic_port(t, 8, 8).unwrap().map(|p| p.0);
        assert_eq!(
            port("2x HGX A100 80GB, one 200 Gb/s HDR NIC per GPU pair"),
            Some(4)
        );
        assert_eq!(
            port("2x HGX A100 80GB, one 200G HDR HCA per 2 GPUs"),
            Some(4)
        );
    }

    /// A named pair is the one run, in any of its spellings; the text's
    /// words pick one only where none is named.
    #[test]
    fn a_named_gpu_pair_is_run_as_given() {
        let case = |extra: &str| {
            format!(
                "[[case]]\nid = \"p\"\nsystem = \"DGX-1 V100; P2P enabled over NVLink\"\n\
                 metric = \"p2p_bidirectional_bandwidth\"\nvalue = 40.0\n{extra}"
            )
        };
        let run = |extra: &str| predict(&parse(&case(extra)).unwrap().remove(0));
        // The words alone: the first pair over one NVLink, 0 and 1.
        assert!(run("").unwrap().scenario.contains("--pair 0,1 "));
        let direct = p2p(
            &Machine::preset("dgx1-v100").unwrap(),
            0,
            5,
            true,
            true,
            P2P_TEST_BYTES,
        )
        .unwrap()
        .bandwidth_gbps;
        for spelled in [
            "pair = [0, 5]",
            "pair = \"0,5\"",
            "gpu_pair = \"GPU0-GPU5\"",
            "pair = \"gpu0 gpu5\"",
        ] {
            let p = run(spelled).unwrap();
            assert!(
                p.scenario.contains("--pair 0,5 "),
                "{spelled}: {}",
                p.scenario
            );
            assert_eq!(p.value, direct, "{spelled}");
        }
        for bad in [
            "pair = [0]",
            "pair = [3, 3]",
            "pair = \"zero,five\"",
            "pair = [-1, 2]",
        ] {
            let e = parse(&case(bad)).unwrap_err().to_string();
            assert!(e.contains("is not two different GPU indices"), "{bad}: {e}");
        }
        let e = run("pair = [0, 8]").unwrap_err().to_string();
        assert!(e.contains("pair 0,8 is past dgx1-v100's 8 GPUs"), "{e}");
    }

    /// `algo = "ring"` (for `algorithm`) ran as the tuner's NVLS unsaid: it
    /// is read as `algorithm` now, and a field of no known name is kept as
    /// unread (the file still loads); `nodes = 0` ran as one node; 5e-324
    /// printed an infinite error.
    #[test]
    fn unread_fields_are_kept_no_nodes_and_no_measurement_are_refused() {
        let case = |extra: &str| {
            format!(
                "[[case]]\nid = \"x\"\nsystem = \"8x H100 SXM, NVSwitch\"\nmetric = \"busbw\"\n\
                 collective = \"all_reduce\"\nbytes = 1048576\nvalue = 100.0\n{extra}"
            )
        };
        let ok = case(
            "gpus = 8\nalgorithm = \"ring\"\nnodes = 1\nsource = \"s\"\ntolerance_note = \"t\"",
        );
        let c = parse(&ok).unwrap().remove(0);
        assert_eq!(c.algorithm.as_deref(), Some("ring"));
        assert!(c.unread.is_empty(), "{:?}", c.unread);
        let c = parse(&case("algo = \"ring\"\nnotes = \"n\"\nalgoritm = \"tree\""))
            .unwrap()
            .remove(0);
        assert_eq!(c.algorithm.as_deref(), Some("ring"));
        let unread: Vec<&str> = c.unread.keys().map(String::as_str).collect();
        assert_eq!(unread, ["algoritm", "notes"]);
        // The other names of the fields read.
        let other = parse(
            &case("proto = \"Simple\"\nranks = \"16\"\nnum_nodes = 2")
                .replace("bytes = 1048576", "size = \"1M\""),
        )
        .unwrap()
        .remove(0);
        assert_eq!(
            (
                other.protocol.as_deref(),
                other.gpus,
                other.nodes,
                other.bytes
            ),
            (Some("Simple"), Some(16), Some(2), Some(1 << 20))
        );
        assert!(other.unread.is_empty(), "{:?}", other.unread);
        // Both names of one field: the case is refused, not one of them
        // taken.
        let e = parse(&case("algo = \"ring\"\nalgorithm = \"tree\"")).unwrap_err();
        assert!(e.to_string().contains("duplicate field"), "{e}");
        for field in ["nodes", "gpus"] {
            let e = parse(&case(&format!("{field} = 0")))
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("{field} must be at least 1")), "{e}");
        }
        for v in ["5e-324", "1e-7"] {
            let e = parse(&case("").replace("value = 100.0", &format!("value = {v}")))
                .unwrap_err()
                .to_string();
            assert!(e.contains("case x: value must be"), "{v}: {e}");
        }
        // Built in code: refused by predict too (it divided by no nodes).
        let mut c = parse(&case("")).unwrap().remove(0);
        c.nodes = Some(0);
        let e = predict(&c).unwrap_err().to_string();
        assert!(e.contains("nodes must be at least 1"), "{e}");
    }

    /// A prediction of 0 (one GPU's busbw: nccl-tests' factor is 0)
    /// printed a -100% error; it is no prediction to check.
    #[test]
    fn a_case_predicted_as_nothing_is_an_error_naming_it() {
        for (coll, gpus, bytes) in [("all_to_all", 1, 1 << 20), ("all_reduce", 1, 1 << 20)] {
            let text = format!(
                "[[case]]\nid = \"none\"\nsystem = \"8x H100 SXM, NVSwitch\"\nmetric = \"busbw\"\n\
                 collective = \"{coll}\"\ngpus = {gpus}\nnodes = 1\nbytes = {bytes}\nvalue = 100.0\n"
            );
            let c = parse(&text).unwrap().remove(0);
            let e = predict(&c).unwrap_err().to_string();
            assert!(
                e.contains("case none: the simulated busbw is 0")
                    && e.contains("cannot be checked"),
                "{e}"
            );
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
        assert!(machine_for("8x Tesla T4, PCIe Gen3").is_err());
        assert!(machine_for("8x MI300X").is_err());
        // A known architecture on PCIe cards is the PCIe server's.
        assert_eq!(machine_for("8x L40S, PCIe Gen4").unwrap().name, "pcie-8gpu");
        assert_eq!(
            machine_for("V100 SXM2, PCIe Gen3 x16")
                .unwrap()
                .node
                .pcie_gen,
            3
        );
    }

    /// The NICs a text states become the port `gpucomm sim --nic-speed`
    /// takes: the InfiniBand generation it names, RoCE where it names
    /// Ethernet, else InfiniBand at that rate.
    #[test]
    fn stated_nics_are_a_port_gpucomm_sim_takes() {
        // NICs for management or storage are not the GPUs' network.
        for text in [
            "2x DGX H100, 2x 100GbE in-band management, 8x NDR 400 Gb/s InfiniBand compute fabric",
            "2 nodes of 8x H100 SXM; storage: 2x 200G Ethernet; compute: 8x 400G InfiniBand",
            "2x DGX H100, 1x 25 GbE storage NIC, 8x NDR 400 Gb/s",
        ] {
            assert_eq!(parse_nics(text), Some((8, 400.0)), "{text}");
        }
        // A generation without a count: the preset's NICs at its rate.
        for (text, want) in [
            ("2x DGX H100, HDR InfiniBand", Some((8, "hdr"))),
            (
                "2 DGX A100, HDR100 InfiniBand, 8 ports",
                Some((8, "hdr100")),
            ),
            ("2x DGX A100, EDR or HDR InfiniBand", None),
        ] {
            let got = nic_port(text, 8, 8)
                .unwrap()
                .map(|(n, p)| (n, gpucomm_topo::catalog::port_name(p).unwrap()));
            assert_eq!(got, want.map(|(n, p)| (n, p.to_string())), "{text}");
        }
        assert_eq!(
            nic_port("8x A100 PCIe, HDR InfiniBand", 8, 0).unwrap(),
            None
        );
        let port = |text: &str| {
            nic_port(text, 8, 8)
                .unwrap()
                .map(|(n, p)| (n, gpucomm_topo::catalog::port_name(p).unwrap()))
        };
        let cases = [
            (
                "2x DGX A100, 8x HDR 200 Gb/s InfiniBand NICs per node",
                (8, "hdr"),
            ),
            ("2x DGX H100, 8x NDR200 InfiniBand", (8, "ndr200")),
            ("2x DGX A100, 8x HDR100 InfiniBand", (8, "hdr100")),
            ("2x HGX H100, 2x 100 GbE RoCE", (2, "roce100")),
            ("2x H100 SXM nodes, 4x EFA 100 Gb/s", (4, "roce100")),
            ("2x DGX H100, 8x 400G NICs", (8, "ndr")),
            ("2x DGX H100, 16x 300 Gb/s NICs", (16, "roce300")),
            // FDR is stated at its nominal 56 Gb/s (54.55 of data).
            ("2x DGX-1 V100, 4x FDR 56 Gb/s InfiniBand", (4, "fdr")),
            ("4x 56Gb/s FDR InfiniBand", (4, "fdr")),
            ("2x DGX-1, 4x FDR56 InfiniBand", (4, "fdr")),
            // One per GPU: the node's GPUs (read as one NIC before).
            ("2x DGX H100, one 400G NIC per GPU", (8, "ndr")),
            (
                "2x 8-GPU A100 servers, a single ConnectX-6 100Gb/s NIC each",
                (1, "edr"),
            ),
            ("2x HGX H100, dual 200G RoCE NICs", (2, "roce200")),
        ];
        for (text, (n, name)) in cases {
            assert_eq!(port(text), Some((n, name.to_string())), "{text}");
        }
        assert_eq!(port("2x DGX H100"), None);
    }

    /// A case's scenario is a command that gives its prediction: NICs
    /// other than the preset's and SHARP are `gpucomm sim` options, built
    /// by the same code (`Machine::select_with_nics`).
    #[test]
    fn a_scenario_names_the_nics_and_sharp_as_options() {
        let case = |system: &str| Case {
            id: "x".into(),
            system: system.into(),
            metric: "busbw".into(),
            collective: Some("all_reduce".into()),
            algorithm: Some("ring".into()),
            protocol: None,
            pair: None,
            gpus: Some(16),
            nodes: Some(2),
            bytes: Some(1 << 30),
            value: 100.0,
            source: String::new(),
            tolerance_note: None,
            unread: Default::default(),
        };
        let p = predict(&case(
            "2x DGX A100, 4x HDR 200 Gb/s InfiniBand NICs per node",
        ))
        .unwrap();
        assert!(
            p.scenario
                .contains("--topology dgx-a100 --nics 4 --nic-speed hdr --nodes 2"),
            "{}",
            p.scenario
        );
        let hdr = gpucomm_topo::catalog::parse_port("hdr");
        let m = Machine::select_with_nics("dgx-a100", Some(4), hdr).unwrap();
        let r = simulate(
            &m.fabric(Engine::Nccl, 2).unwrap(),
            Collective::AllReduce,
            1 << 30,
            &CollOptions {
                algorithm: AlgoChoice::parse("ring").into(),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(p.value, r.busbw_gbps);
        // The preset's own NICs change nothing.
        let p = predict(&case(
            "2x DGX A100, 8x HDR 200 Gb/s InfiniBand NICs per node",
        ))
        .unwrap();
        assert!(!p.scenario.contains("--nics"), "{}", p.scenario);
        let p = predict(&case("2x DGX A100, 8x HDR 200 Gb/s InfiniBand with SHARP")).unwrap();
        assert!(
            p.scenario.contains("--topology dgx-a100 --sharp --nodes 2"),
            "{}",
            p.scenario
        );
        // SHARP is InfiniBand's: on RoCE the text contradicts itself.
        let e = machine_for("2x DGX H100, 8x 400G RoCE with SHARP")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("states SHARP") && e.contains("not InfiniBand"),
            "{e}"
        );
        // Nor do EDR's switches reduce large messages (`--sharp`'s check).
        let e = machine_for("2x DGX-1 V100, 4x EDR 100 Gb/s InfiniBand with SHARP")
            .unwrap_err()
            .to_string();
        assert!(e.contains("states SHARP") && e.contains("EDR"), "{e}");
        // Without an NVSwitch, CollNet runs as NCCL's CollNet Chain: on
        // the two GPUs of a PCIe switch per node (all eight join through
        // host memory, NCCL's SHM transport, refused).
        let text = "2x 8x A100 PCIe, 8x HDR 200 Gb/s InfiniBand with SHARP";
        let p = predict(&Case {
            gpus: Some(4),
            ..case(text)
        })
        .unwrap();
        assert!(p.scenario.contains("--sharp"), "{}", p.scenario);
        let e = predict(&case(text)).unwrap_err().to_string();
        assert!(e.contains("SHM"), "{e}");
        // Unless NCCL is told to go peer to peer through the CPU.
        let p = predict(&case(&format!("{text}, NCCL_P2P_LEVEL=SYS"))).unwrap();
        assert!(p.value > 0.0);
        assert!(
            p.scenario.contains("--nccl-p2p-level sys"),
            "{}",
            p.scenario
        );
        assert_eq!(
            p2p_level_stated("NCCL_P2P_LEVEL = phb"),
            Some(crate::machine::P2pLevel::Phb)
        );
        assert_eq!(p2p_level_stated("NCCL_P2P_LEVEL=far"), None);
        assert_eq!(
            p2p_level_stated("NCCL_P2P_LEVEL unset; then NCCL_P2P_LEVEL: SYS"),
            Some(crate::machine::P2pLevel::Sys)
        );
        assert_eq!(
            p2p_level_stated("NCCL_P2P_LEVEL=3"),
            Some(crate::machine::P2pLevel::Phb)
        );
    }

    #[test]
    fn reads_pageable_and_pinned_phrasings() {
        for (text, want) in [
            // The calibration file's own.
            (
                "RTX 4090, PCIe Gen4 x16, pageable host memory (pinned on the same machine: 22.5-23.9)",
                true,
            ),
            (
                "H100 SXM, PCIe Gen5 x16, pinned host memory, host to device",
                false,
            ),
            ("GeForce RTX 3090, non-pinned (pageable) host memory", true),
            ("RTX 4090, unpinned host memory", true),
            ("RTX 4090, pageable memory (pinned: 25 GB/s)", true),
            ("RTX 4090, PCIe Gen4 x16, pageable (vs. pinned)", true),
            ("A100 SXM, PCIe4, not pinned", true),
            ("V100 SXM2, PCI-E 3.0, paged host memory", true),
            ("A100 SXM4 80GB, H2D with malloc", true),
            ("A100 SXM4, pinned and pageable compared: pageable", true),
            ("pinned memory (pageable memory: 16 GB/s)", false),
            ("A100, page-locked host memory", false),
            ("A100 (pageable)", true),
            ("A100, PCIe Gen4", false),
            ("A100, non-pageable host memory", false),
            ("A100, not pageable (page-locked)", false),
            (
                "A100, pageable memory registered with cudaHostRegister",
                false,
            ),
            (
                "A100, cudaMemcpy from pageable memory, no cudaHostRegister",
                true,
            ),
            // bandwidthTest's flag decides over a mention of the other.
            (
                "H100 SXM; bandwidthTest --memory=pinned, pageable results in the next row",
                false,
            ),
            ("A100, bandwidthTest --memory=pageable (pinned: 25)", true),
        ] {
            assert_eq!(pageable_named(text, "h2d_bandwidth"), want, "{text}");
        }
        assert!(pageable_named("A100, PCIe Gen4", "h2d_pageable_bandwidth"));
        assert!(!pageable_named("A100, pageable", "d2h_pinned_bw"));
    }

    #[test]
    fn counts_nodes_in_the_text() {
        for (text, want) in [
            (
                "H100 cluster, 2 nodes (8 GPUs each), 8x 400Gb/s ConnectX-7",
                Some(2),
            ),
            ("4x DGX H100 with SHARP", Some(4)),
            ("2 x HGX A100, 8x HDR", Some(2)),
            ("two servers with 8x A100", Some(2)),
            ("2 DGX H100 nodes, 4 NDR HCAs per node", Some(2)),
            ("16 VMs of 8x H100", Some(16)),
            ("8x H100 SXM, NVLink 4, one node", Some(1)),
            ("8x H100 SXM, 8x 400G NICs", None),
            ("2x A100 nodes", None),
        ] {
            assert_eq!(text_node_count(text), want, "{text}");
        }
    }

    #[test]
    fn counts_gpus_in_the_text() {
        for (text, want) in [
            ("4x A100 SXM4 (HGX A100 4-GPU)", Some(4)),
            ("8 x NVIDIA A100-SXM4-80GB", Some(8)),
            ("8× H100 SXM", Some(8)),
            ("four Tesla V100-SXM2-16GB", Some(4)),
            ("2x GeForce RTX 4090", Some(2)),
            ("2x DGX A100, 8x HDR", None),
            ("DGX H100", None),
            ("H100 SXM, PCIe Gen5 x16", None),
            ("RTX 3090 24GB x4", Some(4)),
            ("GeForce RTX 4090 x 2", Some(2)),
            ("dual RTX 4090 workstation", Some(2)),
            ("dual-socket EPYC server", None),
        ] {
            assert_eq!(text_gpu_count(text), want, "{text}");
        }
        // A one-node collective case without `gpus` runs the text's count.
        let c = parse(
            "[[case]]\nid = \"c\"\nsystem = \"4x A100 SXM4, NVSwitch\"\nmetric = \"busbw\"\n\
             collective = \"all_reduce\"\nbytes = 1073741824\nvalue = 100.0\n",
        )
        .unwrap()
        .remove(0);
        assert!(predict(&c).unwrap().scenario.contains("--gpus 4 "));
    }

    #[test]
    fn reads_nic_phrasings() {
        for (text, want) in [
            ("8 x ConnectX-7 400Gbps per node", Some((8, 400.0))),
            ("nodes with 8×400G NDR InfiniBand", Some((8, 400.0))),
            ("A100 nodes, 2x 100 GbE RoCE", Some((2, 100.0))),
            ("4x 200 Gb/s HDR HCAs per node", Some((4, 200.0))),
            (
                "2x DGX A100, 8x HDR 200 Gb/s InfiniBand NICs",
                Some((8, 200.0)),
            ),
            // Bytes per second are eight times as many bits (they were
            // skipped, and the preset's NICs kept).
            ("8x 50 GB/s NICs", Some((8, 400.0))),
            ("4x 25GBps NICs", Some((4, 200.0))),
            ("8x H100 SXM, NVLink 4", None),
            // A generation without a stated speed is its port speed (it
            // was not read, and the preset's eight NICs kept).
            ("2x DGX A100, 4x HDR200 NICs", Some((4, 200.0))),
            ("2x DGX A100 with 4x HDR InfiniBand", Some((4, 200.0))),
            ("2x DGX-1, 4x EDR InfiniBand", Some((4, 100.0))),
            ("nodes with 2x NDR200 HCAs", Some((2, 200.0))),
            // A count after the NICs; a count of nodes is not the NICs'
            // (it was read as 2 NICs of 400 Gb/s).
            ("2x DGX H100 nodes, NDR 400 Gb/s x8", Some((8, 400.0))),
            ("2 x H100 nodes, 8x NDR", Some((8, 400.0))),
            ("two DGX A100, four 200 Gb/s HDR NICs", Some((4, 200.0))),
            // A PCIe link's width is not a NIC count.
            ("ConnectX-7 400Gb/s on PCIe Gen5 x16", None),
            ("V100 SXM2, PCIe Gen3 x16, 1x EDR", Some((1, 100.0))),
            ("4x DGX H100 with SHARP", None),
            // The network named before the count, or by an Ethernet speed
            // alone (both read as no NICs, the preset's kept, before the
            // forty-eighth session).
            ("2x A100 nodes, RoCE 8x 100GbE", Some((8, 100.0))),
            (
                "2x H100 nodes; InfiniBand: 8x 400G per node",
                Some((8, 400.0)),
            ),
            ("A100 nodes with 4x 100GbE", Some((4, 100.0))),
            ("2x A100 nodes, 8x 100G", None),
            ("8x H100, NVLink 4, 8x 400G", None),
            // NVLink's own counts and rates are not NICs (18 NICs of 7200
            // Gb/s before).
            (
                "8x H100 SXM, 18x NVLink 4 (900 GB/s), 2 nodes, 8x NDR 400G",
                Some((8, 400.0)),
            ),
            (
                "DGX A100: 600 GB/s, NVLink 3 x12, 2 nodes, HDR InfiniBand",
                None,
            ),
            (
                "2x DGX H100, 8x NDR 400G InfiniBand, NVLink 4",
                Some((8, 400.0)),
            ),
            // Counts written without an "x", or glued to the speed.
            ("2 DGX H100 nodes, 4 NDR HCAs per node", Some((4, 400.0))),
            ("2x DGX H100, 4 NDR400 HCAs", Some((4, 400.0))),
            ("2x HGX H100, RoCEv2 8x200G", Some((8, 200.0))),
            ("2x DGX H100, 8x200G HDR per node", Some((8, 200.0))),
            ("2x HGX A100 80GB, 8x Mellanox CX6 100G", Some((8, 100.0))),
            ("2x DGX A100, x4 HDR", Some((4, 200.0))),
            ("FDR 56 InfiniBand", None),
            ("2x DGX A100, HDR 200 InfiniBand", None),
            ("H100 SXM, PCIe Gen5 x16 HDR", None),
            ("2x 8xH100, IB NDR 400Gbps x 8 per node", Some((8, 400.0))),
            // Switches and PCIe widths are no NIC count.
            (
                "2x DGX A100 connected by 2 IB switches (HDR), 8 HCAs per node",
                Some((8, 200.0)),
            ),
            (
                "Two DGX H100 nodes on two NDR leaf switches; 8x 400G ConnectX-7 each",
                Some((8, 400.0)),
            ),
            (
                "2 DGX A100 nodes, ConnectX-6 HDR 200Gb/s adapters in x16 slots",
                None,
            ),
            ("2x 8-GPU H100 nodes, 4x 400 Gbps RoCE", Some((4, 400.0))),
            (
                "NVLink 4 (900 GB/s), 2 nodes, NDR 400 Gb/s x8",
                Some((8, 400.0)),
            ),
        ] {
            assert_eq!(parse_nics(text), want, "{text}");
        }
    }

    #[test]
    fn reads_collective_spellings() {
        for (name, want) in [
            ("all_reduce", Some(Collective::AllReduce)),
            ("AllReduce", Some(Collective::AllReduce)),
            ("allreduce", Some(Collective::AllReduce)),
            ("all_reduce_perf", Some(Collective::AllReduce)),
            ("all-gather", Some(Collective::AllGather)),
            ("ReduceScatter", Some(Collective::ReduceScatter)),
            ("bcast", Some(Collective::Broadcast { root: 0 })),
            ("reduce", Some(Collective::Reduce { root: 0 })),
            ("alltoall", Some(Collective::AllToAll)),
            ("send_recv", Some(Collective::SendRecv { shift: 1 })),
            ("gather_perf", Some(Collective::Gather { root: 0 })),
            ("Scatter", Some(Collective::Scatter { root: 0 })),
            ("scan", None),
        ] {
            assert_eq!(Collective::from_name(name), want, "{name}");
        }
    }

    #[test]
    fn reads_pcie_generations() {
        for (text, want) in [
            ("PCIe Gen4 x16", Some(4)),
            ("PCIe Gen 3", Some(3)),
            ("PCIe 5.0 x16", Some(5)),
            ("a PCIe4 slot", Some(4)),
            ("3rd-gen NVSwitch, NVLink 4", None),
            ("PCIe 16 lanes", None),
            // Spellings read since the forty-eighth session; the lower of
            // two (a Gen5 card in a Gen4 slot).
            ("H100 PCIe card in a Gen4 slot", Some(4)),
            ("H100 PCIe Gen5 card in a Gen4 slot", Some(4)),
            ("A100 PCIe 40GB in a Gen 3 server", Some(3)),
            ("A100 SXM4, PCI-E 3.0 host", Some(3)),
            ("H100 PCIe, PCI Express 4.0 slot", Some(4)),
            ("H100 PCIe, PCIe v4", Some(4)),
            ("2nd-gen NVSwitch", None),
            ("Gen 3 NVLink", None),
            ("NVLink gen4", None),
        ] {
            assert_eq!(pcie_generation(&words(text)), want, "{text}");
        }
    }

    #[test]
    fn export_variants_p100_and_pcie_cards() {
        let links = |m: &Machine| match &m.node.nvlink {
            NvFabric::Switch { links, .. } => *links,
            other => panic!("{other:?}"),
        };
        // The A800 and H800 keep 8 of the A100's 12 and the H100's 18 links.
        let h800 = machine_for("8x NVIDIA H800, one node").unwrap();
        assert_eq!((h800.name.as_str(), links(&h800)), ("hgx-h800", 8));
        let a800 = machine_for("NVIDIA A800-SXM4-80GB x8").unwrap();
        assert_eq!((a800.name.as_str(), links(&a800)), ("hgx-a800", 8));
        assert_eq!(links(&machine_for("8x H100 SXM").unwrap()), 18);
        // DGX-1 with P100: NVLink 1, one link per neighbour.
        let p100 = machine_for("DGX-1 P100").unwrap();
        assert_eq!(p100.node.arch, model::Arch::Pascal);
        match &p100.node.nvlink {
            NvFabric::Mesh { generation, pairs } => {
                assert_eq!(*generation, 1);
                assert_eq!(pairs.len(), 16);
                assert!(pairs.iter().all(|p| p.2 == 1));
            }
            other => panic!("{other:?}"),
        }
        // PCIe cards: the PCIe server with the card's architecture and
        // PCIe generation; an SXM module's PCIe link is not a card.
        let v100 = machine_for("Tesla V100-PCIE-32GB").unwrap();
        assert_eq!(
            (v100.name.as_str(), v100.node.arch, v100.node.pcie_gen),
            ("pcie-8gpu", model::Arch::Volta, 3)
        );
        let h100 = machine_for("NVIDIA H100 PCIe").unwrap();
        assert_eq!(
            (h100.node.arch, h100.node.pcie_gen),
            (model::Arch::Hopper, 5)
        );
        for (text, preset) in [
            ("A100 80GB PCIe", "pcie-8gpu"),
            ("A100 PCIe, PCIe Gen4 x16", "pcie-8gpu"),
            ("H100 SXM, PCIe Gen5 x16", "dgx-h100"),
            ("8x H100, PCIe Gen5", "dgx-h100"),
            ("8x B200, PCIe Gen6 x16", "dgx-b200"),
        ] {
            assert_eq!(machine_for(text).unwrap().name, preset, "{text}");
        }
        assert_eq!(
            copy_machine_for("RTX 4090, PCIe Gen4 x16").unwrap().name,
            "workstation-rtx4090"
        );
        // Grace superchips reach the CPU over NVLink-C2C: a GH200 is the
        // gh200 preset (not an H200, not a PCIe host); other Grace systems
        // are refused, not run on a PCIe machine.
        for text in [
            "GH200 Grace Hopper, pinned",
            "NVIDIA GH200 480GB, PCIe Gen5",
            "GH200 (NVLink-C2C 900 GB/s)",
        ] {
            let m = copy_machine_for(text).unwrap();
            assert_eq!((m.name.as_str(), m.node.c2c_gbps), ("gh200", Some(450.0)));
        }
        for text in [
            "Quad GH200 node (Alps), pinned",
            "4x GH200 120GB per node, Slingshot",
        ] {
            assert_eq!(copy_machine_for(text).unwrap().name, "quad-gh200", "{text}");
        }
        // More GPUs per node than the machine has: refused, not run on
        // fewer.
        let case = |system: &str, gpus, nodes| Case {
            id: "x".into(),
            system: system.into(),
            metric: "busbw".into(),
            collective: Some("all_reduce".into()),
            gpus: Some(gpus),
            nodes: Some(nodes),
            bytes: Some(1 << 20),
            value: 1.0,
            algorithm: None,
            protocol: None,
            pair: None,
            source: String::new(),
            tolerance_note: None,
            unread: Default::default(),
        };
        assert!(predict(&case("2x quad GH200 nodes", 8, 2)).is_ok());
        // Four nodes of one GH200 each are no quad-GH200 node.
        for t in [
            "4x GH200 nodes (one GH200 per node), NDR 400",
            "4 x GH200 nodes",
        ] {
            assert_eq!(machine_for(t).unwrap().name, "gh200", "{t}");
        }
        assert_eq!(machine_for("4x GH200 per node").unwrap().name, "quad-gh200");
        let e = predict(&case("2x GH200 nodes", 8, 2))
            .unwrap_err()
            .to_string();
        assert!(e.contains("1 GPUs per node"), "{e}");
        for text in [
            "GH200 NVL32, NVLink-C2C",
            "Grace CPU Superchip",
            "GB200 NVL4, NVLink-C2C",
        ] {
            let e = copy_machine_for(text).unwrap_err().to_string();
            assert!(e.contains("C2C") && e.contains("gh200"), "{e}");
        }
        // A DGX Station's mesh and NICs over TCP have no model: refused
        // for a collective or a peer copy, read for a host copy.
        for text in [
            "DGX Station A100, 4x A100 80GB, NVLink",
            "2 GCP a3-megagpu-8g nodes, 8x H100, 8x 200 Gbps GPUDirect-TCPXO NICs",
            "2x H100 nodes, 8x 400G NICs over TCP sockets",
        ] {
            let e = machine_for(text).unwrap_err().to_string();
            assert!(e.contains("DGX Station") || e.contains("TCP"), "{e}");
        }
        assert_eq!(
            copy_machine_for("DGX Station A100, PCIe Gen4, pinned")
                .unwrap()
                .name,
            "dgx-a100"
        );
        // NVLink SHARP is NVLS inside the node, not SHARP in the network.
        assert!(
            !machine_for("8x H100, NVSwitch with NVLink SHARP (NVLS)")
                .unwrap()
                .network
                .sharp
        );
    }

    #[test]
    fn pcie_pairs_follow_the_text_and_changes_are_shown() {
        let case = |system: &str| Case {
            id: "x".into(),
            system: system.into(),
            metric: "p2p_unidirectional_bandwidth".into(),
            collective: None,
            algorithm: None,
            protocol: None,
            pair: None,
            gpus: Some(2),
            nodes: Some(1),
            bytes: None,
            value: 10.0,
            source: String::new(),
            tolerance_note: None,
            unread: Default::default(),
        };
        for (text, pair) in [
            ("2x V100 PCIe, same PCIe switch", "--pair 0,1"),
            ("V100 PCIe pair across sockets (SYS)", "--pair 0,4"),
            ("V100 PCIe, NODE", "--pair 0,2"),
            ("V100 PCIe, one node", "--pair 0,1"),
        ] {
            let p = predict(&case(text)).unwrap();
            assert!(p.scenario.contains(pair), "{text}: {}", p.scenario);
            assert!(
                p.scenario
                    .contains("[preset with GPU V100 PCIe, PCIe Gen3]"),
                "{}",
                p.scenario
            );
        }
    }

    /// A host CPU in the text sets the node's memory, its one core's copy
    /// (the bound on a pageable copy's staging) and NCCL's vendor.
    #[test]
    fn a_named_host_cpu_sets_its_memory_and_one_core() {
        for (text, want) in [
            ("2x AMD EPYC 7742 (Rome), pageable", Some("EPYC 7742")),
            (
                "A100 PCIe, Intel Xeon Platinum 8480C, pinned",
                Some("Xeon Platinum 8480C"),
            ),
            ("RTX 4090 (Core i9-13900K)", Some("Core i9-13900K")),
            ("8x H100 SXM, NDR 400", None),
            ("hardcore io benchmark", None),
            ("A100 Tensor Core in a DGX A100", None),
            (
                "Intel(R) Xeon(R) Platinum 8480+ CPU",
                Some("Xeon Platinum 8480+ CPU"),
            ),
            ("Intel(R) Core(TM) i9-13900K", Some("Core i9-13900K")),
            ("A100 PCIe, 2xEPYC 7742", Some("EPYC 7742")),
            ("AMD EPYC™ 7763", Some("EPYC 7763")),
            ("8-core Intel Xeon Gold 6248", Some("Xeon Gold 6248")),
        ] {
            assert_eq!(cpu_named(text).as_deref(), want, "{text}");
        }
        let m = copy_machine_for("A100 PCIe, PCIe Gen4, Xeon E5-2698 v4, pageable").unwrap();
        assert_eq!(
            (m.node.host_mem_gbps, m.node.cpu_memcpy_gbps),
            (76.8, 11.18)
        );
        assert!(!m.node.amd_cpu);
        // A desktop's one core is not the bound: half its two channels.
        let m = copy_machine_for("RTX 4090, Core i9-13900K, pageable").unwrap();
        assert_eq!(m.node.cpu_memcpy_gbps, 44.8);
        // A server CPU without a one-core figure keeps the preset's, not
        // half its memory.
        let pcie = Machine::preset("pcie-8gpu").unwrap();
        let m = copy_machine_for("A100 PCIe, 2x AMD EPYC 7763 (Milan), pageable").unwrap();
        assert_eq!(m.node.cpu_memcpy_gbps, pcie.node.cpu_memcpy_gbps);
        assert!(m.node.amd_cpu);
        // The vendor is the named CPU's, not a word later in its phrase.
        let t = "2x DGX H100, 2x Xeon Platinum 8480+ instead of the EPYC 9654 we used before";
        assert!(!machine_for(t).unwrap().node.amd_cpu);
        // A CPU no table has keeps the preset's figures, takes its vendor.
        let base = Machine::preset("dgx-h100").unwrap();
        let m = machine_for("2x H100 SXM nodes, AMD EPYC 9654, 8x NDR 400").unwrap();
        assert_eq!(m.node.cpu_memcpy_gbps, base.node.cpu_memcpy_gbps);
        assert!(m.node.amd_cpu && !base.node.amd_cpu);
        let case = parse(
            "[[case]]\nid = \"c\"\nsystem = \"A100 PCIe, Xeon E5-2698 v4, pageable\"\n\
             metric = \"h2d_bandwidth\"\nvalue = 8.0\n",
        )
        .unwrap()
        .remove(0);
        let p = predict(&case).unwrap();
        assert!(
            p.scenario.contains("[preset with CPU Xeon E5-2698 v4]"),
            "{}",
            p.scenario
        );
    }

    /// GPUs beyond the presets' read as the board or card they sit on.
    #[test]
    fn gpus_named_beyond_the_presets() {
        for (text, model, want) in [
            ("8xH100 SXM", "h100", true),
            ("NVIDIA A100-SXM4-80GB", "a100", true),
            ("4x A100s", "a100", true),
            ("NVIDIA RTX A1000, PCIe Gen4 x8", "a100", false),
            ("Quadro GV100, PCIe Gen3", "v100", false),
            ("GB200 NVL72", "b200", false),
        ] {
            assert_eq!(gpu_named(text, model), want, "{text}");
        }
        for (text, preset, gpu) in [
            ("8x H20, NVLink 900 GB/s, NVSwitch", "dgx-h100", "H20"),
            ("8x B100 SXM, NVLink 5", "dgx-b200", "B100"),
            ("4x RTX A6000, PCIe Gen4", "pcie-8gpu", "A6000 PCIe"),
            ("NVIDIA A10G (g5)", "pcie-8gpu", "A10G PCIe"),
            ("2x RTX 4090, PCIe Gen4", "pcie-8gpu", "4090 PCIe"),
            (
                "RTX 4090 (one of two), PCIe Gen4",
                "workstation-rtx4090",
                "RTX 4090",
            ),
            ("8x H20s on one HGX board", "dgx-h100", "H20"),
            ("two RTX 4090s", "pcie-8gpu", "4090 PCIe"),
            ("2x RTX 4090D 24GB", "pcie-8gpu", "4090D PCIe"),
            ("8x A30s", "pcie-8gpu", "A30 PCIe"),
            ("NVIDIA A30, PCIe Gen4", "pcie-8gpu", "A30 PCIe"),
            ("RTX 4090, PCIe Gen4", "workstation-rtx4090", "RTX 4090"),
        ] {
            let m = machine_for(text).unwrap();
            assert_eq!(m.name, preset, "{text}");
            assert!(m.node.gpu_name.contains(gpu), "{text}: {}", m.node.gpu_name);
        }
        // An H200 is no H20.
        assert_eq!(machine_for("8x H200 SXM").unwrap().name, "hgx-h200");
        // RTX 4090s grant no peer access: a pair copies through host memory,
        // a collective (NCCL's SHM transport) is refused, not run over P2P.
        let case = |system: &str, metric: &str| {
            parse(&format!(
                "[[case]]\nid = \"c\"\nsystem = \"{system}\"\nmetric = \"{metric}\"\nvalue = 20.0\n"
            ))
            .unwrap()
            .remove(0)
        };
        let two = "2x RTX 4090, PCIe Gen4";
        let p = predict(&case(two, "p2p_bidirectional_bandwidth")).unwrap();
        assert!(p.scenario.contains("--no-p2p"), "{}", p.scenario);
        // A host copy crosses one card's link and the host: the workstation's.
        let p = predict(&case(two, "h2d_bandwidth")).unwrap();
        assert!(p.scenario.contains("workstation-rtx4090"), "{}", p.scenario);
        // A collective's case with its bytes, on `gpus` GPUs over `nodes`.
        let run = |system: &str, gpus: usize, nodes: usize| {
            let mut c = case(system, "busbw");
            (c.bytes, c.gpus, c.nodes) = (Some(1 << 30), Some(gpus), Some(nodes));
            predict(&c)
        };
        let e = run(two, 2, 1).unwrap_err().to_string();
        assert!(e.contains("SHM") && e.contains("no peer access"), "{e}");
        for t in [
            "8x L40S, PCIe Gen4, P2P disabled",
            "8x A100 PCIe, NCCL_P2P_DISABLE=1",
            "8x A100 PCIe; P2P is disabled (IOMMU on)",
            "8x A100 PCIe, cudaDeviceCanAccessPeer returns 0",
        ] {
            let e = run(t, 8, 1).unwrap_err().to_string();
            assert!(
                e.contains("SHM") && e.contains("no peer access"),
                "{t}: {e}"
            );
            // One GPU a node: NCCL has no pair to join, the network carries
            // it all, and the case is predicted.
            let p = run(t, 2, 2).unwrap();
            assert!(
                p.scenario.contains("--nccl-p2p-level loc"),
                "{t}: {}",
                p.scenario
            );
        }
        // A text about another machine that mentions a 4090 is not about
        // GPUs without peer access.
        let t = "8x H100 80GB HBM3, one 4090 workstation used for the baseline";
        let e = predict(&case(t, "busbw")).unwrap_err().to_string();
        assert!(e.contains("no bytes"), "{e}");
        // The text's machine is its first GPU's (the 4090 made both a
        // card server or the workstation), and its card's wherever named.
        for (t, preset) in [
            (t, "dgx-h100"),
            ("DGX H100; for comparison an RTX 4090 box", "dgx-h100"),
            ("Azure NC96ads A100 v4 (4x A100 80GB PCIe)", "pcie-8gpu"),
            ("RTX4090, PCIe Gen4", "workstation-rtx4090"),
        ] {
            assert_eq!(machine_for(t).unwrap().name, preset, "{t}");
        }
        // An H20 named beside an H100 board leaves it the H100's.
        let h100 = Machine::preset("dgx-h100").unwrap().node.gpu_name;
        let m = machine_for("DGX H100 with H20 comparison run omitted").unwrap();
        assert_eq!(m.node.gpu_name, h100);
        // NVLink bridges between cards are refused but for a host copy.
        assert!(machine_for("2x RTX 3090 with NVLink bridge").is_err());
        for t in [
            "8x A100 PCIe Gen4 (no NVLink bridges)",
            "A100 80GB PCIe pair, NVLink bridge removed, same PCIe switch",
            "2x H100 PCIe 80GB, NVLink bridge not installed",
        ] {
            assert!(machine_for(t).is_ok(), "{t}");
        }
        assert!(copy_machine_for("RTX 3090 with NVLink bridge, PCIe Gen4").is_ok());
    }
}
