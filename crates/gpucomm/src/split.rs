//! Splitting a communicator into groups ([`crate::Communicator::split`]), as
//! `MPI_Comm_split` and `ncclCommSplit` do.
//!
//! Every rank of the parent calls `split(color, key)`. One all-gather over
//! the parent tells each rank the colors and keys of all; the ranks of one
//! color form a group, numbered by key and then by parent rank. The group
//! then connects as a job of its own, by the mechanism that made the parent:
//!
//! - ranks that joined through the rendezvous store (processes) join again
//!   through the same store, their keys under the group's own namespace
//!   (`split<N>.<color>/` after the parent's), so the group's transports
//!   (shared memory, TCP) are set up exactly as a job's are;
//! - in-process ranks meet in their [`Hub`]: the group's rank 0 creates the
//!   group's in-process communicators and the others take theirs.
//!
//! A parent barrier ends the split, so no rank (the store's host among them)
//! returns, and may drop the parent, while another group still reads the
//! store. Before it each member counts itself out of its group's keys, and
//! the last one out deletes them (those its group's join set, and a failed
//! member's reason), whether the split succeeded or failed, so a job that
//! splits in a loop keeps the store's size flat. A split that fails on one
//! rank aborts the parent, so the other ranks fail at once rather than at
//! their timeout.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::comm::{InProcessOptions, Inner};
use crate::env::BootstrapConfig;
use crate::error::Error;
use crate::store::{ConnectError, StoreClient};
use crate::{Communicator, bootstrap};

/// How long a split retries connecting to the store, at most.
const STORE_RECONNECT: Duration = Duration::from_secs(2);

/// How a communicator was made, so that its groups are made the same way.
pub(crate) enum Origin {
    /// Joined through the rendezvous store (hosted by the root job's rank
    /// 0), whose address `config` holds as resolved. Each split connects
    /// anew: splits of several communicators of one rank may run at once
    /// (on several threads), and a connection's failure stays its own.
    Store { config: BootstrapConfig },
    /// One of [`Communicator::in_process`]'s ranks.
    InProcess(Arc<Hub>),
}

/// A group's communicators, each waiting for its rank to take it, or why
/// the group's rank 0 could not make them and how many ranks have yet to
/// read it.
type Made = Result<Vec<Option<Communicator>>, (String, usize)>;

/// Where in-process ranks meet to split, by the group's namespace.
#[derive(Default)]
pub(crate) struct Hub {
    groups: Mutex<Groups>,
    ready: Condvar,
}

/// The [`Hub`]'s groups, and the ranks that gave up waiting for a group
/// before its rank 0 published it: their communicators are not kept for
/// them (a group entry with a slot nobody takes stayed in the hub for
/// good, with the communicator in it).
#[derive(Default)]
struct Groups {
    made: HashMap<String, Made>,
    gave_up: HashMap<String, Vec<usize>>,
}

impl Hub {
    /// The group's rank 0: publishes the group's communicators (or why it
    /// could not make them) and takes its own.
    fn publish(
        &self,
        ns: &str,
        size: usize,
        made: Result<Vec<Communicator>, Error>,
    ) -> Result<Communicator, Error> {
        let mut groups = crate::lock(&self.groups);
        let gone = groups.gave_up.remove(ns).unwrap_or_default();
        let result = match made {
            Ok(comms) => {
                let mut slots: Vec<Option<Communicator>> = comms.into_iter().map(Some).collect();
                let mine = slots[0].take().expect("rank 0's communicator");
                for &r in &gone {
                    if let Some(slot) = slots.get_mut(r) {
                        *slot = None;
                    }
                }
                if slots.iter().any(Option::is_some) {
                    groups.made.insert(ns.to_string(), Ok(slots));
                }
                Ok(mine)
            }
            Err(e) => {
                let left = (size - 1).saturating_sub(gone.len());
                if left > 0 {
                    groups
                        .made
                        .insert(ns.to_string(), Err((e.to_string(), left)));
                }
                Err(e)
            }
        };
        self.ready.notify_all();
        result
    }

    /// Any other rank of the group: takes its communicator once rank 0 has
    /// published the group, waiting at most until `deadline`, and no longer
    /// once `stop` gives a reason (looked at every
    /// [`bootstrap::WATCH_SLICE`], as the store path does).
    fn take(
        &self,
        ns: &str,
        rank: usize,
        deadline: Instant,
        stop: &dyn Fn() -> Option<String>,
    ) -> Result<Communicator, Error> {
        let fail = |detail: String| Error::Bootstrap { rank, detail };
        let mut groups = crate::lock(&self.groups);
        let give_up = |groups: &mut Groups, why: String| {
            groups.gave_up.entry(ns.to_string()).or_default().push(rank);
            Err(fail(why))
        };
        loop {
            if let Some(group) = groups.made.get_mut(ns) {
                let (taken, done) = match group {
                    Ok(slots) => {
                        let mine = slots.get_mut(rank).and_then(Option::take);
                        let taken = mine.ok_or_else(|| {
                            fail(format!("split {ns}: no communicator for rank {rank}"))
                        });
                        (taken, slots.iter().all(Option::is_none))
                    }
                    Err((why, left)) => {
                        *left -= 1;
                        let why = format!("split {ns}: the group's rank 0 failed: {why}");
                        (Err(fail(why)), *left == 0)
                    }
                };
                if done {
                    groups.made.remove(ns);
                }
                return taken;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let why = format!("split {ns}: the group's rank 0 did not create it in time");
                return give_up(&mut groups, why);
            }
            groups = self
                .ready
                .wait_timeout(groups, left.min(bootstrap::WATCH_SLICE))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            // A group published meanwhile is taken (next pass) before a
            // reason to stop is honoured: giving up on it would leave the
            // slot in the hub.
            if !groups.made.contains_key(ns)
                && let Some(why) = stop()
            {
                return give_up(&mut groups, format!("split {ns}: {why}"));
            }
        }
    }
}

/// [`Communicator::split`].
pub(crate) fn split(
    comm: &Communicator,
    color: Option<u32>,
    key: i64,
) -> Result<Option<Communicator>, Error> {
    let inner = &comm.inner;
    let n = inner.world;
    // Every rank counts its splits alike (a split is a collective call).
    let seq = inner.splits.fetch_add(1, Ordering::Relaxed);
    let mine = [color.map_or(-1, i64::from), key];
    let mut all = vec![0i64; 2 * n];
    comm.all_gather(&mine, &mut all)?;
    let made = match color {
        None => Ok(None),
        Some(color) => {
            let mut members: Vec<(i64, usize)> = (0..n)
                .filter(|&r| all[2 * r] == i64::from(color))
                .map(|r| (all[2 * r + 1], r))
                .collect();
            members.sort_unstable();
            let me = members
                .iter()
                .position(|&(_, r)| r == inner.rank)
                .expect("this rank has its own color");
            let ns = format!("{}split{seq}.{color}/", inner.id);
            let peers: Vec<usize> = members.iter().map(|&(_, r)| r).collect();
            group(inner, &ns, me, &peers).map(Some)
        }
    };
    match made {
        Ok(made) => {
            // This member is done with its group's keys (it read its peers'
            // addresses): the last to be done deletes them, before the
            // parent barrier, so none is left once every rank has returned.
            let child = made.map(|(child, keys)| {
                if let Some(mut keys) = keys {
                    keys.leave();
                }
                child
            });
            comm.barrier()?;
            Ok(child)
        }
        Err(e) => {
            inner.abort(&format!("split failed on rank {}: {e}", inner.rank));
            Err(e)
        }
    }
}

/// A group's keys in the store (its join's, its reason to fail, its count
/// of members done), which the last member to be done with them deletes,
/// whether the split succeeded or failed (otherwise a job that splits in a
/// loop, and sometimes fails, grows the store without bound).
struct GroupKeys {
    client: StoreClient,
    ns: String,
    size: usize,
}

impl GroupKeys {
    /// The key counting the members done with the group's keys.
    fn left_key(ns: &str) -> String {
        format!("{ns}left")
    }

    /// Counts this member out; the last one out deletes every key of the
    /// group. By then no member reads them: each counts itself out when
    /// its join has returned, so a member's reason to fail is read by all
    /// the others before it goes. A store that cannot be reached leaves
    /// them behind, with a warning (as does a member killed before it
    /// counted itself out).
    fn leave(&mut self) {
        let left = Self::left_key(&self.ns);
        match self.client.add(&left, 1) {
            // Exactly the last: a count past the group's size is no count
            // of this group's (never deleted on it).
            Ok(k) if usize::try_from(k).is_ok_and(|k| k == self.size) => {
                let mut keys = bootstrap::join_keys(&self.ns, self.size);
                keys.push(bootstrap::failed_key(&self.ns));
                keys.push(left);
                if let Err(e) = self.client.delete_keys(&keys) {
                    tracing::warn!("split: could not delete the group's store keys: {e}");
                }
            }
            Ok(k) if usize::try_from(k).is_ok_and(|k| k > self.size) => tracing::warn!(
                "split: {k} members counted out of a group of {}: its store keys are left",
                self.size
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!("split: could not count this rank out of the group: {e}"),
        }
    }
}

/// This rank's communicator of the group `ns`: rank `me` of `members`
/// (their ranks in the parent), and, when it joined through the store, the
/// group's keys there, to count this member out of once the split no
/// longer needs them (a failed join has counted itself out).
fn group(
    inner: &Inner,
    ns: &str,
    me: usize,
    members: &[usize],
) -> Result<(Communicator, Option<GroupKeys>), Error> {
    let size = members.len();
    let timeout = inner.timeout();
    let deadline = crate::comm::deadline_after(timeout);
    // Give up when the parent is aborted, or when the parent's link to a
    // member says its process is gone (it left no reason).
    let stop = || -> Option<String> {
        if inner.abort.load(Ordering::Acquire) {
            return Some("the parent communicator was aborted".into());
        }
        let mut st = inner.state.lock().ok()?;
        members.iter().filter(|&&p| p != inner.rank).find_map(|&p| {
            let link = st.links.get_mut(p)?.as_mut()?;
            link.check_peer()
                .err()
                .map(|e| format!("rank {p} of the parent communicator: {}", e.failure))
        })
    };
    match &inner.origin {
        Some(Origin::Store { config }) => {
            let config = BootstrapConfig {
                rank: me,
                world_size: size,
                // The launcher's figures are the parent job's.
                local_rank: None,
                local_world_size: None,
                algorithm: inner.algorithm,
                timeout,
                ..config.clone()
            };
            if size == 1 {
                // No peer to meet: no store either (its host may be gone).
                let mut parts = bootstrap::alone(&config, ns);
                parts.origin = Some(Origin::Store { config });
                return Ok((Communicator::from_parts(parts), None));
            }
            // The store is up (the root job's rank 0 serves it): a refused
            // connection means it is gone, so do not retry for long.
            let mut client = match StoreClient::try_connect(
                &config.store_addr,
                &config.token,
                timeout.min(STORE_RECONNECT),
            ) {
                Ok(client) => client,
                Err(ConnectError::Unreachable(e)) => {
                    return Err(Error::Bootstrap {
                        rank: me,
                        detail: format!(
                            "split {ns}: the job's rendezvous store at {} is gone or \
                             unreachable ({e}): it lives as long as the job's rank 0's root \
                             communicator (end a job's splits with a barrier on it before \
                             dropping it)",
                            config.store_addr
                        ),
                    });
                }
                Err(ConnectError::Other(e)) => return Err(e),
            };
            let joined = bootstrap::join(&config, &mut client, deadline, ns, Some(&stop));
            let mut keys = GroupKeys {
                client,
                ns: ns.to_string(),
                size,
            };
            let mut parts = joined.inspect_err(|e| {
                // The group's other members stop waiting for this one.
                let failed = bootstrap::failed_key(ns);
                if keys.client.get(&failed).ok().flatten().is_none() {
                    let _ = keys
                        .client
                        .set(&failed, format!("rank {me}: {e}").as_bytes());
                }
                keys.leave();
            })?;
            parts.origin = Some(Origin::Store { config });
            parts.id = ns.to_string();
            Ok((Communicator::from_parts(parts), Some(keys)))
        }
        Some(Origin::InProcess(hub)) => {
            if me == 0 {
                let opts = InProcessOptions {
                    timeout: Some(timeout),
                    algorithm: inner.algorithm,
                    faults: Vec::new(),
                };
                hub.publish(ns, size, Communicator::in_process_with(size, &opts))
                    .map(|c| (c, None))
            } else {
                // Rank 0 made the group with its timeout; this rank's own.
                let c = hub.take(ns, me, deadline, &stop)?;
                c.set_timeout(timeout);
                Ok((c, None))
            }
        }
        None => Err(Error::InvalidArgument(
            "this communicator cannot be split (it was not made by Communicator::new or in_process)"
                .into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rank that gave up waiting for its group before the group's rank 0
    /// published it: its communicator is not kept for it, so the hub ends
    /// empty once the others have taken theirs (the entry, a communicator
    /// in it, stayed for good).
    #[test]
    fn a_rank_that_gave_up_leaves_nothing_in_the_hub() {
        let soon = || Instant::now() + Duration::from_secs(5);
        let empty = |hub: &Hub| {
            let g = crate::lock(&hub.groups);
            g.made.is_empty() && g.gave_up.is_empty()
        };
        // The group was made.
        let hub = Hub::default();
        let e = hub.take("g/", 2, Instant::now(), &|| None).unwrap_err();
        assert!(e.to_string().contains("did not create it in time"), "{e}");
        let made = Communicator::in_process(3).unwrap();
        let _mine = hub.publish("g/", 3, Ok(made)).unwrap();
        let _one = hub.take("g/", 1, soon(), &|| None).unwrap();
        assert!(empty(&hub));
        // Rank 0 could not make it: the failure is kept for rank 2 alone.
        let hub = Hub::default();
        let e = hub.take("h/", 1, soon(), &|| Some("stop".into()));
        assert!(e.unwrap_err().to_string().contains("stop"));
        let failed = Err(Error::InvalidArgument("no".into()));
        assert!(hub.publish("h/", 3, failed).is_err());
        let e = hub.take("h/", 2, soon(), &|| None).unwrap_err();
        assert!(e.to_string().contains("rank 0 failed"), "{e}");
        assert!(empty(&hub));
    }
}
