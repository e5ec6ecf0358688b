//! In-network reduction on InfiniBand switches (NVIDIA SHARP), as NCCL
//! runs it: CollNet Direct, and NVLS with SHARP across nodes.
//!
//! # What NCCL does
//!
//! **CollNet Direct** (NVIDIA/nccl `src/device/all_reduce.h`,
//! `RunWorkColl<ncclFuncAllReduce, .., NCCL_ALGO_COLLNET_DIRECT, ..>`): the
//! GPUs next to a NIC are *heads*, one per NIC. Every GPU scatters its
//! buffer to the heads over NVLink (head `h` gets slice `h`, `S / heads`
//! bytes); each head reduces its slice from every local GPU and sends it
//! to the network once; the switches' aggregation tree (one per rail:
//! SHARP's "a single job can also utilize multiple trees, in case the job
//! is operating on multiple rails", SHARP Rev 3.11 docs, *Dynamic Trees
//! Allocation Mode*) reduces the slices of every node and returns the
//! result; the head broadcasts it to the local GPUs over NVLink. All
//! stages run at once on a pipeline of chunks. Each node's NICs carry `S`
//! once up and once down, against `2 (n-1)/n S` each way for a ring.
//!
//! **NVLS + SHARP** (NCCL's `NCCL_ALGO_NVLS` with `nNodes > 1`, enabled
//! only with CollNet support, `src/graph/tuning.cc`): the reduction inside
//! a node is done by the NVSwitch (`multimem.ld_reduce` by the heads), the
//! heads exchange their slices through SHARP as above, and the NVSwitch
//! multicasts the result (`multimem.st`). Each GPU's NVLink carries
//! `S + S/heads` each way for a head (`S` for another GPU).
//!
//! # How it is simulated
//!
//! One node's flows on the [`ClusterFabric`]'s links of node 0, all started
//! together (the pipeline's stages overlap; its fill is in NCCL's latency
//! terms): the scatter and broadcast flows over NVLink, and per head one
//! *stream* flow that crosses its path to the NIC, the NIC port out, the
//! leaf uplink and downlink when the network is oversubscribed, the NIC
//! port in and the path back to the head. Every node does the same at the
//! same time, and a switch forwards one reduced stream per tree, so a leaf
//! uplink carries one stream per tree (not one per node): node 0's streams
//! stand for them, on the slowest leaf's uplink. The switch reduces at the
//! line rate of its ports (streaming aggregation: Graham et al., "Scalable
//! Hierarchical Aggregation and Reduction Protocol (SHARP) Streaming-
//! Aggregation Hardware Design and Evaluation", ISC High Performance
//! 2020). Quantum (HDR, SHARPv2) switches run one streaming tree at a time
//! (SHARP Rev 3.13.0 docs, *General Information*: "the number of SHARP
//! streaming aggregation operations is limited to one active tree per
//! switch"), so where one switch serves several rails' trees (one switch,
//! or leaves holding all of a node's NICs) the trees share one port's
//! rate; Quantum-2 (NDR, SHARPv3) allows "one active tree per port"
//! (same page), no limit beyond the ports. Bandwidths are NCCL's per-link
//! figures ([`crate::model`]); times add NCCL's latency model for the
//! algorithm (`baseLat` + `hwLat` terms of `tuning.cc`, below).

use gpucomm_algo::Collective;
use gpucomm_topo::IbSpeed;

use crate::engine::{FlowNet, LinkId, Output};
use crate::fabric::Fabric;
use crate::machine::{ClusterFabric, NetLayout, NvFabric};
use crate::model::{self, Arch};
use crate::{SimError, SimTime};

/// An InfiniBand switch generation that aggregates large messages
/// (streaming aggregation), decided by the NIC port speed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharpSwitch {
    /// NVIDIA Quantum (HDR), SHARPv2: one active streaming tree per switch.
    Quantum,
    /// NVIDIA Quantum-2 (NDR), SHARPv3: one active streaming tree per port.
    Quantum2,
    /// NVIDIA Quantum-3 (XDR), SHARPv4: taken as Quantum-2's per-port limit
    /// (an assumption: the SHARP 3.13 docs list Quantum-3 as supported
    /// without stating its tree limit).
    Quantum3,
}

impl SharpSwitch {
    /// The switch generation of an InfiniBand port speed; `None` for FDR
    /// and EDR (Switch-IB 2 has SHARPv1's low-latency trees only: the SHARP
    /// 3.x docs list streaming aggregation from Quantum on).
    pub fn for_speed(speed: IbSpeed) -> Option<SharpSwitch> {
        match speed {
            IbSpeed::Fdr | IbSpeed::Edr => None,
            IbSpeed::Hdr100 | IbSpeed::Hdr => Some(SharpSwitch::Quantum),
            IbSpeed::Ndr200 | IbSpeed::Ndr => Some(SharpSwitch::Quantum2),
            IbSpeed::Xdr => Some(SharpSwitch::Quantum3),
        }
    }

    /// Name with its SHARP generation.
    pub fn name(self) -> &'static str {
        match self {
            SharpSwitch::Quantum => "Quantum (SHARPv2)",
            SharpSwitch::Quantum2 => "Quantum-2 (SHARPv3)",
            SharpSwitch::Quantum3 => "Quantum-3 (SHARPv4)",
        }
    }

    /// Only one streaming aggregation tree is active per switch.
    pub fn one_tree_per_switch(self) -> bool {
        self == SharpSwitch::Quantum
    }
}

/// NCCL's CollNet Direct correction on Hopper and later (`tuning.cc`:
/// `if (minCompCap >= 90) busBw *= .85` for `NCCL_ALGO_COLLNET_DIRECT`).
pub const COLLNET_HOPPER_EFFICIENCY: f64 = 0.85;
/// NCCL `hwLat[NVLINK][COLLNET_DIRECT][SIMPLE]`, us (`tuning.cc`).
pub const COLLNET_INTRA_LAT_US: f64 = 3.7;
/// NCCL `hwLat[NET][COLLNET_DIRECT][SIMPLE]`, us (`tuning.cc`).
pub const COLLNET_NET_LAT_US: f64 = 31.0;
/// NCCL's CollNet Direct "arity serialization latency" per local peer, us
/// (`tuning.cc`: `(nRanks/nNodes-1) * 0.4`).
pub const COLLNET_ARITY_LAT_US: f64 = 0.4;
/// NCCL `hwLat[NET][TREE][SIMPLE]`, us, used instead when one GPU per node
/// ("with ppn=1 latencies are fully exposed", `tuning.cc`).
pub const NET_TREE_LAT_US: f64 = 14.0;
/// NCCL `hwLat[NVLINK][NVLS][SIMPLE]`, us (`tuning.cc`).
pub const NVLS_INTRA_LAT_US: f64 = 25.0;
/// NCCL `hwLat[NET][NVLS][SIMPLE]`, us (`tuning.cc`).
pub const NVLS_NET_LAT_US: f64 = 18.0;

/// Why `fabric` cannot reduce in its network switches (or the switch
/// generation when it can).
pub fn sharp_switch(fabric: &ClusterFabric) -> Result<SharpSwitch, SimError> {
    let m = &fabric.machine;
    if fabric.nodes() < 2 {
        return Err(SimError::Model(
            "in-network reduction (SHARP) runs across nodes: give --nodes 2 or more".into(),
        ));
    }
    if !m.network.sharp {
        return Err(SimError::Model(format!(
            "the network of {} has no in-network reduction: its switches are not SHARP-capable \
             (pass --sharp, or use a topology whose network switches set `reduction`)",
            m.name
        )));
    }
    if m.node.nics == 0 {
        return Err(SimError::Model("in-network reduction needs NICs".into()));
    }
    let speed = m.network.ib.ok_or_else(|| {
        SimError::Model(format!(
            "SHARP is an InfiniBand feature; the NICs of {} are not InfiniBand",
            m.name
        ))
    })?;
    SharpSwitch::for_speed(speed).ok_or_else(|| {
        SimError::Model(format!(
            "{} InfiniBand switches (Switch-IB 2 and older) have no streaming aggregation \
             for large messages (SHARP 3.x: NVIDIA Quantum / HDR and later)",
            speed.name().to_uppercase()
        ))
    })
}

/// Checks that CollNet Direct can run `collective` on `fabric`.
pub fn collnet_eligible(
    fabric: &ClusterFabric,
    collective: Collective,
) -> Result<SharpSwitch, SimError> {
    let sw = sharp_switch(fabric)?;
    if collective != Collective::AllReduce {
        return Err(SimError::Model(
            "collnet is modeled for all_reduce only".into(),
        ));
    }
    if !matches!(fabric.machine.node.nvlink, NvFabric::Switch { .. }) {
        return Err(SimError::Model(format!(
            "collnet (NCCL's CollNet Direct) needs NVSwitch nodes (NCCL disables it without one); \
             {} has none, and CollNet Chain is not modeled",
            fabric.machine.name
        )));
    }
    Ok(sw)
}

/// Checks that NVLS with SHARP across nodes can run `collective`.
pub fn nvls_sharp_eligible(
    fabric: &ClusterFabric,
    collective: Collective,
) -> Result<SharpSwitch, SimError> {
    let sw = sharp_switch(fabric).map_err(|e| {
        let why = match e {
            SimError::Model(m) => m,
            other => other.to_string(),
        };
        SimError::Model(format!(
            "nvls across nodes needs in-network reduction (NCCL runs NVLS across nodes only with CollNet/SHARP): {why}"
        ))
    })?;
    if collective != Collective::AllReduce {
        return Err(SimError::Model(
            "nvls is modeled for all_reduce only".into(),
        ));
    }
    Ok(sw)
}

/// The heads of a node: `(NIC, GPU)` pairs, one per NIC that has a GPU
/// in use (the GPU next to the NIC, else GPU `k`).
fn heads(fabric: &ClusterFabric) -> Vec<(usize, usize)> {
    let rpn = fabric.ranks_per_node();
    let nics = fabric.machine.node.nics;
    (0..nics.min(rpn))
        .map(|k| {
            let g = fabric.nic_gpu(k);
            (k, if g < rpn { g } else { k })
        })
        .collect()
}

/// Node 0's links, plus the shared resources of the aggregation trees.
struct Net {
    caps: Vec<f64>,
    uplinks: Option<(LinkId, LinkId)>,
    aggregator: Option<LinkId>,
}

fn sharp_net(fabric: &ClusterFabric, sw: SharpSwitch) -> Net {
    let mut caps = fabric.node_caps().to_vec();
    let mut uplinks = None;
    if fabric.has_uplinks() {
        let leaves = fabric.leaf_of(fabric.nodes() - 1) + 1;
        let slowest = (0..leaves)
            .filter_map(|l| fabric.uplink_gbps(l))
            .fold(f64::INFINITY, f64::min);
        let up = caps.len() as LinkId;
        caps.push(slowest);
        caps.push(slowest);
        uplinks = Some((up, up + 1));
    }
    let mut aggregator = None;
    if sw.one_tree_per_switch() && fabric.machine.network.layout != NetLayout::Rails {
        // One switch holds every rail's tree and runs one at a time: the
        // trees share one port's rate.
        aggregator = Some(caps.len() as LinkId);
        caps.push(fabric.machine.node.nic_gbps * model::IB_EFFICIENCY);
    }
    Net {
        caps,
        uplinks,
        aggregator,
    }
}

/// The stream of head GPU `h` through NIC `k`, the aggregation tree and
/// back: its links and latency.
fn stream(fabric: &ClusterFabric, net: &Net, k: usize, h: usize) -> (Vec<LinkId>, SimTime) {
    let (mut links, lat_out) = fabric.gpu_to_net(h, k);
    if let Some((up, down)) = net.uplinks {
        links.push(up);
        links.push(down);
    }
    if let Some(a) = net.aggregator {
        links.push(a);
    }
    let (back, lat_in) = fabric.net_to_gpu(k, h);
    links.extend(back);
    (
        links,
        lat_out + lat_in + SimTime::from_us(model::NET_SWITCH_US),
    )
}

fn run(mut net: FlowNet) -> SimTime {
    let mut out = Vec::new();
    let mut end = SimTime::ZERO;
    while let Some(t) = net.next_batch(&mut out) {
        if out.iter().any(|o| matches!(o, Output::Delivered(_))) {
            end = t;
        }
    }
    end
}

/// CollNet Direct all_reduce of `bytes` (see the module documentation).
///
/// ```
/// use gpucomm_sim::{Engine, Machine};
/// use gpucomm_sim::innet::collnet_all_reduce;
/// let opts = gpucomm_topo::ClusterOptions { sharp: true, ..Default::default() };
/// let m = Machine::preset("dgx-h100").unwrap().with_cluster_options(&opts).unwrap();
/// let f = m.fabric(Engine::Nccl, 4).unwrap();
/// let t = collnet_all_reduce(&f, 1 << 30).unwrap();
/// // Each node's eight 400G NICs move 1 GiB once each way: at least 2.7 ms.
/// assert!(t.as_us() > (1u64 << 30) as f64 / (8.0 * 50e9) * 1e6);
/// ```
pub fn collnet_all_reduce(fabric: &ClusterFabric, bytes: u64) -> Result<SimTime, SimError> {
    let sw = collnet_eligible(fabric, Collective::AllReduce)?;
    let net = sharp_net(fabric, sw);
    let eff = if fabric.machine.node.arch >= Arch::Hopper {
        COLLNET_HOPPER_EFFICIENCY
    } else {
        1.0
    };
    let caps: Vec<f64> = net.caps.iter().map(|c| c * eff).collect();
    let mut flows = FlowNet::new(&caps);
    let rpn = fabric.ranks_per_node();
    let hs = heads(fabric);
    let slice = bytes as f64 / hs.len() as f64;
    for (tag, &(k, h)) in hs.iter().enumerate() {
        for g in (0..rpn).filter(|&g| g != h) {
            // Scatter to the head, and the head's broadcast back.
            let to = fabric.route(g, h, 0)?;
            flows.start_flow(&to.links, slice, to.latency, tag as u64);
            let back = fabric.route(h, g, 0)?;
            flows.start_flow(&back.links, slice, back.latency, tag as u64);
        }
        let (links, lat) = stream(fabric, &net, k, h);
        flows.start_flow(&links, slice, lat, tag as u64);
    }
    let ppn = rpn as f64;
    let inter = if rpn == 1 {
        NET_TREE_LAT_US
    } else {
        COLLNET_NET_LAT_US
    };
    let lat = 2.0
        * ((ppn - 1.0).min(1.0) * COLLNET_INTRA_LAT_US + (ppn - 1.0) * COLLNET_ARITY_LAT_US)
        + inter;
    Ok(run(flows) + SimTime::from_us(lat))
}

/// NVLS with SHARP across nodes, all_reduce of `bytes` (see the module
/// documentation). The NVSwitch's links run at NCCL's NVLS efficiency, as
/// for NVLS inside a node.
pub fn nvls_sharp_all_reduce(fabric: &ClusterFabric, bytes: u64) -> Result<SimTime, SimError> {
    let sw = nvls_sharp_eligible(fabric, Collective::AllReduce)?;
    let arch = fabric.machine.node.arch;
    let mut net = sharp_net(fabric, sw);
    let rpn = fabric.ranks_per_node();
    let nvls = model::nvls_efficiency(arch) * (model::NVLS_CHANNELS - 1.0) / model::NVLS_CHANNELS;
    let mut nvlinks = Vec::with_capacity(rpn);
    for g in 0..rpn {
        let (up, down) = fabric
            .nvswitch_links(g)
            .ok_or_else(|| SimError::Model("nvls needs an NVSwitch".into()))?;
        net.caps[up as usize] *= nvls;
        net.caps[down as usize] *= nvls;
        nvlinks.push((up, down));
    }
    let mut flows = FlowNet::new(&net.caps);
    let hs = heads(fabric);
    let s = bytes as f64;
    let slice = s / hs.len() as f64;
    let hop = SimTime::from_us(2.0 * model::NVLINK_HOP_US);
    for (g, &(up, down)) in nvlinks.iter().enumerate() {
        // Every GPU writes its buffer into the switch and reads the result
        // back; a head also reads its reduced slice and multicasts the
        // network's result (S/heads each way).
        let extra = if hs.iter().any(|&(_, h)| h == g) {
            slice
        } else {
            0.0
        };
        flows.start_flow(&[up], s + extra, hop, g as u64);
        flows.start_flow(&[down], s + extra, hop, g as u64);
    }
    for (tag, &(k, h)) in hs.iter().enumerate() {
        let (links, lat) = stream(fabric, &net, k, h);
        flows.start_flow(&links, slice, lat, tag as u64);
    }
    Ok(run(flows) + SimTime::from_us(NVLS_INTRA_LAT_US + NVLS_NET_LAT_US))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Machine;
    use crate::machine::Engine;

    #[test]
    fn the_switch_generation_follows_the_port_speed() {
        assert_eq!(SharpSwitch::for_speed(IbSpeed::Edr), None);
        assert_eq!(SharpSwitch::for_speed(IbSpeed::Fdr), None);
        assert_eq!(
            SharpSwitch::for_speed(IbSpeed::Hdr),
            Some(SharpSwitch::Quantum)
        );
        assert_eq!(
            SharpSwitch::for_speed(IbSpeed::Ndr),
            Some(SharpSwitch::Quantum2)
        );
        assert!(SharpSwitch::Quantum.one_tree_per_switch());
        assert!(!SharpSwitch::Quantum2.one_tree_per_switch());
        let m = Machine::preset("dgx-a100")
            .unwrap()
            .with_cluster_options(&gpucomm_topo::ClusterOptions {
                sharp: true,
                ..Default::default()
            })
            .unwrap();
        let f = m.fabric(Engine::Nccl, 2).unwrap();
        assert_eq!(sharp_switch(&f).unwrap(), SharpSwitch::Quantum);
    }

    #[test]
    fn collnet_moves_each_slice_once_through_each_nic() {
        // With NVLink out of the way (one GPU per node), CollNet is the
        // NIC path's time plus NCCL's latency: bytes / (heads x slowest
        // link of the head's stream) + latency.
        let mut m = Machine::preset("dgx-h100")
            .unwrap()
            .with_cluster_options(&gpucomm_topo::ClusterOptions {
                sharp: true,
                ..Default::default()
            })
            .unwrap();
        m.gpus_used = Some(1);
        let f = m.fabric(Engine::Nccl, 4).unwrap();
        let net = sharp_net(&f, SharpSwitch::Quantum2);
        let (links, lat) = stream(&f, &net, 0, 0);
        let slowest = links
            .iter()
            .map(|&l| net.caps[l as usize])
            .fold(f64::INFINITY, f64::min)
            * COLLNET_HOPPER_EFFICIENCY;
        let bytes = 1u64 << 30;
        let want = bytes as f64 / (slowest * 1e9) * 1e6 + lat.as_us() + NET_TREE_LAT_US;
        let got = collnet_all_reduce(&f, bytes).unwrap().as_us();
        assert!((got - want).abs() < 1e-3, "{got} vs {want}");
    }
}
