//! Chrome traces: the streamed writer (`write_chrome_trace`, which the CLI
//! uses so that a trace of hundreds of ranks does not hold millions of JSON
//! values: a 504-rank all_gather's ran out of memory) writes the same
//! document as the one built in memory.

mod common;

use gpucomm_algo::Collective;
use gpucomm_sim::collective::{AlgoChoice, CollOptions, simulate};
use gpucomm_sim::exec::ExecResult;
use gpucomm_sim::fabric::Fabric;
use gpucomm_sim::machine::ClusterFabric;
use gpucomm_sim::model::Protocol;
use gpucomm_sim::trace::{chrome_trace, document, write_chrome_trace};

/// A ring `c` of `bytes` under Simple on 2 DGX H100 nodes, every rank
/// traced: the fabric and the run.
fn traced(c: Collective, bytes: u64) -> (ClusterFabric, ExecResult) {
    let f = common::fabric("dgx-h100", 2);
    let opts = CollOptions {
        algorithm: AlgoChoice::parse("ring").into(),
        protocol: Some(Protocol::Simple).into(),
        trace_ranks: 16,
        ..Default::default()
    };
    let r = simulate(&f, c, bytes, &opts).unwrap();
    (f, r.exec.expect("a schedule ran"))
}

#[test]
fn the_streamed_trace_is_the_built_one() {
    let (f, run) = traced(Collective::AllGather, 4 << 20);
    assert!(!run.rank_spans.is_empty() && !run.link_spans.is_empty());
    let name = |l: u32| f.link_name(l);
    let built = document(chrome_trace(&run, &name, 5.0));
    let mut bytes = Vec::new();
    write_chrome_trace(&mut bytes, &run, &name, 5.0).unwrap();
    // The same bytes as the built document serialized at once.
    let whole = serde_json::to_vec(&built).unwrap();
    let first_difference = bytes.iter().zip(&whole).position(|(a, b)| a != b);
    assert!(
        bytes.len() == whole.len() && first_difference.is_none(),
        "{} against {} bytes, first difference at {first_difference:?}",
        bytes.len(),
        whole.len()
    );
    let streamed: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    // Every span of the run is an event: rank and link tracks, both kinds.
    let events = streamed["traceEvents"].as_array().unwrap();
    let spans = events.iter().filter(|e| e["ph"] == "X").count();
    assert_eq!(spans, run.rank_spans.len() + run.link_spans.len());
    assert!(events.iter().any(|e| e["pid"] == 1 && e["ph"] == "X"));
    assert!(events.iter().any(|e| e["pid"] == 0 && e["ph"] == "X"));
}

/// A track's slices must nest, or Perfetto drops or misplaces them; a
/// rank's transfers overlap (channels at once, a connection's next chunk
/// while the last is in flight), so they spread over lanes of the rank's
/// track, and no two slices of one lane overlap.
#[test]
fn no_two_slices_of_a_track_overlap() {
    let (f, run) = traced(Collective::AllReduce, 64 << 20);
    let name = |l: u32| f.link_name(l);
    let doc = document(chrome_trace(&run, &name, 0.0));
    let events = doc["traceEvents"].as_array().unwrap();
    let mut tracks: std::collections::BTreeMap<(u64, u64), Vec<(f64, f64)>> = Default::default();
    for e in events.iter().filter(|e| e["ph"] == "X") {
        let key = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
        let ts = e["ts"].as_f64().unwrap();
        tracks
            .entry(key)
            .or_default()
            .push((ts, ts + e["dur"].as_f64().unwrap()));
    }
    for (key, spans) in &mut tracks {
        spans.sort_by(|a, b| a.partial_cmp(b).unwrap());
        for w in spans.windows(2) {
            assert!(
                w[1].0 >= w[0].1 - 1e-6,
                "track {key:?}: {:?} overlaps {:?}",
                w[0],
                w[1]
            );
        }
    }
    // The run's transfers did overlap: a rank's track has several lanes,
    // named after the rank, and every span carries its rank.
    let lanes: Vec<&str> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == 0)
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert!(
        lanes.contains(&"rank 0") && lanes.contains(&"rank 0 #2"),
        "{lanes:?}"
    );
    assert!(lanes.iter().all(|l| l.starts_with("rank ")), "{lanes:?}");
    for r in 0..16 {
        assert!(
            lanes.contains(&format!("rank {r}").as_str()),
            "rank {r}: {lanes:?}"
        );
    }
    let spans = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["pid"] == 0)
        .count();
    assert_eq!(spans, run.rank_spans.len());
    assert!(
        events
            .iter()
            .filter(|e| e["ph"] == "X" && e["pid"] == 0)
            .all(|e| e["args"]["rank"].as_u64().is_some_and(|r| r < 16))
    );
}
