//! `gpucomm algo` end to end: bad input is refused with a clear message,
//! and every option `tune` offers changes what it ranks.

mod common;

use std::time::Duration;

use common::{Output, gpucomm};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(60);

fn run(args: &[&str]) -> Output {
    gpucomm(args, LIMIT)
}

fn json(args: &[&str]) -> Value {
    let out = run(args);
    let text = out.assert_ok();
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}\n{}", out.dump()))
}

/// `algo tune ARGS --json --top 1000`: the best schedule and every
/// candidate's prediction.
fn tune(args: &[&str]) -> (Value, Vec<Value>) {
    let mut argv = vec!["algo", "tune"];
    argv.extend_from_slice(args);
    argv.extend_from_slice(&["--json", "--top", "1000"]);
    let v = json(&argv);
    let rows = v["candidates"].as_array().expect("candidates").clone();
    assert!(!rows.is_empty(), "{argv:?}: {v}");
    (v["best"].clone(), rows)
}

#[test]
fn tune_ranks_only_the_algorithm_channels_and_chunk_given() {
    // All three pinned: one candidate, the schedule `show` builds from the
    // same options, with the same prediction.
    let (best, rows) = tune(&["all_reduce", "-a", "ring", "-c", "2", "--chunk", "256"]);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(best["algorithm"], "ring", "{best}");
    assert_eq!(best["channels"], 2, "{best}");
    assert_eq!(best["chunk_elems"], 64, "{best}");
    let fixed = ["all_reduce", "-a", "ring", "-c", "2", "--chunk", "256"];
    let shown = json(&[&["algo", "show"][..], &fixed, &["--json"]].concat());
    assert_eq!(rows[0], shown["prediction"]);
    let text = run(&[&["algo", "tune"][..], &fixed].concat());
    assert!(
        text.assert_ok()
            .contains("best: ring with 2 channel(s), chunk 64 elements"),
        "{}",
        text.dump()
    );

    // Each alone restricts its own choice and leaves the others free.
    let (best, rows) = tune(&["all_reduce", "-n", "8", "-b", "64M", "-a", "tree"]);
    assert_eq!(best["algorithm"], "tree");
    assert!(rows.iter().all(|r| r["algorithm"] == "tree"), "{rows:?}");
    assert!(rows.iter().any(|r| r["channels"] != rows[0]["channels"]));
    assert!(
        rows.iter()
            .any(|r| r["chunk_elems"] != rows[0]["chunk_elems"])
    );

    let (best, rows) = tune(&["all_reduce", "-n", "8", "-b", "64M", "--chunk", "1M"]);
    assert_eq!(best["chunk_elems"], 1 << 18);
    assert!(rows.iter().all(|r| r["chunk_elems"] == 1 << 18), "{rows:?}");
    assert!(rows.iter().any(|r| r["algorithm"] != rows[0]["algorithm"]));
    let (_, rows) = tune(&["all_reduce", "-n", "8", "-b", "64M", "--chunk", "0"]);
    assert!(rows.iter().all(|r| r["chunk_elems"] == 0), "{rows:?}");

    // Channels given: exactly the rows the free tuner has for that count.
    let free = tune(&["all_reduce", "-n", "8", "-b", "64M"]).1;
    for c in [2u64, 3, 32] {
        let cs = c.to_string();
        let (best, rows) = tune(&["all_reduce", "-n", "8", "-b", "64M", "-c", &cs]);
        assert_eq!(best["channels"], c);
        let want: Vec<&Value> = free.iter().filter(|r| r["channels"] == c).collect();
        if c != 3 {
            assert_eq!(rows.iter().collect::<Vec<_>>(), want, "-c {c}");
        }
        assert!(rows.iter().all(|r| r["channels"] == c), "{rows:?}");
    }
    // More than the tuner tries, within --max-channels.
    let (best, rows) = tune(&["all_reduce", "-n", "8", "-c", "64", "--max-channels", "64"]);
    assert_eq!(best["channels"], 64);
    assert!(rows.iter().all(|r| r["channels"] == 64), "{rows:?}");
    // Intra-node parts reach the prediction (a ring broadcast on two nodes).
    let args = [
        "broadcast",
        "-n",
        "4",
        "--ranks-per-node",
        "2",
        "-b",
        "256",
        "--chunk",
        "64",
        "-a",
        "ring",
        "-c",
        "1",
    ];
    let (_, one) = tune(&args);
    let mut sliced = args.to_vec();
    sliced.extend_from_slice(&["--intra-slices", "4"]);
    let (best, four) = tune(&sliced);
    assert_eq!(best["intra_slices"], 4, "{best}");
    assert_ne!(one[0]["steps"], four[0]["steps"]);
    // `algo show` of the same schedule (tune's -c 1 is show's default).
    let mut show = vec!["algo", "show"];
    show.extend_from_slice(&args[..args.len() - 2]);
    show.extend_from_slice(&["--intra-slices", "4", "--json"]);
    let shown = json(&show);
    assert_eq!(four[0], shown["prediction"]);
}

#[test]
fn tune_refuses_what_show_and_check_refuse() {
    for cmd in ["show", "check", "tune"] {
        run(&["algo", cmd, "all_reduce", "-a", "bruck"])
            .assert_fails(2, "algorithm bruck does not implement all_reduce");
        run(&["algo", cmd, "all_reduce", "-a", "nosuch"]).assert_fails(2, "unknown algorithm");
        run(&["algo", cmd, "all_reduce", "--chunk", "1X"]).assert_fails(2, "1X");
        run(&["algo", cmd, "all_reduce", "-c", "0"]).assert_fails(2, "0 is not in 1..");
    }
    // More channels than the engine runs.
    run(&["algo", "tune", "all_reduce", "-c", "64"])
        .assert_fails(2, "--channels 64 is more than --max-channels 32");
    // Options that only `show` reads are not offered to tune.
    run(&["algo", "tune", "all_reduce", "--deps"]).assert_fails(2, "--deps");
    run(&["algo", "tune", "all_reduce", "--max-ranks", "2"]).assert_fails(2, "--max-ranks");
}

#[test]
fn tune_refuses_model_figures_that_are_not_finite() {
    let lat = ["--intra-latency-us", "--inter-latency-us", "--overhead-us"];
    let bw = ["--intra-gbps", "--inter-gbps", "--channel-gbps"];
    for opt in lat.iter().chain(&bw) {
        for bad in ["nan", "NaN", "inf", "-inf", "-1"] {
            let arg = format!("{opt}={bad}");
            run(&["algo", "tune", "all_reduce", &arg]).assert_fails(2, opt);
        }
    }
    for opt in bw {
        run(&["algo", "tune", "all_reduce", &format!("{opt}=0")]).assert_fails(2, opt);
        // Below 1 B/s the model used 1 B/s, echoing the value given.
        run(&["algo", "tune", "all_reduce", &format!("{opt}=1e-300")])
            .assert_fails(2, "from 1e-9 (1 B/s) to 1e9 GB/s");
    }
    // Finite, but every time printed inf.
    for opt in lat {
        run(&["algo", "tune", "all_reduce", &format!("{opt}=1e308")])
            .assert_fails(2, "from 0 to 1e12 us");
    }
    // Zero latency and overhead are a model (a bandwidth-only one).
    let (_, rows) = tune(&[
        "all_reduce",
        "--ranks-per-node",
        "2",
        "--intra-latency-us",
        "0",
        "--inter-latency-us",
        "0",
        "--overhead-us",
        "0",
    ]);
    for r in &rows {
        let t = r["time_us"].as_f64().unwrap_or_else(|| panic!("{r}"));
        assert!(t.is_finite() && t >= 0.0, "{r}");
    }
}

#[test]
fn tune_refuses_oversized_problems_at_once() {
    for args in [
        &["all_reduce", "-n", "100000"][..],
        &["all_reduce", "-n", "1000000", "--ranks-per-node", "8"][..],
        &["all_reduce", "-n", "10000"][..],
    ] {
        let mut argv = vec!["algo", "tune"];
        argv.extend_from_slice(args);
        let out = run(&argv);
        out.assert_fails(2, "too many to tune here");
        assert!(out.elapsed < Duration::from_secs(5), "{}", out.dump());
    }
}

#[test]
fn show_says_what_max_ranks_does() {
    run(&["algo", "show", "all_reduce", "--max-ranks", "0"]).assert_fails(2, "--max-ranks");
    let out = run(&["algo", "show", "all_reduce", "--max-ranks", "2"]);
    assert!(
        out.assert_ok().contains("(first 2 ranks shown)"),
        "{}",
        out.dump()
    );
    let help = run(&["algo", "show", "--help"]);
    let help = help.assert_ok();
    assert!(!help.contains("without a word"), "{help}");
    assert!(help.contains("0 is refused"), "{help}");
}

#[test]
fn show_without_an_algorithm_takes_one_that_implements_the_collective() {
    // The ring where it implements the collective; otherwise the first that
    // does (it said "ring does not implement all_to_all").
    for (coll, want) in [
        ("all_reduce", "ring"),
        ("all_to_all", "direct"),
        ("gather", "direct"),
        ("scatter", "direct"),
        ("sendrecv", "direct"),
        ("barrier", "recursive_doubling"),
    ] {
        let v = json(&["algo", "show", coll, "--json"]);
        assert_eq!(v["schedule"]["algorithm"], want, "{coll}");
    }
}

#[test]
fn tune_refuses_to_list_no_candidates() {
    // --top 0 printed an empty table, then a best nobody was shown.
    for extra in [&[][..], &["--json"][..]] {
        let mut argv = vec!["algo", "tune", "all_reduce", "--top", "0"];
        argv.extend_from_slice(extra);
        let out = run(&argv);
        out.assert_fails(2, "--top");
        assert!(out.stderr.contains("0 is not in 1.."), "{}", out.dump());
        assert!(out.stdout.is_empty(), "{}", out.dump());
    }
    let (_, rows) = tune(&["all_reduce"]);
    let mut argv = vec!["algo", "tune", "all_reduce", "--top", "1", "--json"];
    let one = json(&argv);
    assert_eq!(one["candidates"].as_array().unwrap().len(), 1, "{one}");
    assert_eq!(one["candidates"][0], rows[0]);
    argv.pop();
    let text = run(&argv);
    assert!(text.assert_ok().contains("best: "), "{}", text.dump());
}

#[test]
fn huge_step_counts_and_odd_options_are_refused_not_wrapped_or_ignored() {
    // 8 GiB in one-byte chunks: the model's step count wrapped to 0 in
    // u32, so tune ranked it best at 0 us and check tried to build it
    // (an abort on a 1 TiB allocation).
    let huge = [
        "all_reduce",
        "-n",
        "2",
        "-b",
        "8G",
        "--elem-size",
        "1",
        "--chunk",
        "1",
        "-a",
        "ring",
    ];
    let (_, rows) = tune(&[&huge[..], &["-c", "1"]].concat());
    assert!(
        rows.iter().all(|r| r["time_us"].as_f64().unwrap() > 1e9),
        "{rows:?}"
    );
    for cmd in ["check", "show"] {
        run(&[&["algo", cmd][..], &huge[..]].concat()).assert_fails(2, "too many");
    }
    // Channels multiply the steps (the estimate left them out: 7.3 M steps
    // were shown against a 2 M limit, 63 M checked against 50 M).
    run(&[
        "algo",
        "show",
        "all_reduce",
        "-n",
        "8",
        "-b",
        "1M",
        "-c",
        "65535",
    ])
    .assert_fails(2, "too many");
    run(&[
        "algo",
        "check",
        "all_reduce",
        "-n",
        "16",
        "-b",
        "16M",
        "-c",
        "65535",
        "-a",
        "ring",
    ])
    .assert_fails(2, "too many");
    // show's printing options were accepted by check and ignored.
    run(&["algo", "check", "all_reduce", "--deps"]).assert_fails(2, "--deps applies to algo show");
    run(&["algo", "check", "all_reduce", "--max-ranks", "3"])
        .assert_fails(2, "--max-ranks 3 applies to algo show");
    // A barrier moves no data, so --chunk is no advice for it.
    let out = run(&["algo", "check", "barrier", "-n", "65535", "-a", "direct"]);
    out.assert_fails(2, "too many to check here (use fewer ranks)");
    run(&[
        "algo",
        "check",
        "all_to_all",
        "-n",
        "4",
        "--elem-size",
        "4611686018427387904",
        "-b",
        "0",
    ])
    .assert_fails(
        2,
        "--ranks 4 and --elem-size 4611686018427387904: all_to_all's block",
    );
    run(&[
        "algo",
        "check",
        "all_reduce",
        "-n",
        "3",
        "--ranks-per-node",
        "100",
    ])
    .assert_fails(2, "--ranks-per-node 100 is more than the 3 ranks");
    run(&["algo", "check", "all_reduce", "--root", "1"]).assert_fails(2, "has no root");
    run(&["algo", "check", "broadcast", "--shift", "2"]).assert_fails(2, "--shift");
    // --intra-slices cuts only a ring broadcast's or reduce's hops.
    run(&["algo", "tune", "all_reduce", "--intra-slices", "4"]).assert_fails(
        2,
        "--intra-slices cuts the hops of a ring broadcast or reduce; all_reduce has none",
    );
    run(&[
        "algo",
        "check",
        "reduce",
        "-a",
        "tree",
        "--intra-slices",
        "4",
    ])
    .assert_fails(2, "tree has none");
    // Where they apply they still work.
    run(&["algo", "check", "broadcast", "-n", "4", "--root", "3"]).assert_ok();
    run(&["algo", "check", "sendrecv", "-n", "4", "--shift", "3"]).assert_ok();
    run(&["algo", "check", "reduce", "--intra-slices", "4"]).assert_ok();
}

#[test]
fn check_of_every_algorithm_skips_those_too_large_and_checks_the_rest() {
    // A direct barrier of 4096 ranks (67 M steps) refused the whole
    // check, so recursive doubling's 12 steps went unchecked.
    let args = ["algo", "check", "barrier", "-n", "4096"];
    let out = run(&args);
    let stdout = out.assert_ok();
    let stderr = &out.stderr;
    assert!(
        stdout.contains("check: ok (recursive_doubling barrier)"),
        "{stdout}"
    );
    assert!(
        stderr.contains("note: not checked: direct barrier on 4096 ranks"),
        "{stderr}"
    );
    let v = json(&[&args[..], &["--json"]].concat());
    let rows = v.as_array().unwrap();
    let direct = rows.iter().find(|r| r["algorithm"] == "direct").unwrap();
    assert!(direct["ok"].is_null(), "{direct}");
    assert!(
        direct["skipped"].as_str().unwrap().contains("too many"),
        "{direct}"
    );
    let rd = rows
        .iter()
        .find(|r| r["algorithm"] == "recursive_doubling")
        .unwrap();
    assert_eq!(rd["ok"], true, "{rd}");
    // Asked for by name, the large one is still refused.
    run(&[&args[..], &["-a", "direct"]].concat()).assert_fails(2, "too many to check");
    // When every algorithm is too large, the check is refused.
    let out = run(&["algo", "check", "barrier", "-n", "2097152"]);
    out.assert_fails(
        2,
        "no algorithm's barrier on 2097152 ranks is small enough to check here",
    );
    assert!(
        out.stderr
            .contains("note: direct barrier on 2097152 ranks has about 17592186044416 steps"),
        "{}",
        out.dump()
    );
}

#[test]
fn check_refuses_what_would_take_too_much_memory_or_time() {
    // Few steps, but the checker's state grows as n^2: a bruck all_gather
    // of 65536 ranks (16 steps each) was killed for memory.
    run(&[
        "algo",
        "check",
        "all_gather",
        "-n",
        "65536",
        "-b",
        "1M",
        "-a",
        "bruck",
    ])
    .assert_fails(
        2,
        "needs about 288.5 GiB to check, more than the 4 GiB allowed here",
    );
    run(&[
        "algo",
        "check",
        "reduce_scatter",
        "-n",
        "131072",
        "-b",
        "1M",
        "-a",
        "halving_doubling",
    ])
    .assert_fails(2, "more than the 4 GiB allowed");
    // A barrier's check is steps x ranks of work: 262144 ranks ran past
    // 300 s, 2^20 would have run for hours.
    run(&[
        "algo",
        "check",
        "barrier",
        "-n",
        "262144",
        "-a",
        "recursive_doubling",
    ])
    .assert_fails(
        2,
        "too large to check here: its steps x its ranks come to about 2.6e12",
    );
}

/// A problem refused is refused in the options' words, not gpucomm-algo's
/// field names ("invalid problem: count 25000000000000 x 100000000 ranks x
/// 4 bytes is too large", "ranks_per_node (3) must divide nranks (8)").
#[test]
fn problem_errors_name_the_options() {
    let refused = [
        (
            "broadcast -n 8 --root 9",
            "--root 9: out of range for 8 ranks (0 to 7)",
        ),
        (
            "all_reduce -n 8 --ranks-per-node 3 -a hierarchical",
            "hierarchical does not implement all_reduce: 8 ranks are not whole nodes of 3",
        ),
        (
            "all_reduce -n 8 -b 35184372080644 -a ring",
            "--bytes 35184372080644 is too large for all_reduce on 8 ranks (at most 35184372080640)",
        ),
        (
            "all_gather -n 65536 -b 64T",
            "--bytes 70368744177664 is too large for all_gather on 65536 ranks (at most 4294967292)",
        ),
        (
            "all_reduce -n 18446744073709551615 -b 4",
            "--ranks 18446744073709551615: too many for all_reduce (a problem holds at most \
             281474976645120 bytes)",
        ),
        (
            "gather -n 18446744073709551615",
            "--ranks 18446744073709551615 and --elem-size 4: gather's block",
        ),
        // 2 x n x n wrapped to 0 steps: the check ran and ran out of memory.
        (
            "barrier -n 4294967296 -a direct",
            "direct barrier on 4294967296 ranks has more than 18446744073709551615 steps",
        ),
    ];
    for (args, says) in refused {
        let argv: Vec<&str> = ["algo", "check"]
            .into_iter()
            .chain(args.split(' '))
            .collect();
        run(&argv).assert_fails(2, says);
    }
    // The largest size the message offers is taken (its schedule is only
    // sized, not built: show refuses it as too many steps to print).
    let most = "all_reduce -n 8 -b 35184372080640 -a ring";
    let argv: Vec<&str> = ["algo", "tune"]
        .into_iter()
        .chain(most.split(' '))
        .collect();
    run(&argv).assert_ok();
}

/// Every refusal of `algo`'s options is a bad command line (exit 2), found
/// by the command or by gpucomm-algo (they exited 1).
#[test]
fn a_bad_command_line_exits_2() {
    for args in [
        &[
            "algo",
            "show",
            "all_reduce",
            "--algorithm",
            "foo",
            "-n",
            "4",
        ][..],
        &["algo", "show", "foo", "-n", "4"],
        &["algo", "check", "all_reduce", "-n", "0"],
        &["algo", "tune", "broadcast", "-n", "4", "--root", "4"],
        &["algo", "check", "all_reduce", "-n", "4", "-b", "6"],
    ] {
        let out = run(args);
        assert_eq!(out.code, Some(2), "{args:?}: {}", out.dump());
        assert!(out.stderr.contains("gpucomm: error: "), "{}", out.dump());
    }
}
