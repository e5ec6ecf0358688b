//! Chrome traces: the streamed writer (`write_chrome_trace`, which the CLI
//! uses so that a trace of hundreds of ranks does not hold millions of JSON
//! values: a 504-rank all_gather's ran out of memory) writes the same
//! document as the one built in memory.

mod common;

use gpucomm_algo::Collective;
use gpucomm_sim::collective::{AlgoChoice, CollOptions, simulate};
use gpucomm_sim::fabric::Fabric;
use gpucomm_sim::model::Protocol;
use gpucomm_sim::trace::{chrome_trace, document, write_chrome_trace};

#[test]
fn the_streamed_trace_is_the_built_one() {
    let f = common::fabric("dgx-h100", 2);
    let opts = CollOptions {
        algorithm: AlgoChoice::parse("ring").into(),
        protocol: Some(Protocol::Simple).into(),
        trace_ranks: 16,
        ..Default::default()
    };
    let r = simulate(&f, Collective::AllGather, 4 << 20, &opts).unwrap();
    let run = r.exec.expect("a schedule ran");
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
