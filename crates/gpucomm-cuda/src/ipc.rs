//! CUDA IPC handles and the descriptor ranks exchange through the
//! rendezvous store to share device memory.
//!
//! A `cuIpcMemHandle` / `cuIpcEventHandle` is 64 opaque bytes. A rank that
//! exports a buffer publishes an [`IpcBufferDesc`] (handle, length, device,
//! process id, and an optional event handle that marks when the data is
//! ready); the peer decodes it, checks it, and opens the handle. The wire form
//! is versioned and every field is checked on decode: a descriptor from a
//! peer is untrusted input.

use crate::Error;
use crate::ffi::CuIpcHandle;

/// Bytes in a CUDA IPC handle.
pub const IPC_HANDLE_BYTES: usize = 64;

macro_rules! handle_type {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name([u8; IPC_HANDLE_BYTES]);

        impl $name {
            /// The handle's 64 bytes, to send to a peer.
            pub fn to_bytes(&self) -> [u8; IPC_HANDLE_BYTES] {
                self.0
            }

            /// A handle from 64 bytes a peer sent (any other length is an error).
            pub fn from_bytes(b: &[u8]) -> Result<Self, Error> {
                let a: [u8; IPC_HANDLE_BYTES] = b.try_into().map_err(|_| Error::Malformed {
                    what: stringify!($name),
                    detail: format!("{} bytes, a CUDA IPC handle has {IPC_HANDLE_BYTES}", b.len()),
                })?;
                Ok($name(a))
            }

            pub(crate) fn from_raw(h: CuIpcHandle) -> Self {
                $name(h.reserved)
            }

            pub(crate) fn raw(&self) -> CuIpcHandle {
                CuIpcHandle { reserved: self.0 }
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}(", stringify!($name))?;
                for b in &self.0[..8] {
                    write!(f, "{b:02x}")?;
                }
                write!(f, "...)")
            }
        }
    };
}

handle_type!(
    /// A `cuIpcMemHandle`: names a device allocation for other processes.
    IpcMemHandle
);
handle_type!(
    /// A `cuIpcEventHandle`: names an interprocess event for other processes.
    IpcEventHandle
);

/// What a rank publishes so a peer process can map one of its device buffers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpcBufferDesc {
    /// The exporter's process id (a handle cannot be opened by its own process).
    pub pid: u32,
    /// The exporter's CUDA device ordinal.
    pub device: u32,
    /// Bytes the peer may use, from the start of the allocation.
    pub len: u64,
    /// The allocation's handle.
    pub mem: IpcMemHandle,
    /// An interprocess event recorded when the buffer's contents are ready.
    pub ready: Option<IpcEventHandle>,
}

const MAGIC: [u8; 4] = *b"GCIP";
const VERSION: u8 = 1;
const HEADER: usize = 4 + 1 + 1 + 2 + 4 + 4 + 8;

impl IpcBufferDesc {
    /// Encoded length with and without the ready event.
    pub const fn encoded_len(with_event: bool) -> usize {
        HEADER + IPC_HANDLE_BYTES + if with_event { IPC_HANDLE_BYTES } else { 0 }
    }

    /// The wire form: `"GCIP"`, version 1, flags (bit 0: event present),
    /// 2 reserved zero bytes, pid, device (u32 LE), len (u64 LE), the memory
    /// handle, then the event handle when present.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::encoded_len(self.ready.is_some()));
        v.extend_from_slice(&MAGIC);
        v.push(VERSION);
        v.push(u8::from(self.ready.is_some()));
        v.extend_from_slice(&[0, 0]);
        v.extend_from_slice(&self.pid.to_le_bytes());
        v.extend_from_slice(&self.device.to_le_bytes());
        v.extend_from_slice(&self.len.to_le_bytes());
        v.extend_from_slice(&self.mem.to_bytes());
        if let Some(e) = &self.ready {
            v.extend_from_slice(&e.to_bytes());
        }
        v
    }

    /// Decodes and checks bytes from a peer.
    pub fn from_bytes(b: &[u8]) -> Result<Self, Error> {
        let bad = |detail: String| Error::Malformed {
            what: "IPC buffer descriptor",
            detail,
        };
        if b.len() < HEADER {
            return Err(bad(format!(
                "{} bytes, shorter than the {HEADER}-byte header",
                b.len()
            )));
        }
        if b[..4] != MAGIC {
            return Err(bad(format!("bad magic {:02x?}", &b[..4])));
        }
        if b[4] != VERSION {
            return Err(bad(format!("version {}, this build reads {VERSION}", b[4])));
        }
        let flags = b[5];
        if flags > 1 || b[6] != 0 || b[7] != 0 {
            return Err(bad(format!(
                "unknown flags {flags:#x} or nonzero reserved bytes"
            )));
        }
        let with_event = flags == 1;
        let want = Self::encoded_len(with_event);
        if b.len() != want {
            return Err(bad(format!("{} bytes, expected {want}", b.len())));
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let len = u64::from_le_bytes(b[16..24].try_into().expect("8 bytes"));
        if len == 0 {
            return Err(bad("zero-length buffer".into()));
        }
        let mem = IpcMemHandle::from_bytes(&b[HEADER..HEADER + IPC_HANDLE_BYTES])?;
        let ready = if with_event {
            Some(IpcEventHandle::from_bytes(&b[HEADER + IPC_HANDLE_BYTES..])?)
        } else {
            None
        };
        Ok(IpcBufferDesc {
            pid: u32_at(8),
            device: u32_at(12),
            len,
            mem,
            ready,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(seed: u8) -> [u8; 64] {
        std::array::from_fn(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
    }

    #[test]
    fn handles_round_trip_all_64_bytes() {
        let h = IpcMemHandle::from_bytes(&handle(3)).unwrap();
        assert_eq!(h.to_bytes(), handle(3));
        assert_eq!(IpcMemHandle::from_raw(h.raw()), h);
        let e = IpcEventHandle::from_bytes(&handle(9)).unwrap();
        assert_eq!(e.to_bytes(), handle(9));
        assert!(IpcMemHandle::from_bytes(&[0; 63]).is_err());
        assert!(IpcEventHandle::from_bytes(&[0; 65]).is_err());
    }

    #[test]
    fn descriptor_round_trips_with_and_without_event() {
        for ready in [
            None,
            Some(IpcEventHandle::from_bytes(&handle(200)).unwrap()),
        ] {
            let d = IpcBufferDesc {
                pid: 4242,
                device: 3,
                len: (1 << 33) + 5,
                mem: IpcMemHandle::from_bytes(&handle(1)).unwrap(),
                ready,
            };
            let b = d.to_bytes();
            assert_eq!(b.len(), IpcBufferDesc::encoded_len(ready.is_some()));
            assert_eq!(IpcBufferDesc::from_bytes(&b).unwrap(), d);
        }
    }

    #[test]
    fn descriptor_rejects_malformed_input() {
        let d = IpcBufferDesc {
            pid: 1,
            device: 0,
            len: 64,
            mem: IpcMemHandle::from_bytes(&handle(0)).unwrap(),
            ready: None,
        };
        let good = d.to_bytes();
        // Every truncation fails cleanly.
        for n in 0..good.len() {
            assert!(IpcBufferDesc::from_bytes(&good[..n]).is_err(), "prefix {n}");
        }
        let mut long = good.clone();
        long.push(0);
        assert!(IpcBufferDesc::from_bytes(&long).is_err());
        let mut bad = good.clone();
        bad[0] = b'X';
        assert!(
            IpcBufferDesc::from_bytes(&bad)
                .unwrap_err()
                .to_string()
                .contains("magic")
        );
        let mut bad = good.clone();
        bad[4] = 2;
        assert!(
            IpcBufferDesc::from_bytes(&bad)
                .unwrap_err()
                .to_string()
                .contains("version")
        );
        let mut bad = good.clone();
        bad[5] = 1; // claims an event that is not there
        assert!(IpcBufferDesc::from_bytes(&bad).is_err());
        let mut bad = good.clone();
        bad[16..24].copy_from_slice(&0u64.to_le_bytes());
        assert!(
            IpcBufferDesc::from_bytes(&bad)
                .unwrap_err()
                .to_string()
                .contains("zero-length")
        );
    }
}
