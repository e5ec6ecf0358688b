//! Reduction in the switches, as NCCL runs it across nodes: CollNet
//! Direct, CollNet Chain and NVLS with SHARP (in the InfiniBand
//! switches), and NVLSTree (in the NVSwitch, with a tree between the
//! nodes).
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
//! **CollNet Chain** (`RunWorkColl<.., NCCL_ALGO_COLLNET_CHAIN, ..>`,
//! the same file; NCCL's CollNet where a node has no NVSwitch, which
//! Direct needs): each channel chains the node's GPUs to its head, the
//! GPU next to its NIC; the data is reduced up the chain (each GPU
//! receives the partial sum from the one below, adds its own and sends it
//! up), the head sends it to the switches' tree, and the result is
//! broadcast down the chain, both directions at once on a pipeline of
//! chunks. The channels split the buffer, so each GPU's links carry about
//! `2 S` each way (a chain's ends half of that), against Direct's `S` and a
//! ring's `2 (n-1)/n S`; the NICs carry `S` each way, as for Direct.
//!
//! **NVLS + SHARP** (NCCL's `NCCL_ALGO_NVLS` with `nNodes > 1`, enabled
//! only with CollNet support, `src/graph/tuning.cc`): the reduction inside
//! a node is done by the NVSwitch (`multimem.ld_reduce` by the heads), the
//! heads exchange their slices through SHARP as above, and the NVSwitch
//! multicasts the result (`multimem.st`). Each GPU's NVLink carries
//! `S + S/heads` each way for a head (`S` for another GPU).
//!
//! **NVLSTree** (NCCL's `NCCL_ALGO_NVLS_TREE`, all_reduce across nodes of
//! NVLS-capable GPUs, no switch support needed in the network): the
//! NVSwitch reduces inside the node as for NVLS, each head takes its slice
//! through a double binary tree between the nodes (reduce up, broadcast
//! down, the two trees carrying half the slice each), and the NVSwitch
//! multicasts the result. In the double binary tree every node is an inner
//! node of one tree and a leaf of the other, so its NIC sends and receives
//! `2 x slice` (inner: 2 halves from the children and 1 from the parent, 1
//! to the parent and 2 to the children; leaf: 1 each way); between two
//! nodes the heads just exchange their slices (`slice` each way: NCCL's
//! "2 node case of NVLSTree" doubles the inter-node bandwidth).
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
//! algorithm ([`model::nccl_model_latency_us`]).

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

/// SHARP switches ([`sharp_switch`]) and an all_reduce, what every use of
/// SHARP here needs (`algo` names the one asked for in the error).
fn sharp_all_reduce(
    fabric: &ClusterFabric,
    collective: Collective,
    algo: &str,
) -> Result<SharpSwitch, SimError> {
    let sw = sharp_switch(fabric)?;
    if collective != Collective::AllReduce {
        return Err(SimError::Model(format!(
            "{algo} is modeled for all_reduce only"
        )));
    }
    Ok(sw)
}

/// [`sharp_all_reduce`] and at most [`model::NCCL_MAX_COLLNET_LOCAL_RANKS`]
/// GPUs per node, the conditions both CollNets share.
fn collnet_common(
    fabric: &ClusterFabric,
    collective: Collective,
    algo: &str,
) -> Result<SharpSwitch, SimError> {
    let sw = sharp_all_reduce(fabric, collective, algo)?;
    let ppn = fabric.ranks_per_node();
    if ppn > model::NCCL_MAX_COLLNET_LOCAL_RANKS {
        return Err(SimError::Model(format!(
            "NCCL runs {algo} on at most {} GPUs per node (NCCL_MAX_DIRECT_ARITY + 1, \
             updateCollCostTable in src/enqueue.cc): here {ppn} (--gpus picks fewer)",
            model::NCCL_MAX_COLLNET_LOCAL_RANKS
        )));
    }
    Ok(sw)
}

/// Checks that CollNet Direct can run `collective` on `fabric`.
pub fn collnet_eligible(
    fabric: &ClusterFabric,
    collective: Collective,
) -> Result<SharpSwitch, SimError> {
    let sw = collnet_common(fabric, collective, "collnet")?;
    if !matches!(fabric.machine.node.nvlink, NvFabric::Switch { .. }) {
        return Err(SimError::Model(format!(
            "collnet (NCCL's CollNet Direct) needs NVSwitch nodes (NCCL disables it without one); \
             {} has none: --algorithm collnet_chain runs NCCL's CollNet Chain there",
            fabric.machine.name
        )));
    }
    Ok(sw)
}

/// Checks that CollNet Chain can run `collective` on `fabric`: switches
/// that reduce (as for CollNet Direct), no NVSwitch needed (NCCL enables
/// the chain wherever its CollNet plugin supports it, `tuning.cc`).
pub fn collnet_chain_eligible(
    fabric: &ClusterFabric,
    collective: Collective,
) -> Result<SharpSwitch, SimError> {
    collnet_common(fabric, collective, "collnet_chain")
}

/// What `--sharp` needs of `machine` (and a calibration case that states
/// SHARP): switches that reduce large messages, so that CollNet (Direct on
/// NVSwitch nodes, Chain elsewhere, on up to 8 GPUs per node) or NVLS
/// across nodes can run; checked on `nodes` nodes, at least two (a
/// node-count sweep may start at one).
pub fn sharp_usable(machine: &crate::Machine, nodes: usize) -> Result<SharpSwitch, SimError> {
    let f = machine.fabric(crate::Engine::Nccl, nodes.max(2))?;
    sharp_all_reduce(&f, Collective::AllReduce, "--sharp")
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

/// The heads of a node: `(NIC, GPU)` pairs, a GPU in use next to a NIC
/// ([`ClusterFabric::rails`]) and its first NIC, each GPU once (NCCL's
/// `connectCollNet` keeps a head rank once however many channels' NICs
/// it is next to: with two NICs per GPU the heads were GPUs 0, 0, 1, 1,
/// ..., and CollNet on 16 NICs was slower than on 8). A head with two
/// NICs streams through its first one only.
pub(crate) fn heads(fabric: &ClusterFabric) -> Vec<(usize, usize)> {
    let mut hs: Vec<(usize, usize)> = Vec::new();
    for &k in fabric.rails() {
        let g = fabric.nic_gpu(k);
        if hs.len() < fabric.ranks_per_node() && hs.iter().all(|&(_, h)| h != g) {
            hs.push((k, g));
        }
    }
    hs
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
    Ok(run(flows) + nccl_latency(fabric, "collnet", bytes))
}

/// CollNet Chain all_reduce of `bytes` (see the module documentation):
/// per head, a chain of the node's GPUs in rank order from the one after
/// the head round to the head, `S / heads` bytes reduced up it and
/// broadcast down it over the node's links, and the head's stream through
/// its NIC and the switches; all at once (the pipeline's stages overlap),
/// plus NCCL's CollNet Chain latency (`2 (ppn-1)` intra-node steps and one
/// network step). NCCL applies no efficiency correction to the chain
/// (Direct's 0.85 on Hopper is Direct's only, `tuning.cc`).
///
/// ```
/// use gpucomm_sim::{Engine, Machine};
/// use gpucomm_sim::innet::collnet_chain_all_reduce;
/// let opts = gpucomm_topo::ClusterOptions { sharp: true, ..Default::default() };
/// let m = Machine::preset("dgx-h100").unwrap().with_cluster_options(&opts).unwrap();
/// let f = m.fabric(Engine::Nccl, 4).unwrap();
/// let t = collnet_chain_all_reduce(&f, 1 << 30).unwrap();
/// // Each GPU's NVLinks carry about 2 GiB each way (7/8 of it at the
/// // chain's ends): at least 2 x 7/8 GiB over 450 GB/s.
/// assert!(t.as_us() > 1.75 * (1u64 << 30) as f64 / 450e9 * 1e6);
/// ```
pub fn collnet_chain_all_reduce(fabric: &ClusterFabric, bytes: u64) -> Result<SimTime, SimError> {
    let sw = collnet_chain_eligible(fabric, Collective::AllReduce)?;
    let net = sharp_net(fabric, sw);
    let mut flows = FlowNet::new(&net.caps);
    let rpn = fabric.ranks_per_node();
    let hs = heads(fabric);
    let slice = bytes as f64 / hs.len() as f64;
    for (tag, &(k, h)) in hs.iter().enumerate() {
        let chain: Vec<usize> = (1..=rpn).map(|i| (h + i) % rpn).collect();
        for pair in chain.windows(2) {
            // Reduce up toward the head, broadcast back down.
            let up = fabric.route(pair[0], pair[1], 0)?;
            flows.start_flow(&up.links, slice, up.latency, tag as u64);
            let down = fabric.route(pair[1], pair[0], 0)?;
            flows.start_flow(&down.links, slice, down.latency, tag as u64);
        }
        let (links, lat) = stream(fabric, &net, k, h);
        flows.start_flow(&links, slice, lat, tag as u64);
    }
    Ok(run(flows) + nccl_latency(fabric, "collnet_chain", bytes))
}

/// NVLS with SHARP across nodes, all_reduce of `bytes` (see the module
/// documentation). The NVSwitch's links run at NCCL's NVLS efficiency, as
/// for NVLS inside a node.
pub fn nvls_sharp_all_reduce(fabric: &ClusterFabric, bytes: u64) -> Result<SimTime, SimError> {
    let sw = nvls_sharp_eligible(fabric, Collective::AllReduce)?;
    let mut net = sharp_net(fabric, sw);
    let nvlinks = nvls_links(fabric, &mut net.caps)?;
    let mut flows = FlowNet::new(&net.caps);
    let hs = heads(fabric);
    let slice = start_nvls_flows(&mut flows, &nvlinks, &hs, bytes as f64);
    for (tag, &(k, h)) in hs.iter().enumerate() {
        let (links, lat) = stream(fabric, &net, k, h);
        flows.start_flow(&links, slice, lat, tag as u64);
    }
    Ok(run(flows) + nccl_latency(fabric, "nvls", bytes))
}

/// Node 0's NVSwitch links, one `(up, down)` per GPU, their capacities in
/// `caps` scaled to NCCL's NVLS rate (`nvlsEfficiency` x (nChannels-1) /
/// nChannels, as for NVLS inside a node).
fn nvls_links(fabric: &ClusterFabric, caps: &mut [f64]) -> Result<Vec<(LinkId, LinkId)>, SimError> {
    let arch = fabric.machine.node.arch;
    let ch = model::nvls_channels(arch, fabric.nodes());
    let nvls = model::nvls_efficiency(arch) * (ch - 1.0) / ch;
    (0..fabric.ranks_per_node())
        .map(|g| {
            let (up, down) = fabric
                .nvswitch_links(g)
                .ok_or_else(|| SimError::Model("nvls needs an NVSwitch".into()))?;
            caps[up as usize] *= nvls;
            caps[down as usize] *= nvls;
            Ok((up, down))
        })
        .collect()
}

/// Starts node 0's NVLS flows for a buffer of `s` bytes: every GPU writes
/// its buffer into the switch and reads the result back; a head also reads
/// its reduced slice and multicasts the network's result (S/heads each
/// way). Returns the slice.
fn start_nvls_flows(
    flows: &mut FlowNet,
    nvlinks: &[(LinkId, LinkId)],
    hs: &[(usize, usize)],
    s: f64,
) -> f64 {
    let slice = s / hs.len() as f64;
    let hop = SimTime::from_us(2.0 * model::NVLINK_HOP_US);
    for (g, &(up, down)) in nvlinks.iter().enumerate() {
        let extra = if hs.iter().any(|&(_, h)| h == g) {
            slice
        } else {
            0.0
        };
        flows.start_flow(&[up], s + extra, hop, g as u64);
        flows.start_flow(&[down], s + extra, hop, g as u64);
    }
    slice
}

/// Whether the nodes' NVSwitch reduces (NVLS: 3rd-gen NVSwitch, Hopper or
/// later); `what` names the algorithm in the error.
pub fn nvls_capable(fabric: &ClusterFabric, what: &str) -> Result<(), SimError> {
    let m = &fabric.machine;
    let nvls = matches!(m.node.nvlink, NvFabric::Switch { nvls: true, .. })
        && model::nvls_efficiency(m.node.arch) > 0.0;
    if !nvls {
        return Err(SimError::Model(format!(
            "{} has no NVSwitch with in-switch reduction ({what} needs 3rd-gen NVSwitch, Hopper or later)",
            m.name
        )));
    }
    if fabric.ranks_per_node() < 2 {
        return Err(SimError::Model(format!(
            "{what} needs 2 or more GPUs in a node (NCCL disables NVLS below that: src/transport/nvls.cc)"
        )));
    }
    Ok(())
}

/// Whether NCCL's NVLSTree can run `collective` on `fabric`: all_reduce
/// across nodes of NVLS-capable GPUs (3rd-gen NVSwitch, Hopper or later)
/// with NICs.
pub fn nvls_tree_eligible(fabric: &ClusterFabric, collective: Collective) -> Result<(), SimError> {
    nvls_capable(fabric, "NVLSTree")?;
    let m = &fabric.machine;
    if collective != Collective::AllReduce {
        return Err(SimError::Model(
            "nvls_tree is an all_reduce algorithm (NCCL tuning.cc)".into(),
        ));
    }
    if fabric.nodes() < 2 {
        return Err(SimError::Model(
            "nvls_tree runs across nodes (NCCL disables it on one node): give --nodes 2 or more"
                .into(),
        ));
    }
    if m.node.nics == 0 {
        return Err(SimError::Model(format!("{} has no NIC", m.name)));
    }
    Ok(())
}

/// NCCL's NVLSTree all_reduce of `bytes` (see the module documentation):
/// NVLS inside the node at NCCL's NVLS efficiency, each head's slice
/// through the double binary tree between the nodes on its NIC; no faster
/// than NCCL's per-channel ceiling allows on one channel per head
/// (`perChMaxNVLSTreeBws`, [`model::nccl_channel_caps`]: Hopper
/// 57.7 GB/s of bus bandwidth per channel on 2 nodes, 45.5 beyond), as
/// the protocols run no faster than NCCL's caps
/// ([`model::nccl_protocol_bandwidth`]).
pub fn nvls_tree_all_reduce(fabric: &ClusterFabric, bytes: u64) -> Result<SimTime, SimError> {
    nvls_tree_eligible(fabric, Collective::AllReduce)?;
    Ok(nvls_tree_flows(fabric, bytes)?.max(nvls_tree_ceiling(fabric, bytes)))
}

/// NCCL's rating of NVLSTree all_reduce of `bytes` on `fabric`, as its
/// cost model (`tuning.cc`) has it: the bus bandwidth from the NVLS graph
/// NCCL's search finds across nodes
/// ([`model::nccl_nvls_graph_across`], one channel per head,
/// [`model::NcclNvlsGraph::tree_bus_gbps`]), over nccl-tests' bus factor
/// (NCCL's `nRanks / nsteps`), plus NCCL's latency. What the tuner
/// compares with the rings' and trees' ratings (the run itself is
/// [`nvls_tree_all_reduce`]).
///
/// ```
/// use gpucomm_sim::{Machine, innet::nvls_tree_model_time};
/// use gpucomm_sim::machine::Engine;
/// let m = Machine::preset("dgx-h100").unwrap();
/// // 2 nodes: 8 channels x 57.7 GB/s of bus bandwidth; 8 GiB in ~34.9 ms.
/// let t = nvls_tree_model_time(&m.fabric(Engine::Nccl, 2).unwrap(), 8 << 30).unwrap();
/// assert!((t.as_us() - 34_900.0).abs() < 100.0);
/// ```
pub fn nvls_tree_model_time(fabric: &ClusterFabric, bytes: u64) -> Result<SimTime, SimError> {
    nvls_tree_eligible(fabric, Collective::AllReduce)?;
    let node = &fabric.machine.node;
    let gpu_gbps = node
        .nccl_switch_gbps()
        .ok_or_else(|| SimError::Model("nvls_tree needs an NVSwitch".into()))?;
    let nic_path = node
        .nic_gbps
        .min(model::nccl_pcie_gbps(node.pcie_gen, node.pcie_width));
    let heads = heads(fabric).len();
    let bus = model::nccl_nvls_graph_across(node.arch, gpu_gbps, heads, nic_path)
        .map_or(0.0, |g| g.tree_bus_gbps(node.arch, fabric.nodes()));
    if bus <= 0.0 {
        return Err(SimError::Model(format!(
            "NCCL's search finds no NVLS graph across nodes for {heads} heads (NVLSTree needs 2 channels)"
        )));
    }
    Ok(nvls_tree_time_at(fabric, bytes, bus))
}

/// NVLSTree's all_reduce of `bytes` at `bus` GB/s of bus bandwidth (over
/// nccl-tests' bus factor, NCCL's `nRanks / nsteps`), plus NCCL's
/// latency.
fn nvls_tree_time_at(fabric: &ClusterFabric, bytes: u64, bus: f64) -> SimTime {
    let alg = bus / Collective::AllReduce.busbw_factor(fabric.ranks());
    nccl_latency(fabric, "nvls_tree", bytes) + SimTime::from_secs_f64(bytes as f64 / (alg * 1e9))
}

/// [`nvls_tree_all_reduce`]'s flows: the NVLS links and each head's tree
/// traffic, plus NCCL's latency.
fn nvls_tree_flows(fabric: &ClusterFabric, bytes: u64) -> Result<SimTime, SimError> {
    let mut caps = fabric.node_caps().to_vec();
    let nvlinks = nvls_links(fabric, &mut caps)?;
    let nodes = fabric.nodes();
    // Per head: its NIC sends and receives the tree's traffic, 2 slices
    // each way (1 on two nodes; every node does the same at once on a
    // non-blocking network: node 0 stands for all).
    let per_nic_slices = if nodes == 2 { 1.0 } else { 2.0 };
    // Behind leaf uplinks the collective also waits for the busiest
    // leaf's uplink, which carries the tree edges leaving the leaf (until
    // the thirty-first session a leaf's whole tree traffic, 2 slices per
    // node, was taken to cross: an upper bound with several nodes per
    // leaf, and with one where the node has fewer than 4 tree edges).
    let mut uplink = None;
    if let Some(worst) = tree_uplink_slices_per_gbps(fabric) {
        // Node 0's flows carry `per_nic_slices` per head: through a link of
        // this capacity they take the busiest uplink's time.
        let cap = per_nic_slices / worst;
        let up = caps.len() as LinkId;
        caps.push(cap);
        caps.push(cap);
        uplink = Some((up, up + 1));
    }
    let mut flows = FlowNet::new(&caps);
    let hs = heads(fabric);
    let slice = start_nvls_flows(&mut flows, &nvlinks, &hs, bytes as f64);
    let per_nic = per_nic_slices * slice;
    for (tag, &(k, h)) in hs.iter().enumerate() {
        let (mut out, lat_out) = fabric.gpu_to_net(h, k);
        let (mut back, lat_in) = fabric.net_to_gpu(k, h);
        if let Some((up, down)) = uplink {
            out.push(up);
            back.insert(0, down);
        }
        flows.start_flow(&out, per_nic, lat_out, tag as u64);
        flows.start_flow(&back, per_nic, lat_in, tag as u64);
    }
    Ok(run(flows) + nccl_latency(fabric, "nvls_tree", bytes))
}

/// Behind oversubscribed leaf uplinks: the most tree traffic any leaf's
/// uplink carries each way, in head slices per GB/s of the uplink. NVLSTree
/// moves half a head's slice each way on every edge of NCCL's double binary
/// tree between nodes (two trees, each with half the data), so a leaf's
/// uplink carries half a slice for every edge with one end in the leaf and
/// the other outside; edges inside a leaf stay below it. `None` without
/// uplinks or when one leaf holds every node.
fn tree_uplink_slices_per_gbps(fabric: &ClusterFabric) -> Option<f64> {
    let nodes = fabric.nodes();
    let leaves = fabric.leaf_of(nodes.max(1) - 1) + 1;
    if !fabric.has_uplinks() || leaves < 2 {
        return None;
    }
    let mut crossing = vec![0usize; leaves];
    for tree in 0..2 {
        for v in 0..nodes {
            if let (Some(p), _) = gpucomm_algo::nccl_double_tree(nodes, tree, v) {
                let (a, b) = (fabric.leaf_of(v), fabric.leaf_of(p));
                if a != b {
                    crossing[a] += 1;
                    crossing[b] += 1;
                }
            }
        }
    }
    (0..leaves)
        .filter_map(|l| Some(0.5 * crossing[l] as f64 / fabric.uplink_gbps(l)?))
        .reduce(f64::max)
}

/// [`nvls_tree_all_reduce`]'s ceiling: NCCL's per-channel bus bandwidth on
/// one channel per head, as algorithm bandwidth (over nccl-tests' bus
/// factor), plus NCCL's latency.
fn nvls_tree_ceiling(fabric: &ClusterFabric, bytes: u64) -> SimTime {
    let bus = model::nccl_channel_caps(fabric.machine.node.arch, fabric.nodes()).nvls_tree
        * heads(fabric).len().max(1) as f64;
    nvls_tree_time_at(fabric, bytes, bus)
}

/// NCCL's latency of the switch algorithm `algo` (all_reduce, Simple) on
/// `fabric` ([`model::nccl_model_latency_us`]).
pub(crate) fn nccl_latency(fabric: &ClusterFabric, algo: &str, bytes: u64) -> SimTime {
    let comm = crate::collective::nccl_comm(fabric, None);
    SimTime::from_us(model::nccl_model_latency_us(
        algo,
        model::Protocol::Simple,
        Collective::AllReduce,
        bytes,
        &comm,
    ))
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

    fn with_sharp(preset: &str) -> Machine {
        Machine::preset(preset)
            .unwrap()
            .with_cluster_options(&gpucomm_topo::ClusterOptions {
                sharp: true,
                ..Default::default()
            })
            .unwrap()
    }

    #[test]
    fn collnet_chain_loads_each_gpu_link_with_two_slices_per_chain() {
        // On one NVSwitch node's worth of links the chain is bound by each
        // GPU's NVLinks: 8 chains of S/8, every GPU sending up and down in
        // 6 of them and once as the head and the tail, 1.75 S each way.
        let f = with_sharp("dgx-h100").fabric(Engine::Nccl, 4).unwrap();
        let bytes = 1u64 << 30;
        let up = f.node_caps()[f.route(0, 1, 0).unwrap().links[0] as usize];
        let floor = 1.75 * bytes as f64 / (up * 1e9) * 1e6;
        let t = collnet_chain_all_reduce(&f, bytes).unwrap().as_us();
        assert!(t >= floor && t < floor * 1.05, "{t} vs {floor}");
        // Direct's 0.85 Hopper correction is Direct's: the chain has none,
        // and runs on nodes without an NVSwitch, where Direct does not.
        let pcie = with_sharp("pcie-8gpu").fabric(Engine::Nccl, 4).unwrap();
        assert!(collnet_eligible(&pcie, Collective::AllReduce).is_err());
        assert!(collnet_chain_all_reduce(&pcie, bytes).is_ok());
        assert!(collnet_chain_eligible(&pcie, Collective::AllGather).is_err());
        // Without SHARP switches, no CollNet of either kind.
        let plain = Machine::preset("pcie-8gpu")
            .unwrap()
            .fabric(Engine::Nccl, 4)
            .unwrap();
        assert!(collnet_chain_all_reduce(&plain, bytes).is_err());
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
        // NCCL's CollNet latency with one GPU per node: the tree's network
        // hwLat, 14 us (tuning.cc).
        let want = bytes as f64 / (slowest * 1e9) * 1e6 + lat.as_us() + 14.0;
        let got = collnet_all_reduce(&f, bytes).unwrap().as_us();
        assert!((got - want).abs() < 1e-3, "{got} vs {want}");
    }

    #[test]
    fn nvls_tree_is_bound_by_nvls_the_tree_and_nccls_per_channel_ceiling() {
        let m = Machine::preset("dgx-h100").unwrap();
        let bytes = 8u64 << 30;
        let s = bytes as f64;
        let arch = m.node.arch;
        // Each GPU's NVSwitch link at NCCL's NVLS rate carries S + S/8 (a
        // head: every GPU is one on a DGX H100); 16 NVLS channels on Hopper.
        let nvls =
            model::nccl_nvlink_gbps(arch) * 18.0 * model::nvls_efficiency(arch) * 15.0 / 16.0;
        let nvls_us = s * 9.0 / 8.0 / (nvls * 1e9) * 1e6;
        for (nodes, per_nic, per_channel) in
            [(2, s / 8.0, 57.7), (4, s / 4.0, 45.5), (16, s / 4.0, 45.5)]
        {
            let f = m.fabric(Engine::Nccl, nodes).unwrap();
            // The slowest link between a head and its NIC's port (PCIe at
            // NCCL's 48 GB/s on a DGX H100, under the NIC's 49.7).
            let (path, _) = f.gpu_to_net(0, 0);
            let nic = path
                .iter()
                .map(|&l| f.node_caps()[l as usize])
                .fold(f64::INFINITY, f64::min);
            let t = nvls_tree_all_reduce(&f, bytes).unwrap().as_us();
            let t_flows = nvls_tree_flows(&f, bytes).unwrap().as_us();
            // NCCL's latency (25 + 2 log2(nodes) x 20.9 us: hwLat NVLINK
            // and NET, tuning.cc) over the slower of the NVLS links and
            // the NIC's tree traffic (and a few hops), and over NCCL's
            // ceiling: 8 channels (one per head) of `per_channel` GB/s of
            // bus bandwidth, algorithm bandwidth x 2(n-1)/n.
            let levels = f64::from(nodes.trailing_zeros());
            let lat = 25.0 + 2.0 * levels * 20.9;
            let flows = nvls_us.max(per_nic / (nic * 1e9) * 1e6) + lat;
            let n = (8 * nodes) as f64;
            let ceiling = s / (8.0 * per_channel * 1e9 * n / (2.0 * (n - 1.0))) * 1e6 + lat;
            assert!(
                t_flows >= flows,
                "{nodes} nodes: {t_flows} us under the flows' {flows} us"
            );
            assert!(
                t_flows < flows + 5.0,
                "{nodes} nodes: {t_flows} us, flows {flows} us"
            );
            // The ceiling binds on DGX H100: 460.7 GB/s of bus bandwidth
            // on 2 nodes where the NVLS links allow 491, 363 on 4 where
            // the NIC paths allow 371.
            assert!(
                ceiling > flows,
                "{nodes} nodes: ceiling {ceiling}, flows {flows}"
            );
            assert!(
                (t - ceiling).abs() < 0.01,
                "{nodes} nodes: {t} us, ceiling {ceiling} us"
            );
        }
        // The flows: two nodes, NVLS binds (the NICs move S/8 each); four,
        // the NIC paths (S/4 each way at 48 GB/s is above S x 9/8 at 295
        // GB/s).
        let flows_of =
            |nodes| nvls_tree_flows(&m.fabric(Engine::Nccl, nodes).unwrap(), bytes).unwrap();
        assert!(flows_of(4).as_us() > 1.3 * flows_of(2).as_us());
        // Two DGX B200 nodes: Blackwell's ceiling (96 GB/s a channel, 768
        // for 8 heads) sits above what the flows allow (718), so the
        // flows' time stands.
        let b200 = Machine::preset("dgx-b200")
            .unwrap()
            .fabric(Engine::Nccl, 2)
            .unwrap();
        let t = nvls_tree_all_reduce(&b200, bytes).unwrap().as_us();
        let n = 16.0;
        let ceiling = s / (8.0 * 96.0 * 1e9 * n / (2.0 * (n - 1.0))) * 1e6 + 25.0 + 2.0 * 20.9;
        assert!(t > ceiling * 1.02, "B200: {t} us, ceiling {ceiling} us");
        assert_eq!(t, nvls_tree_flows(&b200, bytes).unwrap().as_us());
    }

    #[test]
    fn nvls_tree_needs_nvls_nodes_an_all_reduce_and_a_flat_network() {
        let why =
            |preset: &str, nodes: usize, c: Collective, opts: gpucomm_topo::ClusterOptions| {
                let m = Machine::preset(preset)
                    .unwrap()
                    .with_cluster_options(&opts)
                    .unwrap();
                let f = m.fabric(Engine::Nccl, nodes).unwrap();
                nvls_tree_eligible(&f, c).map_err(|e| e.to_string())
            };
        let flat = gpucomm_topo::ClusterOptions::default;
        assert!(why("dgx-h100", 2, Collective::AllReduce, flat()).is_ok());
        let e = why("dgx-a100", 2, Collective::AllReduce, flat()).unwrap_err();
        assert!(e.contains("NVSwitch with in-switch reduction"), "{e}");
        let e = why("dgx-h100", 1, Collective::AllReduce, flat()).unwrap_err();
        assert!(e.contains("--nodes 2"), "{e}");
        let e = why("dgx-h100", 2, Collective::AllGather, flat()).unwrap_err();
        assert!(e.contains("all_reduce"), "{e}");
        let mut one = Machine::preset("dgx-h100").unwrap();
        one.gpus_used = Some(1);
        let e = nvls_tree_eligible(&one.fabric(Engine::Nccl, 4).unwrap(), Collective::AllReduce)
            .unwrap_err()
            .to_string();
        assert!(e.contains("2 or more GPUs"), "{e}");
    }

    #[test]
    fn nvls_tree_behind_oversubscribed_uplinks_takes_the_uplink_share() {
        // One node per leaf: all of a node's tree traffic (8 heads x S/4
        // each way on 4 nodes) crosses its leaf's uplink, 8 x 50 x 0.994 /
        // 8 GB/s at 8:1; non-blocking, the NIC paths bind as on rails.
        let leaf = |os: f64| {
            let opts = gpucomm_topo::ClusterOptions {
                fabric: gpucomm_topo::Fabric::LeafSpine,
                nodes_per_leaf: 1,
                oversubscription: os,
                ..Default::default()
            };
            let m = Machine::preset("dgx-h100")
                .unwrap()
                .with_cluster_options(&opts)
                .unwrap();
            let f = m.fabric(Engine::Nccl, 4).unwrap();
            nvls_tree_all_reduce(&f, 1 << 30).unwrap().as_us()
        };
        let rails = nvls_tree_all_reduce(
            &Machine::preset("dgx-h100")
                .unwrap()
                .fabric(Engine::Nccl, 4)
                .unwrap(),
            1 << 30,
        )
        .unwrap()
        .as_us();
        assert!((leaf(1.0) - rails).abs() < 1.0, "{} vs {rails}", leaf(1.0));
        let s = (1u64 << 30) as f64;
        let uplink = 8.0 * 50.0 * model::IB_EFFICIENCY / 8.0;
        let bound = 2.0 * s / (uplink * 1e9) * 1e6;
        let t = leaf(8.0);
        assert!(
            t >= bound && t < bound + 200.0,
            "{t} us, uplink bound {bound} us"
        );
    }
}
