//! A data-parallel training step with compute/communication overlap.
//!
//! Forward runs the layers in order; backward in reverse. How the ranks
//! hold the model ([`Sharding`]) decides the communication:
//!
//! * **DDP** (PyTorch `DistributedDataParallel`): every GPU holds the whole
//!   model. Gradients are grouped into buckets as DDP does (`bucket_cap_mb`,
//!   25 MiB by default, and then the first bucket 1 MiB,
//!   `_DEFAULT_FIRST_BUCKET_BYTES`; a `bucket_cap_mb` given caps the first
//!   bucket too: `torch/nn/parallel/distributed.py`,
//!   `bucket_bytes_cap_default`), in reverse layer order. A bucket's
//!   all_reduce is issued when the last of its gradients is ready.
//! * **FSDP** (`FullyShardedDataParallel` / `fully_shard`, one unit per
//!   layer; ZeRO, Rajbhandari et al. 2020): each GPU holds 1/N of every
//!   layer's parameters (padded to a multiple of N elements, as FSDP pads
//!   its flat parameter). A layer's forward waits for the all_gather of
//!   its parameters, issued one layer ahead (FSDP's forward prefetch, and
//!   its rate limit of two all-gathered layers); its gradients are
//!   reduce-scattered when its backward ends. `SHARD_GRAD_OP` (ZeRO-2)
//!   keeps the gathered parameters for backward; `FULL_SHARD` (ZeRO-3)
//!   frees them after forward and gathers them again in backward, one
//!   layer ahead (`BackwardPrefetch.BACKWARD_PRE`), except the last layer's,
//!   which backward uses at once (torchtitan does not reshard it).
//!
//! Collectives run one after another on one communication queue, in the
//! order they are issued (NCCL calls on one stream; FSDP puts all-gathers
//! and reduce-scatters on two streams, whose collectives would share the
//! same links, so their sum is what the two take together), and overlap
//! the compute. The step ends when both the compute and the last
//! collective are done. The model state per GPU (parameters, gradients
//! and Adam's optimizer state) follows the ZeRO paper's accounting.
//!
//! Not modeled: slow-down of compute by communication kernels sharing SMs
//! and memory bandwidth, activations' memory, the optimizer step,
//! gradient accumulation, hybrid sharding (shard inside a node, replicate
//! across nodes).

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
#[serde(deny_unknown_fields)]
pub struct Layer {
    /// Name.
    pub name: String,
    /// Forward time on one GPU, ms.
    pub fwd_ms: f64,
    /// Backward time on one GPU, ms.
    pub bwd_ms: f64,
    /// Parameters. A model file may write a whole number in a float's
    /// form (`params = 1.5e9`, as parameter counts are quoted; TOML's
    /// integers have no exponent).
    #[serde(deserialize_with = "whole_number")]
    pub params: u64,
}

/// A model: layers in forward order. A model file's field that is none
/// of these (a misspelt `bytes_per_parm`) is refused, not ignored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// Name.
    pub name: String,
    /// Bytes per gradient element (4 for fp32, 2 for bf16); a whole
    /// float (`2.0`) is taken as `params` takes it.
    #[serde(default = "four", deserialize_with = "whole_number")]
    pub bytes_per_param: u64,
    /// Where the figures come from.
    #[serde(default)]
    pub source: String,
    /// The GPU the layer times were measured (or, for the presets,
    /// estimated) on, as a product name (`"A100"`, `"H100 SXM5"`); `None`
    /// where the model does not say. The simulator uses the times as
    /// given on every topology, whatever its GPU: it scales nothing
    /// ([`ModelSpec::compute_on_other_gpu`] tells where they differ).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_on: Option<String>,
    /// Layers in forward order.
    #[serde(rename = "layer")]
    pub layers: Vec<Layer>,
}

/// (name, repeat, forward ms per layer, parameters per layer).
type LayerGroup = (&'static str, usize, f64, u64);

fn four() -> u64 {
    4
}

/// A count written as an integer or as a float with a whole value
/// (`1.5e9`), up to 2^53, where every whole float is exact.
fn whole_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    struct Whole;
    impl serde::de::Visitor<'_> for Whole {
        type Value = u64;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a whole number of at least 0 (1500000000 or 1.5e9)")
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(v), &self))
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<u64, E> {
            const EXACT: f64 = (1u64 << 53) as f64;
            if v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v <= EXACT {
                Ok(v as u64)
            } else {
                // Short: serde writes 1e300 out in 301 digits.
                let shown = if v.is_finite() && v.abs() < 1e16 {
                    format!("floating point `{v}`")
                } else {
                    format!("floating point `{v:e}`")
                };
                Err(E::invalid_value(
                    serde::de::Unexpected::Other(&shown),
                    &self,
                ))
            }
        }
    }
    d.deserialize_any(Whole)
}

/// Names of the preset models.
pub const MODEL_PRESETS: [&str; 3] = ["resnet50", "bert-large", "gpt2-xl"];

impl ModelSpec {
    /// Reads a model from TOML (`name`, `bytes_per_param`, `source`,
    /// `measured_on`, `[[layer]]` with `name`, `fwd_ms`, `bwd_ms`,
    /// `params`).
    pub fn from_toml(text: &str) -> Result<Self, SimError> {
        let m: ModelSpec = toml::from_str(text).map_err(|e| SimError::Parse {
            what: "model file",
            why: e.to_string(),
        })?;
        m.validate()?;
        Ok(m)
    }

    /// The same model as JSON (`{"name": ..., "layer": [{...}]}`), checked
    /// the same way.
    ///
    /// ```
    /// let m = gpucomm_sim::train::ModelSpec::from_json(
    ///     r#"{"name": "tiny", "layer": [{"name": "fc", "fwd_ms": 1.0, "bwd_ms": 2.0, "params": 1000}]}"#,
    /// )
    /// .unwrap();
    /// assert_eq!(m.params(), 1000);
    /// ```
    pub fn from_json(text: &str) -> Result<Self, SimError> {
        let m: ModelSpec = serde_json::from_str(text).map_err(|e| SimError::Parse {
            what: "model file",
            why: e.to_string(),
        })?;
        m.validate()?;
        Ok(m)
    }

    /// Checks what [`ModelSpec::from_toml`] checks (at least one layer,
    /// finite non-negative times, some compute (at least 1 ps: without it
    /// the scaling efficiency, compute / step time, is undefined), a
    /// positive `bytes_per_param`, a `measured_on` that names a GPU, a
    /// step and its gradient bytes within the simulator's ranges); [`step`] and
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
        // A GPU name of no model word ("", "NVIDIA") would name no GPU,
        // and be reported as differing from every topology's.
        if let Some(gpu) = self
            .measured_on
            .as_deref()
            .filter(|g| !gpucomm_topo::hardware::names_gpu(g, g))
        {
            return Err(SimError::Model(format!(
                "model {}: measured_on = {gpu:?} names no GPU (give its product name, \
                 e.g. \"A100\" or \"H100 SXM5\", or leave it out)",
                self.name
            )));
        }
        // A step's times are picoseconds in a u64 (about 213 days): a
        // longer one would saturate and print a wrong step time.
        let compute_ms: f64 = self.layers.iter().map(|l| l.fwd_ms + l.bwd_ms).sum();
        if compute_ms < 1e-9 {
            return Err(SimError::Model(format!(
                "model {}: a step's compute (the layers' fwd_ms + bwd_ms) is {compute_ms:?} ms, \
                 less than the simulator's 1 ps: the scaling efficiency (compute / step time) \
                 needs some compute",
                self.name
            )));
        }
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
    /// per-GPU batch (backward = 2x forward), not measurements. The name
    /// is taken in any case, as topology presets are.
    pub fn preset(name: &str) -> Result<Self, SimError> {
        let name = name.to_ascii_lowercase();
        let (src, bpp, groups): (&str, u64, Vec<LayerGroup>) = match name.as_str() {
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
                    "unknown model {name:?}; presets: {} (or a TOML or JSON file)",
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
            name,
            bytes_per_param: bpp,
            source: src.to_string(),
            // Every preset's times are for one A100 (its source says so).
            measured_on: Some("A100".into()),
            layers,
        })
    }

    /// The GPU the model's times are for ([`ModelSpec::measured_on`]),
    /// where it is not the GPU named `gpu_name` (a topology's GPU,
    /// [`NodeModel::gpu_name`](crate::machine::NodeModel::gpu_name);
    /// matched by [`gpucomm_topo::hardware::names_gpu`]): the times are
    /// then another GPU's, used unscaled. `None` where the model names no
    /// GPU or names this one.
    ///
    /// ```
    /// use gpucomm_sim::train::ModelSpec;
    /// let m = ModelSpec::preset("resnet50").unwrap();
    /// assert_eq!(m.compute_on_other_gpu("H100 SXM5 80GB"), Some("A100"));
    /// assert_eq!(m.compute_on_other_gpu("A100 SXM4 80GB"), None);
    /// ```
    pub fn compute_on_other_gpu(&self, gpu_name: &str) -> Option<&str> {
        self.measured_on
            .as_deref()
            .filter(|gpu| !gpucomm_topo::hardware::names_gpu(gpu_name, gpu))
    }

    /// Total parameters.
    pub fn params(&self) -> u64 {
        self.layers.iter().map(|l| l.params).sum()
    }
}

/// How the data-parallel ranks hold the model (module documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Sharding {
    /// Every GPU holds the whole model; gradients all-reduced in buckets.
    #[default]
    Ddp,
    /// FSDP `SHARD_GRAD_OP` (ZeRO-2): parameters all-gathered per layer in
    /// forward and kept for backward; gradients reduce-scattered per layer.
    ShardGradOp,
    /// FSDP `FULL_SHARD` (ZeRO-3): parameters all-gathered per layer in
    /// forward and again in backward; gradients reduce-scattered per layer.
    FullShard,
}

impl Sharding {
    /// Every mode, in a fixed order.
    pub const ALL: [Sharding; 3] = [Sharding::Ddp, Sharding::ShardGradOp, Sharding::FullShard];

    /// The name used on command lines: `ddp`, `shard_grad_op`, `full_shard`.
    pub const fn name(&self) -> &'static str {
        match self {
            Sharding::Ddp => "ddp",
            Sharding::ShardGradOp => "shard_grad_op",
            Sharding::FullShard => "full_shard",
        }
    }

    /// Parses a name as [`Sharding::name`] prints it, or the ZeRO stage
    /// (`zero2`, `zero3`; `fsdp` is `full_shard`, FSDP's default); `-`
    /// is taken for `_` and case is ignored.
    ///
    /// ```
    /// use gpucomm_sim::train::Sharding;
    /// assert_eq!(Sharding::parse("FULL_SHARD"), Some(Sharding::FullShard));
    /// assert_eq!(Sharding::parse("zero2"), Some(Sharding::ShardGradOp));
    /// assert_eq!(Sharding::parse("zero1"), None);
    /// ```
    pub fn parse(s: &str) -> Option<Sharding> {
        let s = s.replace('-', "_").to_ascii_lowercase();
        match s.as_str() {
            "zero2" => Some(Sharding::ShardGradOp),
            "zero3" | "fsdp" => Some(Sharding::FullShard),
            _ => Self::ALL.into_iter().find(|m| m.name() == s),
        }
    }
}

/// How a training step is run: the sharding, and DDP's bucket caps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrainConfig {
    /// DDP's bucket cap, bytes (`bucket_cap_mb`); FSDP does not bucket.
    pub bucket_bytes: u64,
    /// DDP's cap on its first bucket (the last layers' gradients), bytes:
    /// [`DEFAULT_FIRST_BUCKET_BYTES`] where `bucket_cap_mb` is left at its
    /// default, `bucket_bytes` where it is given
    /// ([`TrainConfig::with_bucket_bytes`]).
    pub first_bucket_bytes: u64,
    /// How the ranks hold the model.
    pub sharding: Sharding,
}

/// DDP's first bucket cap when `bucket_cap_mb` is not given, 1 MiB
/// (`torch.distributed._DEFAULT_FIRST_BUCKET_BYTES`).
pub const DEFAULT_FIRST_BUCKET_BYTES: u64 = 1 << 20;

impl Default for TrainConfig {
    /// DDP with PyTorch's defaults: 25 MiB buckets, the first 1 MiB.
    fn default() -> Self {
        TrainConfig {
            bucket_bytes: 25 << 20,
            first_bucket_bytes: DEFAULT_FIRST_BUCKET_BYTES,
            sharding: Sharding::Ddp,
        }
    }
}

impl TrainConfig {
    /// DDP with `bucket_cap_mb` given as `bytes`: every bucket, the first
    /// included, is capped at `bytes`. PyTorch keeps the small first
    /// bucket only for the default cap (`torch/nn/parallel/distributed.py`:
    /// `bucket_bytes_cap_default` is set where `bucket_cap_mb` is None, and
    /// only then is the first bucket's cap `_DEFAULT_FIRST_BUCKET_BYTES`),
    /// so an explicit 25 MiB differs from the default.
    ///
    /// ```
    /// use gpucomm_sim::train::{buckets, ModelSpec, TrainConfig};
    /// let m = ModelSpec::preset("resnet50").unwrap();
    /// let small = buckets(&m, &TrainConfig::default());
    /// let given = buckets(&m, &TrainConfig::with_bucket_bytes(25 << 20));
    /// // The fc layer's gradients alone (past 1 MiB), or with layer4.2's.
    /// assert_eq!(small[0].0, 4 * 2_049_000);
    /// assert_eq!(given[0].0, 4 * (2_049_000 + 4_990_000));
    /// ```
    pub fn with_bucket_bytes(bytes: u64) -> Self {
        TrainConfig {
            bucket_bytes: bytes,
            first_bucket_bytes: bytes,
            sharding: Sharding::Ddp,
        }
    }
}

/// One collective of a step.
#[derive(Clone, Debug, PartialEq)]
pub struct CommOp {
    /// What it runs (all_reduce, all_gather or reduce_scatter).
    pub collective: Collective,
    /// Which gradients or parameters: `bucket 3`, `block.12 forward`, ...
    pub label: String,
    /// Bytes, as nccl-tests counts them (the gathered whole of an
    /// all_gather, the whole input of a reduce_scatter).
    pub bytes: u64,
    /// When it is issued (from the start of the step).
    pub ready: SimTime,
    /// When it starts.
    pub start: SimTime,
    /// When it ends.
    pub end: SimTime,
}

/// A stretch of compute on every GPU.
#[derive(Clone, Debug, PartialEq)]
pub struct ComputeSpan {
    /// `forward`, `backward` (DDP) or a layer's `NAME forward` (FSDP).
    pub label: String,
    /// Start.
    pub start: SimTime,
    /// End.
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
    /// Sum of the collectives' times.
    pub comm: SimTime,
    /// Communication not hidden behind compute (step - compute).
    pub exposed: SimTime,
    /// compute / step: throughput per GPU relative to one GPU.
    pub efficiency: f64,
    /// The collectives in issue order.
    pub ops: Vec<CommOp>,
    /// The compute, in order.
    pub compute_spans: Vec<ComputeSpan>,
    /// Bytes of model state each GPU holds: [`state_bytes_per_gpu`].
    pub state_bytes: u64,
}

/// Bytes of model state per GPU for `params` parameters of
/// `bytes_per_param` on `gpus` GPUs, by the ZeRO paper's accounting
/// (Rajbhandari et al. 2020, section 3.1: mixed-precision Adam holds K = 12
/// bytes per parameter, an fp32 copy and the two moments): parameters and
/// gradients of `bytes_per_param` each, and 12 bytes of optimizer state
/// where the parameters are 16-bit (8, the moments, where they are fp32
/// and serve as the master copy). DDP holds all of it on every GPU;
/// `SHARD_GRAD_OP` shards gradients and optimizer state; `FULL_SHARD`
/// shards everything. Activations and buffers are not counted.
///
/// ```
/// use gpucomm_sim::train::{state_bytes_per_gpu, Sharding};
/// // 7.5 B parameters in bf16 on 64 GPUs: the paper's 120 GB for DDP,
/// // 1.9 GB fully sharded.
/// let p = 7_500_000_000;
/// assert_eq!(state_bytes_per_gpu(p, 2, 64, Sharding::Ddp), 120_000_000_000);
/// assert_eq!(state_bytes_per_gpu(p, 2, 64, Sharding::FullShard), 1_875_000_000);
/// ```
pub fn state_bytes_per_gpu(params: u64, bytes_per_param: u64, gpus: usize, s: Sharding) -> u64 {
    let optimizer = if bytes_per_param <= 2 { 12 } else { 8 };
    let n = gpus.max(1) as u128;
    let (p, b) = (u128::from(params), u128::from(bytes_per_param));
    let bytes = match s {
        Sharding::Ddp => p * (2 * b + optimizer),
        Sharding::ShardGradOp => p * b + (p * (b + optimizer)).div_ceil(n),
        Sharding::FullShard => (p * (2 * b + optimizer)).div_ceil(n),
    };
    u64::try_from(bytes).unwrap_or(u64::MAX)
}

/// Bytes of a layer's all_gather or reduce_scatter on `gpus` GPUs: its
/// parameters padded to a multiple of `gpus`, as FSDP pads a flat
/// parameter so that every rank's shard is the same size.
pub fn shard_bytes(params: u64, bytes_per_param: u64, gpus: usize) -> u64 {
    let n = gpus.max(1) as u64;
    params
        .div_ceil(n)
        .saturating_mul(n)
        .saturating_mul(bytes_per_param)
}

/// Splits gradients into DDP buckets (reverse layer order) with their
/// ready times: the end of the backward of the bucket's last layer with
/// parameters (a layer without any readies no gradient, so the backward
/// of such layers after it does not hold the bucket back). The buckets
/// are capped as `cfg` says (the first at `first_bucket_bytes`).
pub fn buckets(model: &ModelSpec, cfg: &TrainConfig) -> Vec<(u64, SimTime)> {
    let bucket_bytes = cfg.bucket_bytes.max(1);
    let first_cap = cfg.first_bucket_bytes.max(1);
    let fwd: f64 = model.layers.iter().map(|l| l.fwd_ms).sum();
    // The last layer backward reaches with gradients: the last bucket is
    // ready as its backward ends.
    let last = model.layers.iter().position(|l| l.params > 0);
    let mut t = fwd;
    let mut out = Vec::new();
    let mut cur = 0u64;
    for (i, l) in model.layers.iter().enumerate().rev() {
        t += l.bwd_ms;
        if l.params == 0 {
            continue;
        }
        cur += l.params * model.bytes_per_param;
        let cap = if out.is_empty() {
            first_cap
        } else {
            bucket_bytes
        };
        if cur >= cap || Some(i) == last {
            out.push((cur, SimTime::from_secs_f64(t * 1e-3)));
            cur = 0;
        }
    }
    out
}

/// The collective times a sweep of training steps shares, by (collective,
/// nodes, bytes), and the collective options they are simulated with: the
/// tuner and the algorithms and protocols it may pick (`NCCL_ALGO` /
/// `NCCL_PROTO`-style, [`crate::collective::Select`]).
///
/// ```
/// use gpucomm_algo::Collective;
/// use gpucomm_sim::collective::{simulate, AlgoChoice, CollOptions, Select};
/// use gpucomm_sim::train::{step, CommTimes, ModelSpec, TrainConfig};
/// use gpucomm_sim::{Engine, Machine};
///
/// let m = Machine::preset("dgx-h100").unwrap();
/// let model = ModelSpec::preset("bert-large").unwrap();
/// let ddp = TrainConfig::default();
/// let nccl = step(&m, 1, &model, &ddp, &mut CommTimes::default()).unwrap();
/// // NCCL_ALGO=Ring: every bucket's all_reduce is the ring's.
/// let ring = CollOptions {
///     algorithm: Select::parse("ring", AlgoChoice::parse).unwrap(),
///     ..Default::default()
/// };
/// let r = step(&m, 1, &model, &ddp, &mut CommTimes::new(ring.clone())).unwrap();
/// let f = m.fabric(Engine::Nccl, 1).unwrap();
/// let each: f64 = r
///     .ops
///     .iter()
///     .map(|b| simulate(&f, Collective::AllReduce, b.bytes, &ring).unwrap().time.as_us())
///     .sum();
/// assert!((r.comm.as_us() - each).abs() < 1e-6 * each);
/// assert_ne!(r.comm, nccl.comm); // NCCL runs NVLS for the larger buckets
/// ```
#[derive(Clone, Debug, Default)]
pub struct CommTimes {
    options: CollOptions,
    times: BTreeMap<(Kind, usize, u64), SimTime>,
}

/// The collectives a step runs (an ordered key for [`CommTimes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    AllReduce,
    AllGather,
    ReduceScatter,
}

impl Kind {
    fn collective(self) -> Collective {
        match self {
            Kind::AllReduce => Collective::AllReduce,
            Kind::AllGather => Collective::AllGather,
            Kind::ReduceScatter => Collective::ReduceScatter,
        }
    }
}

impl CommTimes {
    /// No times yet; the collectives will be simulated with `options`.
    pub fn new(options: CollOptions) -> Self {
        CommTimes {
            options,
            times: BTreeMap::new(),
        }
    }

    /// How many (collective, nodes, bytes) times are known.
    pub fn len(&self) -> usize {
        self.times.len()
    }

    /// Whether no time is known yet.
    pub fn is_empty(&self) -> bool {
        self.times.is_empty()
    }
}

/// The collectives a step of `model` on `gpus` GPUs runs, each with its
/// label, in the order they are issued ([`step`] times them).
fn comm_plan(model: &ModelSpec, cfg: &TrainConfig, gpus: usize) -> Vec<(Kind, String, u64)> {
    let bpp = model.bytes_per_param;
    let layer = |kind: Kind, l: &Layer, pass: &str| {
        let bytes = shard_bytes(l.params, bpp, gpus);
        (kind, format!("{} {pass}", l.name), bytes)
    };
    match cfg.sharding {
        Sharding::Ddp => buckets(model, cfg)
            .into_iter()
            .enumerate()
            .map(|(i, (b, _))| (Kind::AllReduce, format!("bucket {i}"), b))
            .collect(),
        sharding => {
            let layers = &model.layers;
            let mut ops: Vec<_> = layers
                .iter()
                .map(|l| layer(Kind::AllGather, l, "forward"))
                .collect();
            for i in (0..layers.len()).rev() {
                // Issued as layer i's backward starts: the gather of the
                // layer before it (FULL_SHARD); then its gradients'
                // reduce-scatter as it ends.
                if sharding == Sharding::FullShard && i > 0 {
                    ops.push(layer(Kind::AllGather, &layers[i - 1], "backward"));
                }
                ops.push(layer(Kind::ReduceScatter, &layers[i], "gradients"));
            }
            ops.retain(|&(_, _, b)| b > 0);
            ops
        }
    }
}

/// Simulates, side by side on the machine's cores, every collective that
/// the steps of `model` on each of `node_counts` nodes need and that
/// `cache` lacks, into `cache` (what [`step`] reads): a sweep's node counts
/// then cost the time of the slowest, not of all of them in turn (the
/// larger ones first, as they take longest). The results are those
/// [`step`] would compute.
///
/// ```
/// use gpucomm_sim::train::{prefill, step, CommTimes, ModelSpec, TrainConfig};
/// use gpucomm_sim::Machine;
///
/// let m = Machine::preset("dgx-a100").unwrap();
/// let model = ModelSpec::preset("resnet50").unwrap();
/// let cfg = TrainConfig::default();
/// let mut cache = CommTimes::default();
/// prefill(&m, &[1, 2], &model, &cfg, &mut cache).unwrap();
/// let filled = cache.len();
/// let r = step(&m, 2, &model, &cfg, &mut cache).unwrap();
/// assert_eq!(cache.len(), filled); // nothing left to simulate
/// assert!(r.comm.as_us() > 0.0);
/// ```
pub fn prefill(
    machine: &Machine,
    node_counts: &[usize],
    model: &ModelSpec,
    cfg: &TrainConfig,
    cache: &mut CommTimes,
) -> Result<(), SimError> {
    model.validate()?;
    // The missing (collective, nodes, bytes) keys, largest first, and the
    // fabric of each node count among them, built once.
    let missing: BTreeSet<(Kind, usize, u64)> = node_counts
        .iter()
        .flat_map(|&n| {
            let gpus = machine.gpus_per_node() * n;
            comm_plan(model, cfg, gpus)
                .into_iter()
                .map(move |(k, _, b)| (k, n, b))
        })
        .filter(|k| !cache.times.contains_key(k))
        .collect();
    let mut jobs: Vec<(Kind, usize, u64)> = missing.into_iter().collect();
    jobs.sort_by_key(|&(k, n, b)| std::cmp::Reverse((n, b, k)));
    let mut fabrics: BTreeMap<usize, ClusterFabric> = BTreeMap::new();
    for &(_, n, _) in &jobs {
        if let Entry::Vacant(e) = fabrics.entry(n) {
            e.insert(machine.fabric(Engine::Nccl, n)?);
        }
    }
    let times = par_map(&jobs, |&(k, n, b)| -> Result<Option<SimTime>, SimError> {
        let f = &fabrics[&n];
        if crate::fabric::Fabric::ranks(f) == 1 {
            return Ok(None);
        }
        let r = simulate(f, k.collective(), b, &cache.options)?;
        Ok(Some(r.completion))
    });
    for (&key, t) in jobs.iter().zip(times) {
        if let Some(t) = t? {
            cache.times.insert(key, t);
        }
    }
    Ok(())
}

/// Simulates one data-parallel step of `model` on `nodes` nodes of
/// `machine`, sharded as `cfg` says.
pub fn step(
    machine: &Machine,
    nodes: usize,
    model: &ModelSpec,
    cfg: &TrainConfig,
    cache: &mut CommTimes,
) -> Result<StepResult, SimError> {
    if nodes == 0 {
        return Err(SimError::Model(
            "a training step needs at least one node".into(),
        ));
    }
    model.validate()?;
    // (The fabric is built, and the machine checked, where a collective
    // is simulated: in `prefill`.)
    let gpus = machine.gpus_per_node() * nodes;
    // Every collective's time (the ones not cached yet, side by side).
    prefill(machine, &[nodes], model, cfg, cache)?;
    let mut queue = Queue {
        free: SimTime::ZERO,
        ops: Vec::new(),
        plan: comm_plan(model, cfg, gpus).into_iter(),
        times: &cache.times,
        nodes,
        one_gpu: gpus == 1,
    };
    let ms = |x: f64| SimTime::from_secs_f64(x * 1e-3);
    let mut spans = Vec::new();
    let mut span = |label: String, start: SimTime, len: SimTime| {
        spans.push(ComputeSpan {
            label,
            start,
            end: start + len,
        });
        start + len
    };
    let layers = &model.layers;
    let mut t = SimTime::ZERO;
    match cfg.sharding {
        Sharding::Ddp => {
            let fwd: f64 = layers.iter().map(|l| l.fwd_ms).sum();
            let bwd: f64 = layers.iter().map(|l| l.bwd_ms).sum();
            t = span("forward".into(), t, ms(fwd));
            span("backward".into(), t, ms(bwd));
            for (_, ready) in buckets(model, cfg) {
                queue.issue(ready)?;
            }
        }
        sharding => {
            // Forward: each layer waits for its gather, issued as the
            // layer before it starts (the first at once).
            let gathered: Vec<bool> = layers.iter().map(|l| l.params > 0).collect();
            let mut ready = vec![SimTime::ZERO; layers.len()];
            if gathered[0] {
                ready[0] = queue.issue(SimTime::ZERO)?;
            }
            for (i, l) in layers.iter().enumerate() {
                let start = t.max(ready[i]);
                if i + 1 < layers.len() && gathered[i + 1] {
                    ready[i + 1] = queue.issue(start)?;
                }
                t = span(format!("{} forward", l.name), start, ms(l.fwd_ms));
            }
            // Backward, last layer first.
            let last = layers.len() - 1;
            for i in (0..layers.len()).rev() {
                let start = if sharding == Sharding::FullShard && i < last {
                    t.max(ready[i])
                } else {
                    t
                };
                if sharding == Sharding::FullShard && i > 0 && gathered[i - 1] {
                    ready[i - 1] = queue.issue(start)?;
                }
                t = span(
                    format!("{} backward", layers[i].name),
                    start,
                    ms(layers[i].bwd_ms),
                );
                if gathered[i] {
                    queue.issue(t)?;
                }
            }
        }
    }
    if queue.plan.next().is_some() {
        return Err(SimError::Model(
            "a planned collective was not issued".into(),
        ));
    }
    let compute = spans
        .iter()
        .fold(SimTime::ZERO, |sum, s| sum + (s.end - s.start));
    let comm = queue
        .ops
        .iter()
        .fold(SimTime::ZERO, |sum, o| sum + (o.end - o.start));
    if compute == SimTime::ZERO {
        // Layers each shorter than 1 ps, together no less ([`ModelSpec::validate`]).
        return Err(SimError::Model(format!(
            "model {}: a step's compute rounds to 0 ps: the scaling efficiency (compute / step \
             time) needs some compute",
            model.name
        )));
    }
    let busy = spans.last().map_or(SimTime::ZERO, |s| s.end);
    let step = busy.max(queue.free);
    Ok(StepResult {
        nodes,
        gpus,
        step,
        compute,
        comm,
        exposed: step - compute,
        efficiency: compute.as_secs_f64() / step.as_secs_f64().max(1e-15),
        ops: queue.ops,
        compute_spans: spans,
        state_bytes: state_bytes_per_gpu(model.params(), model.bytes_per_param, gpus, cfg.sharding),
    })
}

/// The communication queue of a step: the planned collectives, issued in
/// order, each starting when it is issued and the one before it is done.
struct Queue<'a> {
    free: SimTime,
    ops: Vec<CommOp>,
    plan: std::vec::IntoIter<(Kind, String, u64)>,
    times: &'a BTreeMap<(Kind, usize, u64), SimTime>,
    nodes: usize,
    one_gpu: bool,
}

impl Queue<'_> {
    /// Issues the next planned collective at `at`; returns when it ends.
    fn issue(&mut self, at: SimTime) -> Result<SimTime, SimError> {
        let (kind, label, bytes) = self
            .plan
            .next()
            .ok_or_else(|| SimError::Model("more collectives issued than planned".into()))?;
        let dur = if self.one_gpu {
            SimTime::ZERO
        } else {
            *self.times.get(&(kind, self.nodes, bytes)).ok_or_else(|| {
                SimError::Model(format!(
                    "no {} time for {bytes} B on {} nodes",
                    kind.collective().name(),
                    self.nodes
                ))
            })?
        };
        let start = at.max(self.free);
        self.free = start + dur;
        self.ops.push(CommOp {
            collective: kind.collective(),
            label,
            bytes,
            ready: at,
            start,
            end: self.free,
        });
        Ok(self.free)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_follow_ddp() {
        let m = ModelSpec::preset("bert-large").unwrap();
        let b = buckets(&m, &TrainConfig::default());
        let total: u64 = b.iter().map(|x| x.0).sum();
        assert_eq!(total, m.params() * 4);
        // First bucket is the small one (1 MiB cap -> one 12.6M-param layer).
        assert!(b[0].0 < b[1].0 || b.len() == 1);
        // Ready times increase.
        assert!(b.windows(2).all(|w| w[0].1 <= w[1].1));
    }

    #[test]
    fn the_last_bucket_is_ready_when_its_last_gradient_is() {
        // A stem without parameters whose backward (50 ms) comes last: the
        // fc layer's gradients are ready 1 ms into backward, at 3 ms, and
        // their all_reduce hides behind the stem's backward. It waited
        // for the whole backward (53 ms) and stood exposed after it.
        let layer = |name: &str, bwd_ms: f64, params: u64| Layer {
            name: name.into(),
            fwd_ms: 1.0,
            bwd_ms,
            params,
        };
        let m = ModelSpec {
            name: "trail".into(),
            bytes_per_param: 4,
            source: String::new(),
            measured_on: None,
            layers: vec![layer("stem", 50.0, 0), layer("fc", 1.0, 100_000)],
        };
        let ms = |x: f64| SimTime::from_secs_f64(x * 1e-3);
        assert_eq!(buckets(&m, &TrainConfig::default()), [(400_000, ms(3.0))]);
        let mach = Machine::preset("dgx-h100").unwrap();
        let r = step(
            &mach,
            2,
            &m,
            &TrainConfig::default(),
            &mut CommTimes::default(),
        )
        .unwrap();
        assert_eq!(r.ops[0].start, ms(3.0));
        assert_eq!(r.exposed, SimTime::ZERO);
        assert_eq!(r.step, ms(53.0));
    }

    #[test]
    fn one_gpu_has_no_communication_and_more_nodes_cost_more() {
        let m = ModelSpec::preset("resnet50").unwrap();
        let mut mach = Machine::preset("dgx-a100").unwrap();
        mach.gpus_used = Some(1);
        let ddp = TrainConfig::default();
        let mut cache = CommTimes::default();
        let one = step(&mach, 1, &m, &ddp, &mut cache).unwrap();
        assert_eq!(one.exposed, SimTime::ZERO);
        assert!((one.efficiency - 1.0).abs() < 1e-12);
        let mach = Machine::preset("dgx-a100").unwrap();
        assert!(step(&mach, 0, &m, &ddp, &mut cache).is_err());
        let mut none = mach.clone();
        none.gpus_used = Some(0);
        assert!(step(&none, 2, &m, &ddp, &mut CommTimes::default()).is_err());
        let a = step(&mach, 1, &m, &ddp, &mut cache).unwrap();
        let b = step(&mach, 4, &m, &ddp, &mut cache).unwrap();
        assert!(b.comm > a.comm);
        assert!(b.efficiency <= a.efficiency + 1e-12);
    }

    /// A model of `n` equal layers.
    fn layers(n: usize, fwd_ms: f64, params: u64) -> ModelSpec {
        ModelSpec {
            name: "equal".into(),
            bytes_per_param: 2,
            source: String::new(),
            measured_on: None,
            layers: (0..n)
                .map(|i| Layer {
                    name: format!("l{i}"),
                    fwd_ms,
                    bwd_ms: 2.0 * fwd_ms,
                    params,
                })
                .collect(),
        }
    }

    #[test]
    fn fsdp_runs_the_collectives_fsdp_issues_in_its_order() {
        let m = layers(4, 1.0, 1_000_003);
        let mach = Machine::preset("dgx-h100").unwrap();
        let mut cache = CommTimes::default();
        let run = |s: Sharding, cache: &mut CommTimes| {
            let cfg = TrainConfig {
                sharding: s,
                ..Default::default()
            };
            step(&mach, 2, &m, &cfg, cache).unwrap()
        };
        let full = run(Sharding::FullShard, &mut cache);
        let names: Vec<String> = full
            .ops
            .iter()
            .map(|o| format!("{} {}", o.collective.name(), o.label))
            .collect();
        let want = [
            "all_gather l0 forward",
            "all_gather l1 forward",
            "all_gather l2 forward",
            "all_gather l3 forward",
            "all_gather l2 backward",
            "reduce_scatter l3 gradients",
            "all_gather l1 backward",
            "reduce_scatter l2 gradients",
            "all_gather l0 backward",
            "reduce_scatter l1 gradients",
            "reduce_scatter l0 gradients",
        ];
        assert_eq!(names, want);
        // Padded to a multiple of the 16 GPUs, 2 bytes each.
        assert!(full.ops.iter().all(|o| o.bytes == 1_000_016 * 2));
        // One queue: each op starts once issued and the one before is done.
        for w in full.ops.windows(2) {
            assert_eq!(w[1].start, w[1].ready.max(w[0].end));
        }
        // A layer's compute starts after its gather: layer 0's forward
        // waits for the first, exposed, all_gather.
        assert_eq!(full.compute_spans[0].start, full.ops[0].end);
        assert!(full.exposed >= full.ops[0].end - full.ops[0].start);
        // SHARD_GRAD_OP gathers once; the same reduce-scatters.
        let grad_op = run(Sharding::ShardGradOp, &mut cache);
        let gathers = |r: &StepResult| {
            r.ops
                .iter()
                .filter(|o| o.collective == Collective::AllGather)
                .count()
        };
        assert_eq!((gathers(&full), gathers(&grad_op)), (7, 4));
        assert!(grad_op.step <= full.step);
        assert_eq!(full.compute, grad_op.compute);
        // State per GPU: DDP holds 16 bytes per parameter, FULL_SHARD 1/16 of it.
        let ddp = run(Sharding::Ddp, &mut cache);
        assert_eq!(ddp.state_bytes, 16 * m.params());
        assert_eq!(full.state_bytes, (16 * m.params()).div_ceil(16));
        assert!(grad_op.state_bytes > full.state_bytes && grad_op.state_bytes < ddp.state_bytes);
    }

    #[test]
    fn fsdp_hides_gathers_behind_long_layers_and_not_behind_short_ones() {
        let mach = Machine::preset("dgx-h100").unwrap();
        let cfg = TrainConfig {
            sharding: Sharding::FullShard,
            ..Default::default()
        };
        let mut cache = CommTimes::default();
        // 100 MB per layer: each collective takes about a third of a ms on
        // two nodes. Behind 50 ms layers only the first forward gather and
        // the last reduce-scatter (issued when backward ends) show.
        let slow = step(&mach, 2, &layers(8, 50.0, 50_000_000), &cfg, &mut cache).unwrap();
        let took = |o: &CommOp| o.end - o.start;
        let ends = took(&slow.ops[0]) + took(slow.ops.last().unwrap());
        assert_eq!(slow.exposed, ends, "{slow:?}");
        // Behind 0.01 ms layers the communication is nearly all exposed.
        let fast = step(&mach, 2, &layers(8, 0.01, 50_000_000), &cfg, &mut cache).unwrap();
        assert!(fast.exposed.as_us() > 0.9 * fast.comm.as_us(), "{fast:?}");
        // On one GPU nothing is communicated.
        let mut one = mach.clone();
        one.use_gpus(1).unwrap();
        let r = step(&one, 1, &layers(3, 1.0, 10), &cfg, &mut cache).unwrap();
        assert_eq!((r.comm, r.exposed), (SimTime::ZERO, SimTime::ZERO));
    }

    #[test]
    fn layers_without_parameters_are_not_gathered() {
        let mut m = layers(3, 1.0, 1000);
        m.layers[1].params = 0;
        let mach = Machine::preset("dgx-a100").unwrap();
        let cfg = TrainConfig {
            sharding: Sharding::FullShard,
            ..Default::default()
        };
        let r = step(&mach, 1, &m, &cfg, &mut CommTimes::default()).unwrap();
        assert!(
            r.ops.iter().all(|o| !o.label.starts_with("l1 ")),
            "{:?}",
            r.ops
        );
        assert_eq!(r.ops.len(), 2 + 1 + 2);
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

    /// Parameter counts are quoted as 1.5e9; TOML's integers have no
    /// exponent, so `params = 1.5e9` was refused as a float.
    #[test]
    fn a_parameter_count_may_be_a_whole_float() {
        let file = |params: &str| {
            format!(
                "name = \"t\"\n[[layer]]\nname = \"a\"\nfwd_ms = 1.0\nbwd_ms = 2.0\nparams = {params}\n"
            )
        };
        assert_eq!(
            ModelSpec::from_toml(&file("1.5e9")).unwrap().params(),
            1_500_000_000
        );
        assert_eq!(ModelSpec::from_toml(&file("0.0")).unwrap().params(), 0);
        let two = file("1").replace("name = \"t\"\n", "name = \"t\"\nbytes_per_param = 2.0\n");
        assert_eq!(ModelSpec::from_toml(&two).unwrap().bytes_per_param, 2);
        let half = two.replace("2.0", "2.5");
        let e = ModelSpec::from_toml(&half).unwrap_err().to_string();
        assert!(e.contains("floating point `2.5`"), "{e}");
        let json =
            r#"{"name": "t", "layer": [{"name": "a", "fwd_ms": 1, "bwd_ms": 2, "params": 3e6}]}"#;
        assert_eq!(ModelSpec::from_json(json).unwrap().params(), 3_000_000);
        for (bad, says) in [
            ("1.5", "floating point `1.5`"),
            ("-1", "integer `-1`"),
            ("-1e3", "floating point `-1000`"),
            // Past 2^53 a float no longer holds every whole number.
            ("1e16", "floating point `1e16`"),
            ("1e300", "floating point `1e300`"),
            ("nan", "floating point `NaN`"),
            ("\"12\"", "string \"12\""),
        ] {
            let e = ModelSpec::from_toml(&file(bad)).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
            assert!(
                e.contains("expected a whole number of at least 0"),
                "{bad}: {e}"
            );
        }
    }

    /// A misspelt field was ignored (`bytes_per_parm = 2` ran with 4 B per
    /// gradient); a model without compute printed an efficiency of 0%.
    #[test]
    fn model_files_refuse_unknown_fields_and_no_compute() {
        let ok =
            "name = \"tiny\"\n[[layer]]\nname = \"a\"\nfwd_ms = 1.0\nbwd_ms = 2.0\nparams = 1000\n";
        let typo = ok.replace("name = \"tiny\"\n", "name = \"tiny\"\nbytes_per_parm = 2\n");
        let e = ModelSpec::from_toml(&typo).unwrap_err().to_string();
        assert!(e.contains("unknown field `bytes_per_parm`"), "{e}");
        let e = ModelSpec::from_toml(&format!("{ok}param = 5\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `param`"), "{e}");
        for (fwd, bwd) in [("0.0", "0.0"), ("1e-300", "5e-324")] {
            let none = ok
                .replace("fwd_ms = 1.0", &format!("fwd_ms = {fwd}"))
                .replace("bwd_ms = 2.0", &format!("bwd_ms = {bwd}"));
            let e = ModelSpec::from_toml(&none).unwrap_err().to_string();
            assert!(e.contains("needs some compute"), "{e}");
        }
        // Layers each under 1 ps, together over it, still round to none.
        let mut m = layers(4, 0.3e-9, 10);
        for l in &mut m.layers {
            l.bwd_ms = 0.0;
        }
        m.validate().unwrap();
        let cfg = TrainConfig {
            sharding: Sharding::FullShard,
            ..Default::default()
        };
        let mach = Machine::preset("dgx-a100").unwrap();
        let e = step(&mach, 1, &m, &cfg, &mut CommTimes::default()).unwrap_err();
        assert!(e.to_string().contains("rounds to 0 ps"), "{e}");
    }
}
