//! Generated CUDA C for the reduction and copy kernels, compiled at run time
//! with NVRTC (see [`crate::Device::kernels`]).
//!
//! One kernel per (op, element type), `gpucomm_reduce_<op>_<type>`, computes
//! `dst[i] = a[i] op b[i]` (`dst` may be `a`: in-place accumulation), and one
//! per type, `gpucomm_div_<type>`, divides by the number of ranks for `avg`,
//! exactly as the CPU path does it:
//!
//! - integers: `sum`/`prod` wrap (computed in the unsigned type of the same
//!   width), `min`/`max` compare, `avg` is the wrapping sum then a
//!   truncating division by the rank count;
//! - `f32`/`f64`: IEEE arithmetic, `min`/`max` with `fmin`/`fmax` (a NaN
//!   operand loses, like Rust's `f32::min`);
//! - `f16`/`bf16`: both operands widened to `f32`, combined in `f32`, rounded
//!   back to nearest-even at every combine. The conversions are written out
//!   on the bits (no `cuda_fp16.h`, whose availability in NVRTC varies), and
//!   are the same functions as the `half` crate's: a NaN comes out quiet,
//!   overflow goes to infinity, subnormals are kept.
//!
//! The kernel bodies use only what C++ compilers for the host understand
//! too; a small prelude maps the CUDA spellings. The unit tests compile the
//! generated source with the host C++ compiler, run every kernel on the CPU
//! and compare them with [`crate::reference`]: the arithmetic is checked here,
//! and only compilation by NVRTC and the launch remain for a GPU.

use gpucomm_algo::ReduceOp;

/// Element types the kernels handle: the workspace's one [`gpucomm_algo::DataType`].
pub use gpucomm_algo::DataType as DType;

/// The C type the kernels store it as.
pub const fn c_type(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "float",
        DType::F64 => "double",
        DType::F16 | DType::Bf16 => "unsigned short",
        DType::I8 => "signed char",
        DType::U8 => "unsigned char",
        DType::I32 => "int",
        DType::U32 => "unsigned int",
        DType::I64 => "long long",
        DType::U64 => "unsigned long long",
    }
}

/// The unsigned C type of the same width (for wrapping arithmetic).
const fn c_unsigned(dtype: DType) -> &'static str {
    match dtype.size() {
        1 => "unsigned char",
        2 => "unsigned short",
        4 => "unsigned int",
        _ => "unsigned long long",
    }
}

/// The kernel computing `dst = a op b` for `dtype` (`avg` combines like `sum`).
pub fn reduce_kernel_name(op: ReduceOp, dtype: DType) -> String {
    format!("gpucomm_reduce_{}_{}", op.name(), dtype.name())
}

/// The kernel dividing every element by the rank count (the end of `avg`).
pub fn divide_kernel_name(dtype: DType) -> String {
    format!("gpucomm_div_{}", dtype.name())
}

/// Byte-wise copy kernel (any alignment).
pub const COPY_BYTES_KERNEL: &str = "gpucomm_copy_bytes";
/// 16-byte-vector copy kernel (pointers and length multiples of 16).
pub const COPY_VEC16_KERNEL: &str = "gpucomm_copy_vec16";

/// Device-side definitions the generated bodies rely on (NVRTC).
const DEVICE_PRELUDE: &str = r#"// gpucomm kernels, generated; compiled at run time by NVRTC.
#define GC_INLINE __device__ __forceinline__
GC_INLINE unsigned int gc_f2u(float f) { return __float_as_uint(f); }
GC_INLINE float gc_u2f(unsigned int u) { return __uint_as_float(u); }
#define GC_INDEX ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x)
#define GC_STRIDE ((unsigned long long)blockDim.x * gridDim.x)
"#;

/// The same definitions for a host C++ compiler (tests only).
#[cfg(test)]
const HOST_PRELUDE: &str = r#"#include <string.h>
#include <math.h>
#define __global__
#define GC_INLINE static inline
static inline unsigned int gc_f2u(float f) { unsigned int u; memcpy(&u, &f, 4); return u; }
static inline float gc_u2f(unsigned int u) { float f; memcpy(&f, &u, 4); return f; }
struct uint4 { unsigned int x, y, z, w; };
#define GC_INDEX 0ull
#define GC_STRIDE 1ull
"#;

/// Conversions between f32 and the 16-bit floats, bit for bit those of the
/// `half` crate (round to nearest, ties to even).
const HELPERS: &str = r#"
GC_INLINE float gc_h2f(unsigned short h) {
    unsigned int sign = (unsigned int)(h & 0x8000u) << 16;
    unsigned int exp = (h >> 10) & 0x1fu;
    unsigned int man = h & 0x3ffu;
    if (exp == 0x1fu) return gc_u2f(sign | (man ? 0x7fc00000u : 0x7f800000u) | (man << 13));
    if (exp != 0u) return gc_u2f(sign | ((exp + 112u) << 23) | (man << 13));
    if (man == 0u) return gc_u2f(sign);
    float f = (float)man * 5.9604644775390625e-8f; /* man * 2^-24, exact */
    return sign ? -f : f;
}
GC_INLINE unsigned short gc_f2h(float f) {
    unsigned int x = gc_f2u(f);
    unsigned int sign = (x >> 16) & 0x8000u;
    unsigned int exp = (x >> 23) & 0xffu;
    unsigned int man = x & 0x7fffffu;
    if (exp == 0xffu) {
        if (man == 0u) return (unsigned short)(sign | 0x7c00u);
        return (unsigned short)(sign | 0x7e00u | (man >> 13));
    }
    int e = (int)exp - 112;
    if (e >= 0x1f) return (unsigned short)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return (unsigned short)sign;
        unsigned int m = man | 0x800000u;
        unsigned int shift = (unsigned int)(14 - e);
        unsigned int q = m >> shift;
        unsigned int rem = m & ((1u << shift) - 1u);
        unsigned int halfway = 1u << (shift - 1u);
        if (rem > halfway || (rem == halfway && (q & 1u))) q += 1u;
        return (unsigned short)(sign | q);
    }
    unsigned int h = sign | ((unsigned int)e << 10) | (man >> 13);
    unsigned int rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h += 1u;
    return (unsigned short)h;
}
GC_INLINE float gc_b2f(unsigned short b) {
    unsigned int u = (unsigned int)b;
    if ((u & 0x7fffu) > 0x7f80u) u |= 0x40u; /* NaN: quiet it */
    return gc_u2f(u << 16);
}
GC_INLINE unsigned short gc_f2b(float f) {
    unsigned int x = gc_f2u(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);
    if ((x & 0x8000u) != 0u && (x & 0x17fffu) != 0u) return (unsigned short)((x >> 16) + 1u);
    return (unsigned short)(x >> 16);
}
"#;

/// The C expression combining `x` and `y` (already of the compute type).
fn combine_expr(op: ReduceOp, dtype: DType) -> String {
    let (x, y) = ("x", "y");
    match dtype {
        DType::F32 | DType::F16 | DType::Bf16 => match op {
            ReduceOp::Sum | ReduceOp::Avg => format!("{x} + {y}"),
            ReduceOp::Prod => format!("{x} * {y}"),
            ReduceOp::Min => format!("fminf({x}, {y})"),
            ReduceOp::Max => format!("fmaxf({x}, {y})"),
        },
        DType::F64 => match op {
            ReduceOp::Sum | ReduceOp::Avg => format!("{x} + {y}"),
            ReduceOp::Prod => format!("{x} * {y}"),
            ReduceOp::Min => format!("fmin({x}, {y})"),
            ReduceOp::Max => format!("fmax({x}, {y})"),
        },
        _ => {
            let (t, u) = (c_type(dtype), c_unsigned(dtype));
            match op {
                ReduceOp::Sum | ReduceOp::Avg => format!("({t})(({u}){x} + ({u}){y})"),
                ReduceOp::Prod => format!("({t})(({u}){x} * ({u}){y})"),
                ReduceOp::Min => format!("({x} < {y} ? {x} : {y})"),
                ReduceOp::Max => format!("({x} > {y} ? {x} : {y})"),
            }
        }
    }
}

/// (load, store) wrappers: how an element becomes the compute type and back.
fn conversions(dtype: DType) -> (&'static str, &'static str, &'static str) {
    match dtype {
        DType::F16 => ("float", "gc_h2f", "gc_f2h"),
        DType::Bf16 => ("float", "gc_b2f", "gc_f2b"),
        _ => (c_type(dtype), "", ""),
    }
}

/// The source of `gpucomm_reduce_<op>_<dtype>` (needs the prelude and helpers).
pub fn reduce_kernel_source(op: ReduceOp, dtype: DType) -> String {
    let t = c_type(dtype);
    let (ct, load, store) = conversions(dtype);
    let expr = combine_expr(op, dtype);
    format!(
        "extern \"C\" __global__ void {name}({t}* dst, const {t}* a, const {t}* b, unsigned long long n) {{\n\
         \x20   for (unsigned long long i = GC_INDEX; i < n; i += GC_STRIDE) {{\n\
         \x20       {ct} x = {load}(a[i]);\n\
         \x20       {ct} y = {load}(b[i]);\n\
         \x20       dst[i] = {store}({expr});\n\
         \x20   }}\n\
         }}\n",
        name = reduce_kernel_name(op, dtype),
    )
}

/// The source of `gpucomm_div_<dtype>`: `dst[i] /= ranks` as the CPU does it
/// (`ranks` converted to the element type first, as Rust's `n as T`).
pub fn divide_kernel_source(dtype: DType) -> String {
    let t = c_type(dtype);
    let (ct, load, store) = conversions(dtype);
    let divisor = match dtype {
        DType::F16 | DType::Bf16 | DType::F32 => "(float)ranks".to_string(),
        DType::F64 => "(double)ranks".to_string(),
        _ => format!("({t})ranks"),
    };
    format!(
        "extern \"C\" __global__ void {name}({t}* dst, unsigned long long n, unsigned long long ranks) {{\n\
         \x20   for (unsigned long long i = GC_INDEX; i < n; i += GC_STRIDE) {{\n\
         \x20       {ct} x = {load}(dst[i]);\n\
         \x20       dst[i] = {store}(({ct})(x / {divisor}));\n\
         \x20   }}\n\
         }}\n",
        name = divide_kernel_name(dtype),
    )
}

const COPY_KERNELS: &str = r#"
extern "C" __global__ void gpucomm_copy_bytes(unsigned char* dst, const unsigned char* src, unsigned long long n) {
    for (unsigned long long i = GC_INDEX; i < n; i += GC_STRIDE) dst[i] = src[i];
}
extern "C" __global__ void gpucomm_copy_vec16(uint4* dst, const uint4* src, unsigned long long n) {
    for (unsigned long long i = GC_INDEX; i < n; i += GC_STRIDE) dst[i] = src[i];
}
"#;

/// Helpers and every kernel, without a prelude.
fn body() -> String {
    let mut s = String::from(HELPERS);
    for dtype in DType::ALL {
        for op in ReduceOp::ALL {
            s.push_str(&reduce_kernel_source(op, dtype));
        }
        s.push_str(&divide_kernel_source(dtype));
    }
    s.push_str(COPY_KERNELS);
    s
}

/// The whole module NVRTC compiles: prelude, helpers, 50 reduce kernels, 10
/// divide kernels and 2 copy kernels.
pub fn module_source() -> String {
    format!("{DEVICE_PRELUDE}{}", body())
}

/// Every kernel name in [`module_source`].
pub fn all_kernel_names() -> Vec<String> {
    let mut v = Vec::new();
    for dtype in DType::ALL {
        for op in ReduceOp::ALL {
            v.push(reduce_kernel_name(op, dtype));
        }
        v.push(divide_kernel_name(dtype));
    }
    v.push(COPY_BYTES_KERNEL.into());
    v.push(COPY_VEC16_KERNEL.into());
    v
}

/// The host-compilable form of the module (tests).
#[cfg(test)]
pub(crate) fn host_source() -> String {
    format!("{HOST_PRELUDE}{}", body())
}

#[cfg(test)]
#[path = "kernels_host_test.rs"]
mod host_test;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_and_type_has_one_kernel() {
        let src = module_source();
        let names = all_kernel_names();
        assert_eq!(names.len(), 5 * 10 + 10 + 2);
        for n in &names {
            let decl = format!("__global__ void {n}(");
            assert_eq!(src.matches(&decl).count(), 1, "{n}");
        }
        let unique: std::collections::HashSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
        assert_eq!(src.matches('{').count(), src.matches('}').count());
        assert_eq!(src.matches('(').count(), src.matches(')').count());
        assert!(
            !src.contains("#include"),
            "NVRTC source must not need headers"
        );
    }

    #[test]
    fn halves_compute_in_f32_and_round_back() {
        let s = reduce_kernel_source(ReduceOp::Sum, DType::F16);
        assert!(s.contains("float x = gc_h2f(a[i]);"), "{s}");
        assert!(s.contains("dst[i] = gc_f2h(x + y);"), "{s}");
        let s = reduce_kernel_source(ReduceOp::Max, DType::Bf16);
        assert!(s.contains("dst[i] = gc_f2b(fmaxf(x, y));"), "{s}");
        let s = divide_kernel_source(DType::Bf16);
        assert!(s.contains("gc_f2b((float)(x / (float)ranks))"), "{s}");
    }

    #[test]
    fn integers_wrap_through_unsigned() {
        let s = reduce_kernel_source(ReduceOp::Sum, DType::I32);
        assert!(
            s.contains("(int)((unsigned int)x + (unsigned int)y)"),
            "{s}"
        );
        let s = reduce_kernel_source(ReduceOp::Prod, DType::I64);
        assert!(
            s.contains("(long long)((unsigned long long)x * (unsigned long long)y)"),
            "{s}"
        );
        let s = reduce_kernel_source(ReduceOp::Min, DType::U8);
        assert!(s.contains("(x < y ? x : y)"), "{s}");
        // avg combines like sum; the division is its own kernel.
        assert_eq!(
            reduce_kernel_source(ReduceOp::Avg, DType::U64).replace("avg", "sum"),
            reduce_kernel_source(ReduceOp::Sum, DType::U64)
        );
        assert!(divide_kernel_source(DType::I8).contains("x / (signed char)ranks"));
    }

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        assert_eq!(DType::from_name("f128"), None);
    }
}
