//! Loading and absence: runs everywhere, GPU or not.

use gpucomm_cuda::{Error, Gpu, ProbeConfig};

fn probe_libs(libs: &[&str]) -> Result<Gpu, Error> {
    Gpu::probe_with(&ProbeConfig {
        driver_libraries: libs.iter().map(|s| s.to_string()).collect(),
    })
}

#[test]
fn a_missing_driver_is_a_typed_no_gpu_with_the_reason() {
    let e = probe_libs(&["libgpucomm-test-missing-cuda.so.1"]).unwrap_err();
    assert!(e.is_no_gpu(), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.starts_with("no GPU: cannot load the CUDA driver"),
        "{msg}"
    );
    assert!(msg.contains("libgpucomm-test-missing-cuda.so.1"), "{msg}");
}

#[test]
fn a_library_that_is_not_the_driver_is_refused_by_symbol() {
    let e = probe_libs(&["libc.so.6"]).unwrap_err();
    assert!(e.is_no_gpu());
    assert!(e.to_string().contains("no symbol cuInit"), "{e}");
}

#[test]
fn the_default_probe_never_panics_and_agrees_with_itself() {
    let a = Gpu::probe();
    let b = Gpu::probe();
    match (&a, &b) {
        (Ok(x), Ok(y)) => assert_eq!(x.device_count(), y.device_count()),
        (Err(x), Err(y)) => {
            assert!(x.is_no_gpu(), "{x:?}");
            assert_eq!(x.to_string(), y.to_string());
            assert!(x.to_string().starts_with("no GPU: "), "{x}");
            assert!(!x.to_string().contains("no GPU: no GPU"), "{x}");
            eprintln!("this machine: {x}");
        }
        _ => panic!("two probes disagree: {a:?} / {b:?}"),
    }
}
