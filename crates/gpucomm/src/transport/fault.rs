//! Fault injection as a wrapper around any [`Link`] (smoltcp's `phy` style):
//! the core has no test flags; tests wrap links instead.

use super::{Link, RecvReq, SendReq, WaitHandle, XferState, ZeroCopy};
use crate::error::{LinkError, TransportKind};

/// A fault to inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// After this many completed sends, the link fails as if the peer vanished
    /// (and tells the peer, so both sides see a closed link).
    BreakAfterSends(u64),
    /// Every send stalls forever (the peer sees nothing): only the timeout ends it.
    Blackhole,
    /// Every send completes this long after its data went (a slow link):
    /// a call takes longer, without any one wait taking longer than this.
    /// A delay past what an `Instant` can hold never completes.
    Delay(std::time::Duration),
}

pub(crate) struct FaultyLink {
    inner: Box<dyn Link>,
    fault: Fault,
    sends: u64,
    broken: bool,
    /// Under [`Fault::Delay`]: per channel, when its send in hand (whose
    /// data went) may report completion (`None`: never).
    held: Vec<(usize, Option<std::time::Instant>)>,
}

impl FaultyLink {
    pub fn new(inner: Box<dyn Link>, fault: Fault) -> Self {
        FaultyLink {
            inner,
            fault,
            sends: 0,
            broken: false,
            held: Vec::new(),
        }
    }
    fn broken_err(&self) -> LinkError {
        LinkError::gone("fault injected: link broken")
    }
}

impl Link for FaultyLink {
    fn kind(&self) -> TransportKind {
        self.inner.kind()
    }
    fn zero_copy_ok(&self, zc: &ZeroCopy) -> bool {
        self.inner.zero_copy_ok(zc)
    }
    fn poll_send(
        &mut self,
        ch: usize,
        req: &SendReq,
        st: &mut XferState,
    ) -> Result<bool, LinkError> {
        if self.broken {
            return Err(self.broken_err());
        }
        match self.fault {
            Fault::Blackhole => Ok(false),
            Fault::Delay(d) => {
                let now = std::time::Instant::now();
                if let Some(i) = self.held.iter().position(|&(c, _)| c == ch) {
                    let ready = self.held[i].1.is_some_and(|t| now >= t);
                    if ready {
                        self.held.swap_remove(i);
                    }
                    return Ok(ready);
                }
                if self.inner.poll_send(ch, req, st)? {
                    self.held.push((ch, now.checked_add(d)));
                }
                Ok(false)
            }
            Fault::BreakAfterSends(n) => {
                if self.sends >= n {
                    self.broken = true;
                    self.inner.shutdown();
                    return Err(self.broken_err());
                }
                let done = self.inner.poll_send(ch, req, st)?;
                if done {
                    self.sends += 1;
                }
                Ok(done)
            }
        }
    }
    fn poll_recv(
        &mut self,
        ch: usize,
        req: &RecvReq,
        st: &mut XferState,
    ) -> Result<bool, LinkError> {
        if self.broken {
            return Err(self.broken_err());
        }
        self.inner.poll_recv(ch, req, st)
    }
    fn check_peer(&mut self) -> Result<(), LinkError> {
        if self.broken {
            return Err(self.broken_err());
        }
        self.inner.check_peer()
    }
    fn wait_handle(&self) -> WaitHandle {
        self.inner.wait_handle()
    }
    fn shutdown(&mut self) {
        self.inner.shutdown()
    }
    fn withdraw(&mut self, channel: usize, st: &XferState, give_up: std::time::Instant) {
        self.inner.withdraw(channel, st, give_up)
    }
}
