//! NVRTC compilation of the generated kernels and their launches.
//!
//! [`Device::kernels`] compiles [`crate::kernels::module_source`] once per
//! device (a CUBIN for the device's compute capability, PTX as the
//! fallback), and keeps the module for the life of the device. Needs NVRTC
//! 11.1 or later (`nvrtcGetCUBIN`).

#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::{CString, c_char, c_void};
use std::sync::{Arc, OnceLock};

use gpucomm_algo::ReduceOp;

use crate::device::{Device, DeviceMemory, Stream, range};
use crate::ffi::{self, CuHandle};
use crate::kernels::{self, DType};
use crate::{Error, reference};

static NVRTC: OnceLock<Result<Arc<ffi::Nvrtc>, String>> = OnceLock::new();

fn nvrtc() -> Result<Arc<ffi::Nvrtc>, Error> {
    NVRTC
        .get_or_init(|| {
            let names = ffi::nvrtc_candidates();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            ffi::load_nvrtc(&names).map(Arc::new)
        })
        .clone()
        .map_err(|e| Error::Nvrtc {
            message: format!(
                "cannot load NVRTC, needed for the GPU reduction kernels (looked for by name, then in the library folders of $CUDA_HOME, $CUDA_PATH and /usr/local/cuda: {e})"
            ),
            log: String::new(),
        })
}

/// The NVRTC library file that was loaded, or why none could be.
pub fn nvrtc_library() -> Result<String, Error> {
    Ok(nvrtc()?.library.clone())
}

/// NVRTC's version (major, minor), or why it cannot be loaded.
pub fn nvrtc_version() -> Result<(i32, i32), Error> {
    let n = nvrtc()?;
    let (mut a, mut b) = (0, 0);
    // SAFETY: out-pointers to live locals.
    let r = unsafe { (n.version)(&mut a, &mut b) };
    if r != 0 {
        return Err(Error::Nvrtc {
            message: n.describe(r),
            log: String::new(),
        });
    }
    Ok((a, b))
}

/// An element kernel's operand must start on a multiple of its element size:
/// a misaligned load is a sticky fault on the GPU that poisons the whole
/// context (`CUDA_ERROR_MISALIGNED_ADDRESS` at the next call), so it is
/// refused here with a plain error instead.
fn aligned(what: &str, ptr: u64, dtype: DType) -> Result<(), Error> {
    let size = dtype.size() as u64;
    if ptr % size == 0 {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{what} at device address {ptr:#x} is not aligned to {size} bytes, as {dtype} elements must be"
        )))
    }
}

/// What NVRTC produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodeKind {
    /// Machine code for exactly `sm_<major><minor>` (no JIT at load, so no
    /// dependence on the driver's PTX version).
    Cubin,
    /// PTX for `compute_<major><minor>`, JIT-compiled by the driver at load.
    Ptx,
}

/// Compiles CUDA C `src` for compute capability `arch` into a CUBIN or
/// NUL-terminated PTX image for `cuModuleLoadData`.
pub fn compile(src: &str, arch: (u32, u32), kind: CodeKind) -> Result<Vec<u8>, Error> {
    let n = nvrtc()?;
    let fail = |message: String, log: String| Error::Nvrtc { message, log };
    let csrc = CString::new(src)
        .map_err(|_| fail("kernel source contains a NUL byte".into(), String::new()))?;
    let name = CString::new("gpucomm_kernels.cu").expect("no NUL");
    let mut prog: ffi::NvrtcProgram = std::ptr::null_mut();
    // SAFETY: valid C strings; no headers.
    let r = unsafe {
        (n.create_program)(
            &mut prog,
            csrc.as_ptr(),
            name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err(fail(
            format!("nvrtcCreateProgram: {}", n.describe(r)),
            String::new(),
        ));
    }
    let target = match kind {
        CodeKind::Cubin => format!("sm_{}{}", arch.0, arch.1),
        CodeKind::Ptx => format!("compute_{}{}", arch.0, arch.1),
    };
    let opt = CString::new(format!("--gpu-architecture={target}")).expect("no NUL");
    let opts = [opt.as_ptr()];
    // SAFETY: `prog` was created above; one valid option string.
    let r = unsafe { (n.compile_program)(prog, 1, opts.as_ptr()) };
    let mut log_len = 0usize;
    // SAFETY: `prog` is live; out-pointer to a live local.
    unsafe { (n.get_program_log_size)(prog, &mut log_len) };
    let mut log = vec![0u8; log_len.max(1)];
    // SAFETY: `log` has the size NVRTC asked for.
    unsafe { (n.get_program_log)(prog, log.as_mut_ptr() as *mut c_char) };
    let log = String::from_utf8_lossy(&log)
        .trim_end_matches('\0')
        .to_string();
    let result = if r != 0 {
        Err(fail(
            format!("compiling for {target}: {}", n.describe(r)),
            log,
        ))
    } else {
        let (size_fn, get_fn, what) = match kind {
            CodeKind::Cubin => (n.get_cubin_size, n.get_cubin, "nvrtcGetCUBIN"),
            CodeKind::Ptx => (n.get_ptx_size, n.get_ptx, "nvrtcGetPTX"),
        };
        let mut size = 0usize;
        // SAFETY: `prog` compiled; out-pointer to a live local.
        unsafe { size_fn(prog, &mut size) };
        let mut image = vec![0u8; size];
        // SAFETY: `image` has the size NVRTC reported (PTX: including the NUL).
        let r = unsafe { get_fn(prog, image.as_mut_ptr() as *mut c_char) };
        if r != 0 || size == 0 {
            Err(fail(format!("{what}: {}", n.describe(r)), log))
        } else {
            Ok(image)
        }
    };
    // SAFETY: destroys the program created above, once.
    unsafe { (n.destroy_program)(&mut prog) };
    result
}

/// The compiled kernels of one device.
pub struct Kernels {
    /// Weak: the device caches its `Kernels`, so a strong reference would
    /// be a cycle that keeps the primary context retained forever.
    dev: crate::device::WeakDevice,
    module: CuHandle,
    funcs: HashMap<String, CuHandle>,
    /// What was loaded.
    pub code: CodeKind,
    /// Bytes of the loaded image.
    pub image_len: usize,
}

// SAFETY: module and function handles are only passed to the thread-safe driver.
unsafe impl Send for Kernels {}
// SAFETY: as above.
unsafe impl Sync for Kernels {}

impl Drop for Kernels {
    fn drop(&mut self) {
        // When the device is gone its context was released, which unloads
        // the module with it.
        if let Some(dev) = self.dev.upgrade()
            && dev.bind().is_ok()
        {
            // SAFETY: our module, unloaded once; launches already issued
            // keep their own reference to the code.
            unsafe { (dev.drv().module_unload)(self.module) };
        }
    }
}

const BLOCK: u32 = 256;

impl Device {
    /// The reduction and copy kernels for this device, compiled with NVRTC
    /// on first use (a second or so) and cached: a CUBIN for the device
    /// first (no JIT, so an NVRTC newer than the driver still works); then
    /// PTX for the device, then PTX for an older architecture that the
    /// device runs (an older NVRTC may not know the device), which the
    /// driver JIT-compiles forward: `compute_75` (the oldest NVRTC 13
    /// compiles for), then `compute_70`.
    pub fn kernels(&self) -> Result<Arc<Kernels>, Error> {
        let mut slot = self.kernel_slot().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = slot.as_ref() {
            return Ok(k.clone());
        }
        let cc = self.info().compute_capability;
        let mut attempts = vec![(cc, CodeKind::Cubin), (cc, CodeKind::Ptx)];
        for old in [(7, 5), (7, 0)] {
            if old < cc {
                attempts.push((old, CodeKind::Ptx));
            }
        }
        let k = Arc::new(self.load_kernels(&attempts)?);
        *slot = Some(k.clone());
        Ok(k)
    }

    /// Compiles and loads the kernels from the first of `attempts`
    /// (architecture, code kind) that NVRTC compiles and the driver loads;
    /// not cached (see [`Device::kernels`]). The error is the first
    /// attempt's.
    pub fn load_kernels(&self, attempts: &[((u32, u32), CodeKind)]) -> Result<Kernels, Error> {
        let src = kernels::module_source();
        let mut first_error = None;
        let mut module: CuHandle = std::ptr::null_mut();
        let mut loaded = None;
        for &(arch, kind) in attempts {
            let image = match compile(&src, arch, kind) {
                Ok(i) => i,
                Err(e) => {
                    first_error.get_or_insert(e);
                    continue;
                }
            };
            self.bind()?;
            // SAFETY: `image` is a CUBIN or NUL-terminated PTX from NVRTC;
            // out-pointer to a live local.
            let r = unsafe {
                (self.drv().module_load_data)(&mut module, image.as_ptr() as *const c_void)
            };
            match self.check("cuModuleLoadData", r) {
                Ok(()) => {
                    loaded = Some((kind, image.len()));
                    break;
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        let Some((code, image_len)) = loaded else {
            return Err(first_error.unwrap_or_else(|| {
                Error::InvalidArgument("no architecture to compile the kernels for".into())
            }));
        };
        let mut k = Kernels {
            dev: self.downgrade(),
            module,
            funcs: HashMap::new(),
            code,
            image_len,
        };
        for name in kernels::all_kernel_names() {
            let c = CString::new(name.as_str()).expect("no NUL");
            let mut f: CuHandle = std::ptr::null_mut();
            // SAFETY: live module; out-pointer to a live local.
            let r = unsafe { (self.drv().module_get_function)(&mut f, module, c.as_ptr()) };
            self.check("cuModuleGetFunction", r)?;
            k.funcs.insert(name, f);
        }
        Ok(k)
    }
}

impl Kernels {
    fn launch(
        &self,
        stream: &Stream,
        name: &str,
        n: u64,
        args: &mut [*mut c_void],
    ) -> Result<(), Error> {
        if n == 0 {
            return Ok(());
        }
        // The stream holds its device, so the context is alive.
        let dev = stream.device();
        if !self.dev.is(dev) {
            return Err(Error::InvalidArgument(format!(
                "kernels of another device launched on a stream of device {}",
                dev.ordinal()
            )));
        }
        let f = *self
            .funcs
            .get(name)
            .ok_or_else(|| Error::InvalidArgument(format!("no kernel {name}")))?;
        let max_grid = (dev.info().multiprocessors.max(1) * 16) as u64;
        let grid = n.div_ceil(BLOCK as u64).clamp(1, max_grid) as u32;
        dev.bind()?;
        // SAFETY: `f` is a kernel of our module whose parameters are exactly
        // the values `args` points to (checked by the callers below); the
        // buffers were bounds-checked against `n`.
        let r = unsafe {
            (dev.drv().launch_kernel)(
                f,
                grid,
                1,
                1,
                BLOCK,
                1,
                1,
                0,
                stream.raw(),
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        dev.check("cuLaunchKernel", r)
    }

    /// `dst = a op b` over `count` elements of `dtype`, in stream order
    /// (`avg` combines like `sum`; finish with [`Kernels::divide`]). `dst`
    /// may be `a`.
    #[allow(clippy::too_many_arguments)]
    pub fn reduce(
        &self,
        stream: &Stream,
        op: ReduceOp,
        dtype: DType,
        dst: &impl DeviceMemory,
        a: &impl DeviceMemory,
        b: &impl DeviceMemory,
        count: usize,
    ) -> Result<(), Error> {
        let bytes = count
            .checked_mul(dtype.size())
            .ok_or_else(|| Error::InvalidArgument(format!("{count} elements overflow")))?;
        range("reduce destination", 0, bytes, dst.len())?;
        range("reduce left operand", 0, bytes, a.len())?;
        range("reduce right operand", 0, bytes, b.len())?;
        aligned("reduce destination", dst.device_ptr(), dtype)?;
        aligned("reduce left operand", a.device_ptr(), dtype)?;
        aligned("reduce right operand", b.device_ptr(), dtype)?;
        let (mut d, mut x, mut y, mut n) = (
            dst.device_ptr(),
            a.device_ptr(),
            b.device_ptr(),
            count as u64,
        );
        let mut args = [
            &mut d as *mut u64 as *mut c_void,
            &mut x as *mut u64 as *mut c_void,
            &mut y as *mut u64 as *mut c_void,
            &mut n as *mut u64 as *mut c_void,
        ];
        self.launch(
            stream,
            &kernels::reduce_kernel_name(op, dtype),
            count as u64,
            &mut args,
        )
    }

    /// `dst[i] /= ranks` over `count` elements: the end of `avg`.
    pub fn divide(
        &self,
        stream: &Stream,
        dtype: DType,
        dst: &impl DeviceMemory,
        count: usize,
        ranks: u64,
    ) -> Result<(), Error> {
        reference::check_ranks(dtype, ranks)?;
        let bytes = count
            .checked_mul(dtype.size())
            .ok_or_else(|| Error::InvalidArgument(format!("{count} elements overflow")))?;
        range("divide destination", 0, bytes, dst.len())?;
        aligned("divide destination", dst.device_ptr(), dtype)?;
        let (mut d, mut n, mut r) = (dst.device_ptr(), count as u64, ranks);
        let mut args = [
            &mut d as *mut u64 as *mut c_void,
            &mut n as *mut u64 as *mut c_void,
            &mut r as *mut u64 as *mut c_void,
        ];
        self.launch(
            stream,
            &kernels::divide_kernel_name(dtype),
            count as u64,
            &mut args,
        )
    }

    /// Copies `len` bytes with a kernel (SMs do the loads and stores, not a
    /// copy engine): 16-byte vectors when both addresses and the length
    /// allow it, bytes otherwise. Either side may be a peer's memory when
    /// peer access is enabled.
    pub fn copy(
        &self,
        stream: &Stream,
        dst: &impl DeviceMemory,
        dst_offset: usize,
        src: &impl DeviceMemory,
        src_offset: usize,
        len: usize,
    ) -> Result<(), Error> {
        range("kernel copy destination", dst_offset, len, dst.len())?;
        range("kernel copy source", src_offset, len, src.len())?;
        let (mut d, mut s) = (
            dst.device_ptr() + dst_offset as u64,
            src.device_ptr() + src_offset as u64,
        );
        let vec = d % 16 == 0 && s % 16 == 0 && len % 16 == 0;
        let (name, mut n) = if vec {
            (kernels::COPY_VEC16_KERNEL, (len / 16) as u64)
        } else {
            (kernels::COPY_BYTES_KERNEL, len as u64)
        };
        let count = n;
        let mut args = [
            &mut d as *mut u64 as *mut c_void,
            &mut s as *mut u64 as *mut c_void,
            &mut n as *mut u64 as *mut c_void,
        ];
        self.launch(stream, name, count, &mut args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operands_must_start_on_their_element_size() {
        assert!(aligned("x", 0x1000, DType::I32).is_ok());
        assert!(aligned("x", 0x1002, DType::Bf16).is_ok());
        assert!(aligned("x", 0x1001, DType::U8).is_ok());
        let e = aligned("reduce left operand", 0x1002, DType::I32).unwrap_err();
        assert!(e.to_string().contains("reduce left operand"), "{e}");
        assert!(e.to_string().contains("not aligned to 4 bytes"), "{e}");
        assert!(aligned("x", 0x1004, DType::F64).is_err());
    }
}
