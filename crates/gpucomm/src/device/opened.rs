//! [`Opened`]: peer allocations mapped through IPC, counted as CUDA counts
//! them.

use std::collections::HashMap;

use super::DevicePtr;

/// Peer allocations this process has opened through IPC, by local address.
///
/// CUDA maps an allocation once per context: opening a handle that is
/// already open returns the same address and adds a reference, and each
/// close drops one, the last unmapping it (`cuIpcOpenMemHandle`,
/// `cuIpcCloseMemHandle`). Two users of one backend (ranks as threads of a
/// process, a communicator and its split child) may hold the same
/// mapping; each closes its own reference, and the mapping stays until
/// the last. (A table keyed by address alone replaced the first open by
/// the second, and the first close unmapped what the other user still
/// cached.)
pub(crate) struct Opened<T> {
    map: HashMap<DevicePtr, (T, usize)>,
}

/// What [`Opened::close`] did.
pub(crate) enum Close<T> {
    /// `ptr` was not open.
    NotOpen,
    /// A reference went; others keep the mapping.
    Kept,
    /// The last reference went: the caller drops this (unmapping it).
    Last(T),
}

impl<T> Default for Opened<T> {
    fn default() -> Self {
        Opened {
            map: HashMap::new(),
        }
    }
}

impl<T> Opened<T> {
    /// Records an open of `ptr`, whose mapping `value` holds. When `ptr` is
    /// open already, adds a reference and gives `value` back: the caller
    /// drops it, and the mapping recorded first stands for every reference.
    #[must_use = "a duplicate handed back is the caller's to drop"]
    pub fn open(&mut self, ptr: DevicePtr, value: T) -> Option<T> {
        match self.map.get_mut(&ptr) {
            Some((_, refs)) => {
                *refs += 1;
                Some(value)
            }
            None => {
                self.map.insert(ptr, (value, 1));
                None
            }
        }
    }

    /// Drops one reference to `ptr`.
    pub fn close(&mut self, ptr: DevicePtr) -> Close<T> {
        match self.map.get_mut(&ptr) {
            None => Close::NotOpen,
            Some((_, refs)) if *refs > 1 => {
                *refs -= 1;
                Close::Kept
            }
            Some(_) => Close::Last(self.map.remove(&ptr).expect("present").0),
        }
    }

    /// Every open mapping, with its address.
    pub fn iter(&self) -> impl Iterator<Item = (DevicePtr, &T)> {
        self.map.iter().map(|(&p, (v, _))| (p, v))
    }
}
