//! A data-parallel training step with compute/communication overlap.
//!
//! Forward runs the layers in order; backward in reverse. Gradients are
//! grouped into buckets as PyTorch DDP does (`bucket_cap_mb`, 25 MiB by
//! default, the first bucket 1 MiB: `torch/nn/parallel/distributed.py`,
//! `_DEFAULT_FIRST_BUCKET_BYTES`), in reverse layer order. A bucket's
//! all_reduce is issued when the last of its gradients is ready; all_reduces
//! run one after another on one communication stream (as NCCL calls on one
//! stream do) and overlap the rest of the backward pass. The step ends when
//! both backward and the last all_reduce are done.
//!
//! Not modeled: slow-down of compute by communication kernels sharing SMs
//! and memory bandwidth, the optimizer step, gradient accumulation.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};

use gpucomm_algo::Collective;
use serde::{Deserialize, Serialize};

use crate::collective::{CollOptions, simulate};
use crate::machine::{ClusterFabric, Engine, Machine};
use crate::par::par_map;
use crate::{SimError, SimTime};

/// One layer: compute times and parameter count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Layer {
    /// Name.
    pub name: String,
    /// Forward time on one GPU, ms.
    pub fwd_ms: f64,
    /// Backward time on one GPU, ms.
    pub bwd_ms: f64,
    /// Parameters.
    pub params: u64,
}

/// A model: layers in forward order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelSpec {
    /// Name.
    pub name: String,
    /// Bytes per gradient element (4 for fp32, 2 for bf16).
    #[serde(default = "four")]
    pub bytes_per_param: u64,
    /// Where the figures come from.
    #[serde(default)]
    pub source: String,
    /// Layers in forward order.
    #[serde(rename = "layer")]
    pub layers: Vec<Layer>,
}

/// (name, repeat, forward ms per layer, parameters per layer).
type LayerGroup = (&'static str, usize, f64, u64);

fn four() -> u64 {
    4
}

/// Names of the preset models.
pub const MODEL_PRESETS: [&str; 3] = ["resnet50", "bert-large", "gpt2-xl"];

impl ModelSpec {
    /// Reads a model from TOML (`name`, `bytes_per_param`, `[[layer]]` with
    /// `name`, `fwd_ms`, `bwd_ms`, `params`).
    pub fn from_toml(text: &str) -> Result<Self, SimError> {
        let m: ModelSpec =
            toml::from_str(text).map_err(|e| SimError::Model(format!("model file: {e}")))?;
        m.validate()?;
        Ok(m)
    }

    /// Checks what [`ModelSpec::from_toml`] checks (at least one layer,
    /// finite non-negative times, a positive `bytes_per_param`, a step and
    /// its gradient bytes within the simulator's ranges); [`step`] and
    /// [`prefill`] check it too, for a model built in code.
    pub fn validate(&self) -> Result<(), SimError> {
        if self.layers.is_empty() {
            return Err(SimError::Model(format!("model {} has no layer", self.name)));
        }
        for l in &self.layers {
            if !(l.fwd_ms.is_finite() && l.bwd_ms.is_finite() && l.fwd_ms >= 0.0 && l.bwd_ms >= 0.0)
            {
                return Err(SimError::Model(format!(
                    "layer {}: times must be finite and >= 0",
                    l.name
                )));
            }
        }
        if self.bytes_per_param == 0 {
            return Err(SimError::Model("bytes_per_param must be positive".into()));
        }
        // A step's times are picoseconds in a u64 (about 213 days): a
        // longer one would saturate and print a wrong step time.
        let compute_ms: f64 = self.layers.iter().map(|l| l.fwd_ms + l.bwd_ms).sum();
        let max_ms = SimTime::MAX.as_secs_f64() * 1e3 / 2.0;
        if compute_ms > max_ms {
            return Err(SimError::Model(format!(
                "model {}: a step's compute ({compute_ms:.3e} ms) is beyond the simulator's time range (at most {max_ms:.3e} ms: half of 2^64 ps, leaving room for the communication)",
                self.name
            )));
        }
        let grad_bytes = self.layers.iter().try_fold(0u64, |sum, l| {
            l.params
                .checked_mul(self.bytes_per_param)
                .and_then(|b| sum.checked_add(b))
        });
        if grad_bytes.is_none() {
            return Err(SimError::Model(format!(
                "model {}: the gradients (params x bytes_per_param) overflow 64-bit byte counts",
                self.name
            )));
        }
        Ok(())
    }

    /// A preset model. The figures are **illustrative**: parameter counts
    /// are the published ones (ResNet-50 25.6 M, He et al. 2016; BERT-large
    /// 340 M, Devlin et al. 2019; GPT-2 XL 1.56 B, Radford et al. 2019),
    /// spread over layer groups in proportion to their sizes; compute times
    /// are round numbers of the right order for one A100 at a typical
    /// per-GPU batch (backward = 2x forward), not measurements.
    pub fn preset(name: &str) -> Result<Self, SimError> {
        let (src, bpp, groups): (&str, u64, Vec<LayerGroup>) = match name {
            // (name, repeat, fwd_ms per layer, params per layer)
            "resnet50" => (
                "illustrative: 25.6M params (He et al. 2016), ~100 ms/step at batch 256 on one A100",
                4,
                vec![
                    ("conv1", 1, 2.0, 9_472),
                    ("layer1", 3, 2.4, 72_000),
                    ("layer2", 4, 2.0, 305_000),
                    ("layer3", 6, 2.2, 1_180_000),
                    ("layer4", 3, 2.4, 4_990_000),
                    ("fc", 1, 0.3, 2_049_000),
                ],
            ),
            "bert-large" => (
                "illustrative: 340M params (Devlin et al. 2019), ~300 ms/step at seq 512 batch 8 on one A100",
                4,
                vec![
                    ("embeddings", 1, 2.0, 31_800_000),
                    ("encoder", 24, 4.0, 12_600_000),
                    ("pooler", 1, 0.2, 1_050_000),
                ],
            ),
            "gpt2-xl" => (
                "illustrative: 1.56B params (Radford et al. 2019), ~1.2 s/step at seq 1024 batch 8 on one A100, bf16 grads",
                2,
                vec![
                    ("wte+wpe", 1, 5.0, 82_000_000),
                    ("block", 48, 8.0, 30_700_000),
                    ("ln_f", 1, 0.2, 3_200),
                ],
            ),
            _ => {
                return Err(SimError::Model(format!(
                    "unknown model {name:?}; presets: {} (or a TOML file)",
                    MODEL_PRESETS.join(", ")
                )));
            }
        };
        let mut layers = Vec::new();
        for (g, rep, fwd, params) in groups {
            for i in 0..rep {
                layers.push(Layer {
                    name: if rep > 1 {
                        format!("{g}.{i}")
                    } else {
                        g.to_string()
                    },
                    fwd_ms: fwd,
                    bwd_ms: 2.0 * fwd,
                    params,
                });
            }
        }
        Ok(ModelSpec {
            name: name.to_string(),
            bytes_per_param: bpp,
            source: src.to_string(),
            layers,
        })
    }

    /// Total parameters.
    pub fn params(&self) -> u64 {
        self.layers.iter().map(|l| l.params).sum()
    }
}

/// One gradient bucket.
#[derive(Clone, Debug, PartialEq)]
pub struct Bucket {
    /// Bytes of gradients.
    pub bytes: u64,
    /// When its last gradient is ready (from the start of the step).
    pub ready: SimTime,
    /// When its all_reduce starts.
    pub start: SimTime,
    /// When its all_reduce ends.
    pub end: SimTime,
}

/// The result of one training step at one scale.
#[derive(Clone, Debug, PartialEq)]
pub struct StepResult {
    /// Nodes.
    pub nodes: usize,
    /// GPUs.
    pub gpus: usize,
    /// Step time.
    pub step: SimTime,
    /// Forward + backward compute.
    pub compute: SimTime,
    /// Sum of all_reduce times.
    pub comm: SimTime,
    /// Communication not hidden behind compute (step - compute).
    pub exposed: SimTime,
    /// compute / step: throughput per GPU relative to one GPU.
    pub efficiency: f64,
    /// Buckets in issue order.
    pub buckets: Vec<Bucket>,
}

/// Splits gradients into DDP buckets (reverse layer order) with their ready times.
pub fn buckets(model: &ModelSpec, bucket_bytes: u64) -> Vec<(u64, SimTime)> {
    let fwd: f64 = model.layers.iter().map(|l| l.fwd_ms).sum();
    let mut t = fwd;
    let mut out = Vec::new();
    let mut cur = 0u64;
    let first_cap = (1u64 << 20).min(bucket_bytes);
    for l in model.layers.iter().rev() {
        t += l.bwd_ms;
        cur += l.params * model.bytes_per_param;
        let cap = if out.is_empty() {
            first_cap
        } else {
            bucket_bytes
        };
        if cur >= cap {
            out.push((cur, SimTime::from_secs_f64(t * 1e-3)));
            cur = 0;
        }
    }
    if cur > 0 {
        out.push((cur, SimTime::from_secs_f64(t * 1e-3)));
    }
    out
}

/// The all_reduce times a sweep of training steps shares, by (nodes,
/// bytes), and the collective options they are simulated with: the tuner
/// and the algorithms and protocols it may pick (`NCCL_ALGO` /
/// `NCCL_PROTO`-style, [`crate::collective::Select`]).
///
/// ```
/// use gpucomm_algo::Collective;
/// use gpucomm_sim::collective::{simulate, AlgoChoice, CollOptions, Select};
/// use gpucomm_sim::train::{step, AllReduceTimes, ModelSpec};
/// use gpucomm_sim::{Engine, Machine};
///
/// let m = Machine::preset("dgx-h100").unwrap();
/// let model = ModelSpec::preset("bert-large").unwrap();
/// let nccl = step(&m, 1, &model, 25 << 20, &mut AllReduceTimes::default()).unwrap();
/// // NCCL_ALGO=Ring: every bucket's all_reduce is the ring's.
/// let ring = CollOptions {
///     algorithm: Select::parse("ring", AlgoChoice::parse).unwrap(),
///     ..Default::default()
/// };
/// let r = step(&m, 1, &model, 25 << 20, &mut AllReduceTimes::new(ring.clone())).unwrap();
/// let f = m.fabric(Engine::Nccl, 1).unwrap();
/// let each: f64 = r
///     .buckets
///     .iter()
///     .map(|b| simulate(&f, Collective::AllReduce, b.bytes, &ring).unwrap().time.as_us())
///     .sum();
/// assert!((r.comm.as_us() - each).abs() < 1e-6 * each);
/// assert_ne!(r.comm, nccl.comm); // NCCL runs NVLS for the larger buckets
/// ```
#[derive(Clone, Debug, Default)]
pub struct AllReduceTimes {
    options: CollOptions,
    times: BTreeMap<(usize, u64), SimTime>,
}

impl AllReduceTimes {
    /// No times yet; the all_reduces will be simulated with `options`.
    pub fn new(options: CollOptions) -> Self {
        AllReduceTimes {
            options,
            times: BTreeMap::new(),
        }
    }

    /// How many (nodes, bytes) times are known.
    pub fn len(&self) -> usize {
        self.times.len()
    }

    /// Whether no time is known yet.
    pub fn is_empty(&self) -> bool {
        self.times.is_empty()
    }
}

/// Simulates, side by side on the machine's cores, every bucket all_reduce
/// that the steps of `model` on each of `node_counts` nodes need and that
/// `cache` lacks, into `cache` (what [`step`] reads): a sweep's node counts
/// then cost the time of the slowest, not of all of them in turn (the
/// larger ones first, as they take longest). The results are those
/// [`step`] would compute.
///
/// ```
/// use gpucomm_sim::train::{prefill, step, AllReduceTimes, ModelSpec};
/// use gpucomm_sim::Machine;
///
/// let m = Machine::preset("dgx-a100").unwrap();
/// let model = ModelSpec::preset("resnet50").unwrap();
/// let mut cache = AllReduceTimes::default();
/// prefill(&m, &[1, 2], &model, 25 << 20, &mut cache).unwrap();
/// let filled = cache.len();
/// let r = step(&m, 2, &model, 25 << 20, &mut cache).unwrap();
/// assert_eq!(cache.len(), filled); // nothing left to simulate
/// assert!(r.comm.as_us() > 0.0);
/// ```
pub fn prefill(
    machine: &Machine,
    node_counts: &[usize],
    model: &ModelSpec,
    bucket_bytes: u64,
    cache: &mut AllReduceTimes,
) -> Result<(), SimError> {
    model.validate()?;
    let sizes: Vec<u64> = buckets(model, bucket_bytes.max(1))
        .into_iter()
        .map(|(b, _)| b)
        .collect();
    // The missing (nodes, bytes) pairs, largest first, and the fabric of
    // each node count among them, built once.
    let missing: BTreeSet<(usize, u64)> = node_counts
        .iter()
        .flat_map(|&n| sizes.iter().map(move |&b| (n, b)))
        .filter(|k| !cache.times.contains_key(k))
        .collect();
    let jobs: Vec<(usize, u64)> = missing.into_iter().rev().collect();
    let mut fabrics: BTreeMap<usize, ClusterFabric> = BTreeMap::new();
    for &(n, _) in &jobs {
        if let Entry::Vacant(e) = fabrics.entry(n) {
            e.insert(machine.fabric(Engine::Nccl, n)?);
        }
    }
    let times = par_map(&jobs, |&(n, b)| -> Result<Option<SimTime>, SimError> {
        let f = &fabrics[&n];
        if crate::fabric::Fabric::ranks(f) == 1 {
            return Ok(None);
        }
        let r = simulate(f, Collective::AllReduce, b, &cache.options)?;
        Ok(Some(r.completion))
    });
    for (&key, t) in jobs.iter().zip(times) {
        if let Some(t) = t? {
            cache.times.insert(key, t);
        }
    }
    Ok(())
}

/// Simulates one data-parallel step of `model` on `nodes` nodes of `machine`.
pub fn step(
    machine: &Machine,
    nodes: usize,
    model: &ModelSpec,
    bucket_bytes: u64,
    cache: &mut AllReduceTimes,
) -> Result<StepResult, SimError> {
    if nodes == 0 {
        return Err(SimError::Model(
            "a training step needs at least one node".into(),
        ));
    }
    model.validate()?;
    // (The fabric is built, and the machine checked, where an all_reduce
    // is simulated: in `prefill`.)
    let gpus = machine.gpus_per_node() * nodes;
    let compute_ms: f64 = model.layers.iter().map(|l| l.fwd_ms + l.bwd_ms).sum();
    let compute = SimTime::from_secs_f64(compute_ms * 1e-3);
    let mut prev_end = SimTime::ZERO;
    let mut comm = SimTime::ZERO;
    let mut out = Vec::new();
    // Every bucket's all_reduce (the ones not cached yet, side by side).
    prefill(machine, &[nodes], model, bucket_bytes, cache)?;
    for (bytes, ready) in buckets(model, bucket_bytes.max(1)) {
        let dur = if gpus == 1 {
            SimTime::ZERO
        } else {
            *cache.times.get(&(nodes, bytes)).ok_or_else(|| {
                SimError::Model(format!("no all_reduce time for {bytes} B on {nodes} nodes"))
            })?
        };
        let start = ready.max(prev_end);
        let end = start + dur;
        comm = comm + dur;
        prev_end = end;
        out.push(Bucket {
            bytes,
            ready,
            start,
            end,
        });
    }
    let step = compute.max(prev_end);
    Ok(StepResult {
        nodes,
        gpus,
        step,
        compute,
        comm,
        exposed: step - compute,
        efficiency: compute.as_secs_f64() / step.as_secs_f64().max(1e-15),
        buckets: out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_follow_ddp() {
        let m = ModelSpec::preset("bert-large").unwrap();
        let b = buckets(&m, 25 << 20);
        let total: u64 = b.iter().map(|x| x.0).sum();
        assert_eq!(total, m.params() * 4);
        // First bucket is the small one (1 MiB cap -> one 12.6M-param layer).
        assert!(b[0].0 < b[1].0 || b.len() == 1);
        // Ready times increase.
        assert!(b.windows(2).all(|w| w[0].1 <= w[1].1));
    }

    #[test]
    fn one_gpu_has_no_communication_and_more_nodes_cost_more() {
        let m = ModelSpec::preset("resnet50").unwrap();
        let mut mach = Machine::preset("dgx-a100").unwrap();
        mach.gpus_used = Some(1);
        let mut cache = AllReduceTimes::default();
        let one = step(&mach, 1, &m, 25 << 20, &mut cache).unwrap();
        assert_eq!(one.exposed, SimTime::ZERO);
        assert!((one.efficiency - 1.0).abs() < 1e-12);
        let mach = Machine::preset("dgx-a100").unwrap();
        assert!(step(&mach, 0, &m, 25 << 20, &mut cache).is_err());
        let mut none = mach.clone();
        none.gpus_used = Some(0);
        assert!(step(&none, 2, &m, 25 << 20, &mut AllReduceTimes::default()).is_err());
        let a = step(&mach, 1, &m, 25 << 20, &mut cache).unwrap();
        let b = step(&mach, 4, &m, 25 << 20, &mut cache).unwrap();
        assert!(b.comm > a.comm);
        assert!(b.efficiency <= a.efficiency + 1e-12);
    }

    #[test]
    fn model_files_parse_and_bad_ones_fail() {
        let ok =
            "name = \"tiny\"\n[[layer]]\nname = \"a\"\nfwd_ms = 1.0\nbwd_ms = 2.0\nparams = 1000\n";
        let m = ModelSpec::from_toml(ok).unwrap();
        assert_eq!(m.params(), 1000);
        assert!(ModelSpec::from_toml("name = \"x\"\nlayer = []\n").is_err());
        assert!(ModelSpec::from_toml("garbage").is_err());
        // Beyond the simulator's range: refused, not saturated into a
        // wrong step time or a wrapped byte count.
        let long = ok.replace("fwd_ms = 1.0", "fwd_ms = 1e300");
        let e = ModelSpec::from_toml(&long).unwrap_err().to_string();
        assert!(e.contains("beyond the simulator's time range"), "{e}");
        let big = ok.replace("params = 1000", "params = 18446744073709551615");
        let e = ModelSpec::from_toml(&big).unwrap_err().to_string();
        assert!(e.contains("overflow"), "{e}");
        assert!(ModelSpec::preset("nope").is_err());
    }
}
