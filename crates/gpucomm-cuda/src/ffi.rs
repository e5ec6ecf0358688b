//! Minimal bindings of the CUDA driver API and NVRTC, resolved with `dlopen`
//! at run time.
//!
//! Nothing here links against CUDA: the build needs no toolkit, and a process
//! without a driver simply fails [`Driver::load`] with a reason. Libraries are
//! opened once and never closed (function pointers stay valid for the life of
//! the process). Each entry point is looked up under its versioned name first
//! (`cuMemAlloc_v2`, the name `cuda.h` maps `cuMemAlloc` to) and then under
//! its plain name.

#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};

/// `CUresult`.
pub type CuResult = c_int;
/// `CUdevice`.
pub type CuDevice = c_int;
/// `CUdeviceptr`.
pub type CuDevicePtr = u64;
/// `CUcontext`, `CUstream`, `CUevent`, `CUmodule`, `CUfunction`: opaque pointers.
pub type CuHandle = *mut c_void;

/// `CUDA_SUCCESS`.
pub const CUDA_SUCCESS: CuResult = 0;
/// `CUDA_ERROR_NOT_READY` (event or stream still running).
pub const CUDA_ERROR_NOT_READY: CuResult = 600;
/// `CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED`.
pub const CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: CuResult = 704;

/// `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`.
pub const ATTR_SM_COUNT: c_int = 16;
/// `CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT`.
pub const ATTR_ASYNC_ENGINES: c_int = 40;
/// `CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING`.
pub const ATTR_UNIFIED_ADDRESSING: c_int = 41;
/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR`.
pub const ATTR_CC_MAJOR: c_int = 75;
/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR`.
pub const ATTR_CC_MINOR: c_int = 76;

/// `CU_MEMHOSTALLOC_PORTABLE` / `CU_MEMHOSTREGISTER_PORTABLE`: pinned for every context.
pub const HOST_PORTABLE: c_uint = 1;
/// `CU_STREAM_NON_BLOCKING`.
pub const STREAM_NON_BLOCKING: c_uint = 1;
/// `CU_EVENT_DISABLE_TIMING`.
pub const EVENT_DISABLE_TIMING: c_uint = 2;
/// `CU_EVENT_INTERPROCESS` (needs `DISABLE_TIMING`).
pub const EVENT_INTERPROCESS: c_uint = 4;
/// `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`.
pub const IPC_LAZY_ENABLE_PEER_ACCESS: c_uint = 1;

/// `CUipcMemHandle` / `CUipcEventHandle`: 64 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CuIpcHandle {
    /// The handle's bytes.
    pub reserved: [u8; 64],
}

/// `nvrtcResult`.
pub type NvrtcResult = c_int;
/// `nvrtcProgram`.
pub type NvrtcProgram = *mut c_void;

/// Library names tried for the driver, in order.
pub const DRIVER_NAMES: &[&str] = &["libcuda.so.1", "libcuda.so"];
/// Library names tried for NVRTC, in order (newest first).
pub const NVRTC_NAMES: &[&str] = &[
    "libnvrtc.so",
    "libnvrtc.so.13",
    "libnvrtc.so.12",
    "libnvrtc.so.11.2",
    "libnvrtc.so.11.1",
    "libnvrtc.so.11.0",
];

/// Where NVRTC is looked for, in order: [`NVRTC_NAMES`] through the dynamic
/// loader's search path, then the same names in the library folders of a
/// CUDA toolkit (`$CUDA_HOME`, `$CUDA_PATH`, `/usr/local/cuda`), where a
/// toolkit installs NVRTC without registering it with `ldconfig`.
pub fn nvrtc_candidates() -> Vec<String> {
    let mut roots: Vec<String> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|v| std::env::var(v).ok())
        .filter(|r| !r.is_empty())
        .collect();
    roots.push("/usr/local/cuda".into());
    let arch = std::env::consts::ARCH;
    let mut out: Vec<String> = NVRTC_NAMES.iter().map(|n| n.to_string()).collect();
    for root in &roots {
        for dir in ["lib64", "lib", &format!("targets/{arch}-linux/lib")] {
            for name in NVRTC_NAMES {
                out.push(format!("{}/{dir}/{name}", root.trim_end_matches('/')));
            }
        }
    }
    out
}

/// A library opened with `dlopen` (never closed).
struct Library {
    handle: *mut c_void,
    name: String,
}

fn dlerror_string() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string owned by libc,
    // valid until the next dl* call on this thread; we copy it at once.
    unsafe {
        let e = libc::dlerror();
        if e.is_null() {
            "unknown dlopen error".into()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

impl Library {
    /// Opens the first of `names` that loads; the error lists every attempt.
    fn open_any(names: &[&str]) -> Result<Library, String> {
        let mut tried = Vec::new();
        for name in names {
            // dlopen("") returns the program itself, not a library.
            if name.is_empty() {
                tried.push("an empty library name".to_string());
                continue;
            }
            let c = CString::new(*name).map_err(|_| format!("bad library name {name:?}"))?;
            // SAFETY: `c` is a valid C string; dlopen has no other precondition.
            // Loading runs the library's initialisers, which is what we ask for.
            let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            if h.is_null() {
                let e = dlerror_string();
                // A path that does not exist is only a place looked in:
                // naming every one would drown the errors that matter.
                if !(name.contains('/') && e.contains("No such file")) {
                    tried.push(e);
                }
            } else {
                return Ok(Library {
                    handle: h,
                    name: (*name).to_string(),
                });
            }
        }
        if tried.is_empty() {
            // Every name was a path that does not exist.
            return Err(format!("no such file: {}", names.join(", ")));
        }
        Err(tried.join("; "))
    }

    /// The address of the first of `names` found, or an error naming them.
    fn sym(&self, names: &[&str]) -> Result<*mut c_void, String> {
        for name in names {
            let Ok(c) = CString::new(*name) else { continue };
            // SAFETY: `handle` came from a successful dlopen and is never
            // closed; `c` is a valid C string.
            let p = unsafe { libc::dlsym(self.handle, c.as_ptr()) };
            if !p.is_null() {
                return Ok(p);
            }
        }
        Err(format!(
            "{} has no symbol {}",
            self.name,
            names.join(" or ")
        ))
    }
}

macro_rules! fn_table {
    ($(#[$m:meta])* $table:ident { $( $field:ident : [$($sym:literal),+] fn($($arg:ty),*) $(-> $ret:ty)? ; )* }) => {
        $(#[$m])*
        #[allow(missing_docs)]
        pub struct $table {
            /// The library file that was opened.
            pub library: String,
            $( pub $field: unsafe extern "C" fn($($arg),*) $(-> $ret)?, )*
        }

        impl $table {
            fn resolve(lib: &Library) -> Result<$table, String> {
                Ok($table {
                    library: lib.name.clone(),
                    $( $field: {
                        let p = lib.sym(&[$($sym),+])?;
                        // SAFETY: the symbol is the driver/NVRTC entry point of
                        // that name, whose C prototype is the one spelled in
                        // this table (checked against cuda.h / nvrtc.h).
                        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) $(-> $ret)?>(p) }
                    }, )*
                })
            }
        }
    };
}

fn_table! {
    /// The CUDA driver entry points gpucomm uses.
    Driver {
        init: ["cuInit"] fn(c_uint) -> CuResult;
        driver_get_version: ["cuDriverGetVersion"] fn(*mut c_int) -> CuResult;
        get_error_string: ["cuGetErrorString"] fn(CuResult, *mut *const c_char) -> CuResult;
        get_error_name: ["cuGetErrorName"] fn(CuResult, *mut *const c_char) -> CuResult;
        device_get_count: ["cuDeviceGetCount"] fn(*mut c_int) -> CuResult;
        device_get: ["cuDeviceGet"] fn(*mut CuDevice, c_int) -> CuResult;
        device_get_name: ["cuDeviceGetName"] fn(*mut c_char, c_int, CuDevice) -> CuResult;
        device_get_attribute: ["cuDeviceGetAttribute"] fn(*mut c_int, c_int, CuDevice) -> CuResult;
        device_total_mem: ["cuDeviceTotalMem_v2", "cuDeviceTotalMem"] fn(*mut usize, CuDevice) -> CuResult;
        device_get_pci_bus_id: ["cuDeviceGetPCIBusId"] fn(*mut c_char, c_int, CuDevice) -> CuResult;
        device_can_access_peer: ["cuDeviceCanAccessPeer"] fn(*mut c_int, CuDevice, CuDevice) -> CuResult;
        primary_ctx_retain: ["cuDevicePrimaryCtxRetain"] fn(*mut CuHandle, CuDevice) -> CuResult;
        primary_ctx_release: ["cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"] fn(CuDevice) -> CuResult;
        ctx_set_current: ["cuCtxSetCurrent"] fn(CuHandle) -> CuResult;
        ctx_synchronize: ["cuCtxSynchronize"] fn() -> CuResult;
        ctx_enable_peer_access: ["cuCtxEnablePeerAccess"] fn(CuHandle, c_uint) -> CuResult;
        mem_alloc: ["cuMemAlloc_v2", "cuMemAlloc"] fn(*mut CuDevicePtr, usize) -> CuResult;
        mem_free: ["cuMemFree_v2", "cuMemFree"] fn(CuDevicePtr) -> CuResult;
        // Only `_v2` (size_t): the unversioned name takes 32-bit sizes.
        mem_get_address_range: ["cuMemGetAddressRange_v2"] fn(*mut CuDevicePtr, *mut usize, CuDevicePtr) -> CuResult;
        mem_host_alloc: ["cuMemHostAlloc"] fn(*mut *mut c_void, usize, c_uint) -> CuResult;
        mem_free_host: ["cuMemFreeHost"] fn(*mut c_void) -> CuResult;
        mem_host_register: ["cuMemHostRegister_v2", "cuMemHostRegister"] fn(*mut c_void, usize, c_uint) -> CuResult;
        mem_host_unregister: ["cuMemHostUnregister"] fn(*mut c_void) -> CuResult;
        memset_d8_async: ["cuMemsetD8Async"] fn(CuDevicePtr, u8, usize, CuHandle) -> CuResult;
        memcpy_htod_async: ["cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync"] fn(CuDevicePtr, *const c_void, usize, CuHandle) -> CuResult;
        memcpy_dtoh_async: ["cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync"] fn(*mut c_void, CuDevicePtr, usize, CuHandle) -> CuResult;
        memcpy_dtod_async: ["cuMemcpyDtoDAsync_v2", "cuMemcpyDtoDAsync"] fn(CuDevicePtr, CuDevicePtr, usize, CuHandle) -> CuResult;
        memcpy_peer_async: ["cuMemcpyPeerAsync"] fn(CuDevicePtr, CuHandle, CuDevicePtr, CuHandle, usize, CuHandle) -> CuResult;
        stream_create: ["cuStreamCreate"] fn(*mut CuHandle, c_uint) -> CuResult;
        stream_destroy: ["cuStreamDestroy_v2", "cuStreamDestroy"] fn(CuHandle) -> CuResult;
        stream_synchronize: ["cuStreamSynchronize"] fn(CuHandle) -> CuResult;
        stream_wait_event: ["cuStreamWaitEvent"] fn(CuHandle, CuHandle, c_uint) -> CuResult;
        event_create: ["cuEventCreate"] fn(*mut CuHandle, c_uint) -> CuResult;
        event_destroy: ["cuEventDestroy_v2", "cuEventDestroy"] fn(CuHandle) -> CuResult;
        event_record: ["cuEventRecord"] fn(CuHandle, CuHandle) -> CuResult;
        event_query: ["cuEventQuery"] fn(CuHandle) -> CuResult;
        event_synchronize: ["cuEventSynchronize"] fn(CuHandle) -> CuResult;
        event_elapsed_time: ["cuEventElapsedTime"] fn(*mut f32, CuHandle, CuHandle) -> CuResult;
        ipc_get_mem_handle: ["cuIpcGetMemHandle"] fn(*mut CuIpcHandle, CuDevicePtr) -> CuResult;
        ipc_open_mem_handle: ["cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle"] fn(*mut CuDevicePtr, CuIpcHandle, c_uint) -> CuResult;
        ipc_close_mem_handle: ["cuIpcCloseMemHandle"] fn(CuDevicePtr) -> CuResult;
        ipc_get_event_handle: ["cuIpcGetEventHandle"] fn(*mut CuIpcHandle, CuHandle) -> CuResult;
        ipc_open_event_handle: ["cuIpcOpenEventHandle"] fn(*mut CuHandle, CuIpcHandle) -> CuResult;
        module_load_data: ["cuModuleLoadData"] fn(*mut CuHandle, *const c_void) -> CuResult;
        module_unload: ["cuModuleUnload"] fn(CuHandle) -> CuResult;
        module_get_function: ["cuModuleGetFunction"] fn(*mut CuHandle, CuHandle, *const c_char) -> CuResult;
        launch_kernel: ["cuLaunchKernel"] fn(CuHandle, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CuHandle, *mut *mut c_void, *mut *mut c_void) -> CuResult;
    }
}

fn_table! {
    /// The NVRTC entry points gpucomm uses.
    Nvrtc {
        version: ["nvrtcVersion"] fn(*mut c_int, *mut c_int) -> NvrtcResult;
        get_error_string: ["nvrtcGetErrorString"] fn(NvrtcResult) -> *const c_char;
        create_program: ["nvrtcCreateProgram"] fn(*mut NvrtcProgram, *const c_char, *const c_char, c_int, *const *const c_char, *const *const c_char) -> NvrtcResult;
        compile_program: ["nvrtcCompileProgram"] fn(NvrtcProgram, c_int, *const *const c_char) -> NvrtcResult;
        destroy_program: ["nvrtcDestroyProgram"] fn(*mut NvrtcProgram) -> NvrtcResult;
        get_program_log_size: ["nvrtcGetProgramLogSize"] fn(NvrtcProgram, *mut usize) -> NvrtcResult;
        get_program_log: ["nvrtcGetProgramLog"] fn(NvrtcProgram, *mut c_char) -> NvrtcResult;
        get_ptx_size: ["nvrtcGetPTXSize"] fn(NvrtcProgram, *mut usize) -> NvrtcResult;
        get_ptx: ["nvrtcGetPTX"] fn(NvrtcProgram, *mut c_char) -> NvrtcResult;
        get_cubin_size: ["nvrtcGetCUBINSize"] fn(NvrtcProgram, *mut usize) -> NvrtcResult;
        get_cubin: ["nvrtcGetCUBIN"] fn(NvrtcProgram, *mut c_char) -> NvrtcResult;
    }
}

// SAFETY: the tables hold plain function pointers into libraries that stay
// loaded; the driver API and NVRTC are thread-safe.
unsafe impl Send for Driver {}
// SAFETY: as above.
unsafe impl Sync for Driver {}

/// Opens the driver library (first of `names`) and resolves every entry point.
pub fn load_driver(names: &[&str]) -> Result<Driver, String> {
    let lib = Library::open_any(names)?;
    Driver::resolve(&lib)
}

/// Opens NVRTC (first of `names`) and resolves every entry point.
pub fn load_nvrtc(names: &[&str]) -> Result<Nvrtc, String> {
    let lib = Library::open_any(names)?;
    Nvrtc::resolve(&lib)
}

impl Driver {
    /// `"CUDA_ERROR_NAME: description"` for a driver result code.
    pub fn describe(&self, code: CuResult) -> String {
        let mut name: *const c_char = std::ptr::null();
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: both calls write a pointer to a static string (or leave
        // NULL for an unknown code); we only read them when non-NULL.
        unsafe {
            (self.get_error_name)(code, &mut name);
            (self.get_error_string)(code, &mut text);
            let n = if name.is_null() {
                format!("CUresult {code}")
            } else {
                CStr::from_ptr(name).to_string_lossy().into_owned()
            };
            if text.is_null() {
                n
            } else {
                format!("{n}: {}", CStr::from_ptr(text).to_string_lossy())
            }
        }
    }
}

impl Nvrtc {
    /// The text of an NVRTC result code.
    pub fn describe(&self, code: NvrtcResult) -> String {
        // SAFETY: nvrtcGetErrorString returns a static string for any code.
        unsafe {
            let p = (self.get_error_string)(code);
            if p.is_null() {
                format!("nvrtcResult {code}")
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        }
    }
}

// SAFETY: as for Driver.
unsafe impl Send for Nvrtc {}
// SAFETY: as for Driver.
unsafe impl Sync for Nvrtc {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_is_an_error_not_a_panic() {
        let e = load_driver(&["libgpucomm-no-such-library.so.9"])
            .err()
            .unwrap();
        assert!(e.contains("libgpucomm-no-such-library.so.9"), "{e}");
    }

    #[test]
    fn missing_symbol_is_an_error() {
        // libc is always there and has none of the driver's symbols.
        let e = load_driver(&["libc.so.6"]).err().unwrap();
        assert!(e.contains("cuInit"), "{e}");
    }

    #[test]
    fn nvrtc_is_looked_for_by_name_first_then_in_the_toolkit_folders() {
        let c = nvrtc_candidates();
        assert_eq!(&c[..NVRTC_NAMES.len()], NVRTC_NAMES);
        assert!(c.contains(&"/usr/local/cuda/lib64/libnvrtc.so.13".to_string()));
        let arch = std::env::consts::ARCH;
        assert!(c.contains(&format!(
            "/usr/local/cuda/targets/{arch}-linux/lib/libnvrtc.so"
        )));
    }

    #[test]
    fn missing_paths_are_not_listed_in_the_error_but_missing_names_are() {
        let e = Library::open_any(&["/nonexistent/gpucomm/libx.so", "libgpucomm-nonexistent.so"])
            .err()
            .unwrap();
        assert!(!e.contains("/nonexistent/"), "{e}");
        assert!(e.contains("libgpucomm-nonexistent.so"), "{e}");
    }

    #[test]
    fn only_missing_paths_or_an_empty_name_still_say_what_was_tried() {
        // `--cuda-driver /nonexistent.so` said "cannot load the CUDA driver ()".
        let e = Library::open_any(&["/nonexistent/gpucomm/libx.so"])
            .err()
            .unwrap();
        assert_eq!(e, "no such file: /nonexistent/gpucomm/libx.so");
        // `--cuda-driver ''` opened the program itself and found no cuInit.
        let e = load_driver(&[""]).err().unwrap();
        assert!(e.contains("an empty library name"), "{e}");
    }

    #[test]
    fn ipc_handle_is_64_bytes() {
        assert_eq!(std::mem::size_of::<CuIpcHandle>(), 64);
    }
}
