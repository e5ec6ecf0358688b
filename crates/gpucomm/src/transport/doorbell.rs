//! The doorbell handshake between a rank that runs out of work and the peers
//! that give it more, without a system call on the hot path.
//!
//! A rank's region holds two words: `sleepers` (how many of its engine
//! threads are about to sleep or sleep) and the `doorbell` futex word.
//!
//! * The sleeper ([`nap`]) announces itself (`sleepers += 1`), then reads the
//!   doorbell, then looks for work once more, and only if it found none sleeps
//!   on the futex while the doorbell still holds the value it read.
//! * A peer that made work for it (published a slot, freed one) calls
//!   [`ring`] after its release store: if anyone sleeps it bumps the doorbell
//!   and wakes the futex; else it does nothing (no system call).
//!
//! No wake-up is lost: this is store buffering (the peer stores its work then
//! loads `sleepers`; the sleeper stores `sleepers` then loads the work), which
//! the C++/Rust memory model forbids only with a `SeqCst` fence on both sides
//! ([atomics.order] p4.4: were both loads to miss, each fence would precede
//! the other in the single total order). So each side fences between its
//! store and its load. If the peer sees the sleeper, it bumps the doorbell:
//! the sleeper either read the bumped value (and, synchronised with the bump,
//! sees the work) or the futex finds the value changed and returns. If the
//! peer does not see it, the sleeper's second look finds the work.
//!
//! Written once over [`Bell`], so that the shared-memory region
//! ([`super::ring::Region`], futex system calls) runs it and the loom model
//! below checks it in every interleaving and memory-model outcome, a lost
//! wake-up showing as a deadlock (the model's wait has no timeout; the real
//! one naps at most a few milliseconds, so a lost wake-up would cost latency,
//! not a hang).

use std::time::Duration;

/// The two words of a doorbell and the futex operations on it.
pub(crate) trait Bell {
    /// `sleepers += 1` (sequentially consistent).
    fn announce(&self);
    /// `sleepers -= 1`.
    fn retire(&self);
    /// `sleepers`, relaxed (the fence before it orders it).
    fn sleepers(&self) -> u32;
    /// The doorbell's value (sequentially consistent).
    fn bell(&self) -> u32;
    /// `doorbell += 1` (sequentially consistent).
    fn bump(&self);
    /// A sequentially consistent fence.
    fn fence(&self);
    /// Sleeps while the doorbell holds `v`, at most `max`.
    fn wait(&self, v: u32, max: Duration);
    /// Wakes every sleeper.
    fn wake_all(&self);
}

/// After publishing work for the bell's owner (a release store): wakes it if
/// it sleeps or is about to.
pub(crate) fn ring<B: Bell + ?Sized>(b: &B) {
    b.fence();
    if b.sleepers() > 0 {
        b.bump();
        b.wake_all();
    }
}

/// Runs `look` (a last look for work) between announcing a sleep and
/// sleeping, and sleeps at most `max` if it says so: `look` returns its
/// result and whether to sleep (nothing moved, work remains).
pub(crate) fn nap<B: Bell + ?Sized, T, E>(
    b: &B,
    max: Duration,
    look: impl FnOnce() -> Result<(T, bool), E>,
) -> Result<T, E> {
    b.announce();
    b.fence();
    let v = b.bell();
    let r = look();
    if let Ok((_, true)) = r {
        b.wait(v, max);
    }
    b.retire();
    r.map(|(t, _)| t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use loom::sync::atomic::{AtomicBool, AtomicU32, Ordering, fence};
    use loom::sync::{Arc, Condvar, Mutex};

    /// A futex in the model: the value check and the sleep are atomic with
    /// respect to wakes, as the kernel's hash-bucket lock makes them; no
    /// timeout, so a missed wake-up leaves the sleeper blocked for ever.
    #[derive(Default)]
    struct ModelBell {
        sleepers: AtomicU32,
        doorbell: AtomicU32,
        lock: Mutex<()>,
        cv: Condvar,
    }

    impl Bell for ModelBell {
        fn announce(&self) {
            self.sleepers.fetch_add(1, Ordering::SeqCst);
        }
        fn retire(&self) {
            self.sleepers.fetch_sub(1, Ordering::SeqCst);
        }
        fn sleepers(&self) -> u32 {
            self.sleepers.load(Ordering::Relaxed)
        }
        fn bell(&self) -> u32 {
            self.doorbell.load(Ordering::SeqCst)
        }
        fn bump(&self) {
            self.doorbell.fetch_add(1, Ordering::SeqCst);
        }
        fn fence(&self) {
            fence(Ordering::SeqCst);
        }
        fn wait(&self, v: u32, _max: Duration) {
            let g = self.lock.lock().unwrap();
            if self.doorbell.load(Ordering::SeqCst) == v {
                drop(self.cv.wait(g).unwrap());
            }
        }
        fn wake_all(&self) {
            let _g = self.lock.lock().unwrap();
            self.cv.notify_all();
        }
    }

    /// Every interleaving with at most `PREEMPTIONS` forced thread switches
    /// (loom's advice for models with locks: the full space is too large
    /// for a test run; bugs of this kind need one or two).
    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(PREEMPTIONS);
        b.check(f);
    }
    const PREEMPTIONS: usize = 3;

    /// A consumer that naps until a flag is set, and a producer that sets
    /// it and rings: in every interleaving the consumer sees the flag
    /// (loom fails the model as a deadlock if a wake-up is lost).
    #[test]
    fn no_wake_up_is_lost() {
        model(|| {
            let bell = Arc::new(ModelBell::default());
            let work = Arc::new(AtomicBool::new(false));
            let (b, w) = (bell.clone(), work.clone());
            let producer = loom::thread::spawn(move || {
                w.store(true, Ordering::Release);
                ring(&*b);
            });
            let mut naps = 0;
            loop {
                let seen = nap(&*bell, Duration::MAX, || {
                    let seen = work.load(Ordering::Acquire);
                    Ok::<_, ()>((seen, !seen))
                })
                .unwrap();
                if seen {
                    break;
                }
                naps += 1;
                // Woken (or the doorbell moved): the work is there now.
                assert!(naps < 2, "woken without the work");
            }
            producer.join().unwrap();
        });
    }

    /// Two producers and one consumer waiting for both.
    #[test]
    fn two_producers_wake_one_sleeper() {
        model(|| {
            let bell = Arc::new(ModelBell::default());
            let work = Arc::new(AtomicU32::new(0));
            let producers: Vec<_> = (0..2)
                .map(|_| {
                    let (b, w) = (bell.clone(), work.clone());
                    loom::thread::spawn(move || {
                        w.fetch_add(1, Ordering::Release);
                        ring(&*b);
                    })
                })
                .collect();
            let mut naps = 0;
            while nap(&*bell, Duration::MAX, || {
                let n = work.load(Ordering::Acquire);
                Ok::<_, ()>((n < 2, n < 2))
            })
            .unwrap()
            {
                // A wake can come for work already seen (a producer's
                // notify after its bump was read): no bound of two, but
                // no endless waking either.
                naps += 1;
                assert!(naps < 8, "the consumer keeps waking without the work");
            }
            for p in producers {
                p.join().unwrap();
            }
        });
    }
}
