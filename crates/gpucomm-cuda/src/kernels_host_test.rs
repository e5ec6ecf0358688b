//! Compiles the generated kernel source with the host C++ compiler (through
//! a prelude that maps the CUDA spellings), runs every kernel on the CPU and
//! compares it with the Rust reference. This checks the arithmetic of the
//! generated code without a GPU; NVRTC and launches are checked by the GPU
//! tests.

#![allow(unsafe_code)]

use std::ffi::{CString, c_void};
use std::path::PathBuf;

use gpucomm_algo::ReduceOp;
use half::{bf16, f16};

use super::{DType, divide_kernel_name, host_source, reduce_kernel_name};
use crate::reference;

const EXTRA: &str = r#"
extern "C" unsigned short gc_test_f2h(float f) { return gc_f2h(f); }
extern "C" float gc_test_h2f(unsigned short h) { return gc_h2f(h); }
extern "C" unsigned short gc_test_f2b(float f) { return gc_f2b(f); }
extern "C" float gc_test_b2f(unsigned short h) { return gc_b2f(h); }
"#;

struct HostLib(*mut c_void);

impl HostLib {
    /// Builds the kernels as a shared library; `None` (test skipped, with a
    /// message) when no C++ compiler is installed.
    fn build() -> Option<HostLib> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir: PathBuf =
            std::env::temp_dir().join(format!("gpucomm-cuda-host-{}-{k}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("kernels.cpp");
        let lib = dir.join("kernels.so");
        std::fs::write(&src, format!("{}{EXTRA}", host_source())).unwrap();
        for cxx in ["c++", "g++", "clang++"] {
            let out = std::process::Command::new(cxx)
                .args([
                    "-O1",
                    "-shared",
                    "-fPIC",
                    "-fno-fast-math",
                    "-ffp-contract=off",
                    "-o",
                ])
                .arg(&lib)
                .arg(&src)
                .output();
            let Ok(out) = out else { continue };
            assert!(
                out.status.success(),
                "{cxx} rejected the generated source:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let c = CString::new(lib.to_str().unwrap()).unwrap();
            // SAFETY: loading the library we just built (its only
            // initialisers are the C++ runtime's).
            let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            assert!(!h.is_null(), "dlopen of the host-built kernels failed");
            let _ = std::fs::remove_dir_all(&dir);
            return Some(HostLib(h));
        }
        eprintln!(
            "SKIPPED: no host C++ compiler (c++, g++, clang++) to check the generated kernels"
        );
        None
    }

    fn sym(&self, name: &str) -> *mut c_void {
        let c = CString::new(name).unwrap();
        // SAFETY: handle from a successful dlopen, never closed.
        let p = unsafe { libc::dlsym(self.0, c.as_ptr()) };
        assert!(
            !p.is_null(),
            "kernel {name} missing from the generated source"
        );
        p
    }
}

type ReduceFn = unsafe extern "C" fn(*mut c_void, *const c_void, *const c_void, u64);
type DivFn = unsafe extern "C" fn(*mut c_void, u64, u64);
type CopyFn = unsafe extern "C" fn(*mut u8, *const u8, u64);

#[test]
fn generated_kernels_equal_the_reference_on_the_host() {
    let Some(lib) = HostLib::build() else { return };
    let n = 4099;
    for dtype in DType::ALL {
        let a = reference::test_data(dtype, n, 1);
        let mut b = reference::test_data(dtype, n, 2);
        // Include equal operands and zeros.
        b[..dtype.size() * 4].copy_from_slice(&a[..dtype.size() * 4]);
        b[dtype.size() * 4..dtype.size() * 8].fill(0);
        for op in ReduceOp::ALL {
            let mut want = vec![0u8; a.len()];
            reference::reduce(op, dtype, &mut want, &a, &b).unwrap();
            let mut got = vec![0u8; a.len()];
            // SAFETY: the symbol is the generated kernel with this C
            // signature; all buffers hold `n` elements.
            unsafe {
                let f: ReduceFn = std::mem::transmute(lib.sym(&reduce_kernel_name(op, dtype)));
                f(
                    got.as_mut_ptr().cast(),
                    a.as_ptr().cast(),
                    b.as_ptr().cast(),
                    n as u64,
                );
            }
            assert_eq!(got, want, "{} {dtype}", op.name());
            // In place (dst == a), as the runtime accumulates.
            let mut acc = a.clone();
            // SAFETY: as above; dst aliases a, which the kernel allows.
            unsafe {
                let f: ReduceFn = std::mem::transmute(lib.sym(&reduce_kernel_name(op, dtype)));
                f(
                    acc.as_mut_ptr().cast(),
                    acc.as_ptr().cast(),
                    b.as_ptr().cast(),
                    n as u64,
                );
            }
            assert_eq!(acc, want, "in place {} {dtype}", op.name());
        }
        for ranks in [1u64, 2, 3, 7, 127] {
            let mut want = a.clone();
            reference::divide(dtype, &mut want, ranks).unwrap();
            let mut got = a.clone();
            // SAFETY: generated divide kernel over `n` elements.
            unsafe {
                let f: DivFn = std::mem::transmute(lib.sym(&divide_kernel_name(dtype)));
                f(got.as_mut_ptr().cast(), n as u64, ranks);
            }
            assert_eq!(got, want, "div {dtype} by {ranks}");
        }
    }
}

#[test]
fn generated_copy_kernels_copy() {
    let Some(lib) = HostLib::build() else { return };
    let src: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    let mut dst = vec![0u8; 4096];
    // SAFETY: byte copy of 4093 bytes within both buffers.
    unsafe {
        let f: CopyFn = std::mem::transmute(lib.sym(super::COPY_BYTES_KERNEL));
        f(dst.as_mut_ptr(), src.as_ptr(), 4093);
    }
    assert_eq!(dst[..4093], src[..4093]);
    assert_eq!(dst[4093..], [0, 0, 0]);
    let src16: Vec<u128> = (0..256u128)
        .map(|i| i * 0x0101_0203_0405_0607_0809)
        .collect();
    let mut dst16 = vec![0u128; 256];
    // SAFETY: 256 16-byte elements in both (u128 is 16-byte aligned).
    unsafe {
        let f: CopyFn = std::mem::transmute(lib.sym(super::COPY_VEC16_KERNEL));
        f(dst16.as_mut_ptr().cast(), src16.as_ptr().cast(), 256);
    }
    assert_eq!(dst16, src16);
}

#[test]
fn half_conversions_match_the_half_crate_bit_for_bit() {
    let Some(lib) = HostLib::build() else { return };
    type F2H = unsafe extern "C" fn(f32) -> u16;
    type H2F = unsafe extern "C" fn(u16) -> f32;
    // SAFETY: the test wrappers appended to the source, with these signatures.
    let (f2h, h2f, f2b, b2f): (F2H, H2F, F2H, H2F) = unsafe {
        (
            std::mem::transmute::<*mut c_void, F2H>(lib.sym("gc_test_f2h")),
            std::mem::transmute::<*mut c_void, H2F>(lib.sym("gc_test_h2f")),
            std::mem::transmute::<*mut c_void, F2H>(lib.sym("gc_test_f2b")),
            std::mem::transmute::<*mut c_void, H2F>(lib.sym("gc_test_b2f")),
        )
    };
    // Every 16-bit pattern widens exactly.
    for h in 0..=u16::MAX {
        // SAFETY: plain functions of a value.
        let (x, y) = unsafe { (h2f(h), b2f(h)) };
        assert_eq!(
            x.to_bits(),
            f16::from_bits(h).to_f32().to_bits(),
            "f16 {h:#06x}"
        );
        assert_eq!(
            y.to_bits(),
            bf16::from_bits(h).to_f32().to_bits(),
            "bf16 {h:#06x}"
        );
    }
    // f32 patterns: a stride through all 2^32 (odd, so every exponent and
    // low mantissa bits are hit), plus the neighbourhood of every tie.
    let mut bits: Vec<u32> = (0..=u32::MAX / 9973)
        .map(|i| i.wrapping_mul(9973))
        .collect();
    for e in 0..256u32 {
        for m in [
            0u32, 0x1000, 0x1fff, 0x3000, 0x8000, 0x18000, 0x7fffff, 0x400000,
        ] {
            for s in [0u32, 1 << 31] {
                let x = s | (e << 23) | m;
                bits.extend([x, x.wrapping_add(1), x.wrapping_sub(1)]);
            }
        }
    }
    for x in bits {
        let f = f32::from_bits(x);
        // SAFETY: plain functions of a value.
        let (h, b) = unsafe { (f2h(f), f2b(f)) };
        assert_eq!(h, f16::from_f32(f).to_bits(), "f32 {x:#010x} -> f16");
        assert_eq!(b, bf16::from_f32(f).to_bits(), "f32 {x:#010x} -> bf16");
    }
}
