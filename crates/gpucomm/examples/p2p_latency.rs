//! Point-to-point latency between two in-process ranks: a ping-pong of
//! 8-byte `send`/`recv` calls, beside `sendrecv` (a scheduled call) of the
//! same size. `cargo run --release -p gpucomm --example p2p_latency`.

use gpucomm::{Call, CallOptions, Communicator};
use std::time::Instant;

fn main() {
    let comms = Communicator::in_process(2).expect("two in-process ranks");
    let n = 200_000;
    std::thread::scope(|s| {
        for c in &comms {
            s.spawn(move || {
                let r = c.rank();
                let mut buf = [0u8; 8];
                let t = Instant::now();
                for _ in 0..n {
                    if r == 0 {
                        c.send(&buf, 1).unwrap();
                        c.recv(&mut buf, 1).unwrap();
                    } else {
                        c.recv(&mut buf, 0).unwrap();
                        c.send(&buf, 0).unwrap();
                    }
                }
                let round_trip = t.elapsed().as_secs_f64() / n as f64 * 1e6;
                let mut out = [0u8; 8];
                let t = Instant::now();
                for _ in 0..n {
                    let call = Call::SendRecv { shift: 1 };
                    c.run(call, Some(&buf[..]), &mut out, &CallOptions::default())
                        .unwrap();
                }
                let sendrecv = t.elapsed().as_secs_f64() / n as f64 * 1e6;
                if r == 0 {
                    println!(
                        "8 B send+recv round trip {round_trip:.2} us; sendrecv {sendrecv:.2} us per call"
                    );
                }
            });
        }
    });
}
