//! The slots' gate: a counted number of free slots, handed to waiting runs
//! tenant by tenant in turn (round robin over the tenants with waiting
//! runs, first come first served within a tenant), each tenant within its
//! own `max_concurrent`. One tenant's backlog never delays another's run by
//! more than one run of each tenant ahead of it.
//!
//! A waiter of no tenant (the claim loop of replicas, which learns the
//! run's tenant only from what it claims) takes its turn like a tenant
//! without a limit.
//!
//! A tenant may be held out until a time (its token quota is spent until
//! its window frees, see [`super::slots::Turn`]): its waiters are passed
//! over as a tenant at its limit is, and the gate hands slots out again
//! once the time has come.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::sync::lock;

/// Who a slot is for: a tenant, or none (see the module's documentation).
pub(super) type Who = Option<Arc<str>>;

/// A tenant's `max_concurrent`.
pub(super) type Limits = Arc<dyn Fn(&str) -> usize + Send + Sync>;

/// See the module's documentation.
pub(super) struct Gate {
    state: Mutex<State>,
    limits: Limits,
}

struct State {
    free: usize,
    closed: bool,
    /// Who has waiters, in the order their turns come.
    rotation: VecDeque<Who>,
    waiters: HashMap<Who, VecDeque<oneshot::Sender<Permit>>>,
    /// Slots held, by whom.
    held: HashMap<Who, usize>,
    /// Tenants passed over until a time.
    held_out: HashMap<Who, Instant>,
}

/// A slot taken from the gate; given back when dropped.
pub(super) struct Permit {
    gate: Arc<Gate>,
    who: Who,
    /// Cleared when the permit was never handed over (its waiter left):
    /// the gate took it back itself.
    live: bool,
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.live {
            self.gate.release(&self.who);
        }
    }
}

impl Gate {
    pub(super) fn new(slots: usize, limits: Limits) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                free: slots,
                closed: false,
                rotation: VecDeque::new(),
                waiters: HashMap::new(),
                held: HashMap::new(),
                held_out: HashMap::new(),
            }),
            limits,
        })
    }

    /// A slot at once, if one is free for `who` and nobody of its own
    /// waits before it (a tenant at its limit lets others past it).
    pub(super) fn try_acquire(self: &Arc<Self>, who: &Who) -> Option<Permit> {
        let mut state = lock(&self.state);
        self.takes_now(&mut state, who)
            .then(|| self.permit(who.clone()))
    }

    /// A slot once it is `who`'s turn; `None` once the gate is closed.
    pub(super) async fn acquire(self: &Arc<Self>, who: Who) -> Option<Permit> {
        self.wait(who, false).await
    }

    /// [`Gate::acquire`], first among `who`'s waiters: for a waiter that
    /// had its turn and gave it back (its tenant was held out).
    pub(super) async fn acquire_first(self: &Arc<Self>, who: Who) -> Option<Permit> {
        self.wait(who, true).await
    }

    async fn wait(self: &Arc<Self>, who: Who, first: bool) -> Option<Permit> {
        let receiver = {
            let mut state = lock(&self.state);
            if state.closed {
                return None;
            }
            if self.takes_now(&mut state, &who) {
                return Some(self.permit(who));
            }
            let (sender, receiver) = oneshot::channel();
            let queue = state.waiters.entry(who.clone()).or_default();
            let alone = queue.is_empty();
            if first {
                queue.push_front(sender);
            } else {
                queue.push_back(sender);
            }
            if alone {
                state.rotation.push_back(who);
            }
            receiver
        };
        receiver.await.ok()
    }

    /// Passes `who`'s waiters over until `until`; then hands out free
    /// slots again, theirs among them.
    pub(super) fn hold_out(self: &Arc<Self>, who: &Who, until: Instant) {
        lock(&self.state).held_out.insert(who.clone(), until);
        let gate = Arc::clone(self);
        let who = who.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(until).await;
            let mut state = lock(&gate.state);
            if state
                .held_out
                .get(&who)
                .is_some_and(|held| *held <= Instant::now())
            {
                state.held_out.remove(&who);
            }
            gate.dispatch(&mut state);
        });
    }

    /// Hands out no more slots; those waiting get none.
    pub(super) fn close(&self) {
        let mut state = lock(&self.state);
        state.closed = true;
        state.waiters.clear();
        state.rotation.clear();
    }

    /// Slots held now by `who`.
    #[cfg(test)]
    pub(super) fn held(&self, who: &Who) -> usize {
        lock(&self.state).held.get(who).copied().unwrap_or(0)
    }

    fn takes_now(&self, state: &mut State, who: &Who) -> bool {
        // The maps are looked into only when they hold anything: a server
        // whose slots are free, with no tenant limited, hashes nothing.
        let waiting = !state.waiters.is_empty()
            && state
                .waiters
                .get(who)
                .is_some_and(|queue| !queue.is_empty());
        let ok = !state.closed && state.free > 0 && !waiting && self.under_limit(state, who);
        if ok {
            state.free -= 1;
            if self.counts(who) {
                *state.held.entry(who.clone()).or_default() += 1;
            }
        }
        ok
    }

    /// Whether the slots `who` holds are counted: a tenant's, when it has
    /// a limit.
    fn counts(&self, who: &Who) -> bool {
        who.as_deref()
            .is_some_and(|tenant| (self.limits)(tenant) != usize::MAX)
    }

    fn under_limit(&self, state: &State, who: &Who) -> bool {
        if !state.held_out.is_empty()
            && state
                .held_out
                .get(who)
                .is_some_and(|until| Instant::now() < *until)
        {
            return false;
        }
        match who {
            Some(tenant) => {
                let limit = (self.limits)(tenant);
                limit == usize::MAX || state.held.get(who).copied().unwrap_or(0) < limit
            }
            None => true,
        }
    }

    fn permit(self: &Arc<Self>, who: Who) -> Permit {
        Permit {
            gate: Arc::clone(self),
            who,
            live: true,
        }
    }

    fn release(self: &Arc<Self>, who: &Who) {
        let mut state = lock(&self.state);
        state.free += 1;
        if !state.held.is_empty()
            && let Some(held) = state.held.get_mut(who)
        {
            *held = held.saturating_sub(1);
            if *held == 0 {
                state.held.remove(who);
            }
        }
        if !state.rotation.is_empty() {
            self.dispatch(&mut state);
        }
    }

    /// Hands free slots to waiters, whoever's turn it is first.
    fn dispatch(self: &Arc<Self>, state: &mut State) {
        let mut passed = 0;
        while state.free > 0 && passed < state.rotation.len() {
            let Some(who) = state.rotation.pop_front() else {
                break;
            };
            if !self.under_limit(state, &who) {
                state.rotation.push_back(who);
                passed += 1;
                continue;
            }
            let queue = state.waiters.entry(who.clone()).or_default();
            let Some(sender) = queue.pop_front() else {
                state.waiters.remove(&who);
                continue;
            };
            let more = !queue.is_empty();
            state.free -= 1;
            if self.counts(&who) {
                *state.held.entry(who.clone()).or_default() += 1;
            }
            if let Err(mut permit) = sender.send(self.permit(who.clone())) {
                // Its waiter left: the slot was never handed over.
                permit.live = false;
                state.free += 1;
                if let Some(held) = state.held.get_mut(&who) {
                    *held = held.saturating_sub(1);
                }
                if more {
                    state.rotation.push_front(who);
                } else {
                    state.waiters.remove(&who);
                }
                continue;
            }
            passed = 0;
            if more {
                state.rotation.push_back(who);
            } else {
                state.waiters.remove(&who);
            }
        }
        state.held.retain(|_, held| *held > 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(name: &str) -> Who {
        Some(Arc::from(name))
    }

    fn gate(slots: usize, a_limit: usize) -> Arc<Gate> {
        Gate::new(
            slots,
            Arc::new(move |name: &str| if name == "a" { a_limit } else { usize::MAX }),
        )
    }

    /// Queues `who`'s waiter and returns where its slot will arrive.
    async fn wait(gate: &Arc<Gate>, who: Who) -> tokio::task::JoinHandle<Option<Permit>> {
        let gate = Arc::clone(gate);
        let task = tokio::spawn(async move { gate.acquire(who).await });
        // Queued before the next waiter: the test's order is the queue's.
        tokio::task::yield_now().await;
        task
    }

    #[tokio::test]
    async fn slots_go_to_the_tenants_in_turn() {
        let gate = gate(1, usize::MAX);
        let first = gate.try_acquire(&tenant("a")).expect("a free slot");
        let mut waiting = Vec::new();
        for _ in 0..3 {
            waiting.push(("a", wait(&gate, tenant("a")).await));
        }
        waiting.push(("b", wait(&gate, tenant("b")).await));
        waiting.push(("c", wait(&gate, tenant("c")).await));
        let mut order = Vec::new();
        let mut held = first;
        let mut pending: Vec<_> = waiting.into_iter().map(Some).collect();
        while pending.iter().any(Option::is_some) {
            drop(held);
            // Exactly one waiter gets the freed slot.
            let index = loop {
                tokio::task::yield_now().await;
                if let Some(index) = pending
                    .iter()
                    .position(|entry| entry.as_ref().is_some_and(|(_, task)| task.is_finished()))
                {
                    break index;
                }
            };
            let (name, task) = pending[index].take().unwrap();
            order.push(name);
            held = task.await.unwrap().expect("a slot");
        }
        assert_eq!(order, ["a", "b", "c", "a", "a"]);
    }

    #[tokio::test]
    async fn a_tenant_at_its_limit_lets_others_past() {
        let gate = gate(3, 1);
        let a = gate.try_acquire(&tenant("a")).expect("a's one slot");
        assert!(
            gate.try_acquire(&tenant("a")).is_none(),
            "a is at its limit"
        );
        let queued_a = wait(&gate, tenant("a")).await;
        let b = gate.try_acquire(&tenant("b")).expect("b passes a's waiter");
        // Only a limited tenant's slots are counted.
        assert_eq!(gate.held(&tenant("b")), 0);
        assert_eq!(gate.held(&tenant("a")), 1);
        drop(b);
        assert!(
            !queued_a.is_finished(),
            "a free slot is not a's while a is at its limit"
        );
        drop(a);
        let second = queued_a
            .await
            .unwrap()
            .expect("a's turn once its run ended");
        assert_eq!(gate.held(&tenant("a")), 1);
        drop(second);
        assert_eq!(gate.held(&tenant("a")), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_tenant_held_out_is_passed_over_until_its_time_then_served_first_in_line() {
        let gate = gate(1, usize::MAX);
        let first = gate.try_acquire(&tenant("a")).expect("a free slot");
        let a_late = wait(&gate, tenant("a")).await;
        // a's run had its turn and gave it back: first in a's line again.
        gate.hold_out(
            &tenant("a"),
            Instant::now() + std::time::Duration::from_secs(60),
        );
        let a_again = {
            let gate = Arc::clone(&gate);
            let task = tokio::spawn(async move { gate.acquire_first(tenant("a")).await });
            tokio::task::yield_now().await;
            task
        };
        let b = wait(&gate, tenant("b")).await;
        drop(first);
        let b_slot = b.await.unwrap().expect("b passes a, held out");
        assert!(!a_again.is_finished() && !a_late.is_finished());
        drop(b_slot);
        tokio::task::yield_now().await;
        assert!(!a_again.is_finished(), "a is held out for a minute");
        tokio::time::sleep(std::time::Duration::from_secs(61)).await;
        let slot = a_again
            .await
            .unwrap()
            .expect("a's first run, once its time came");
        assert!(!a_late.is_finished());
        drop(slot);
        assert!(a_late.await.unwrap().is_some());
    }

    #[tokio::test]
    async fn a_waiter_that_left_gives_its_turn_on_and_close_ends_the_rest() {
        let gate = gate(1, usize::MAX);
        let first = gate.try_acquire(&None).unwrap();
        let gone = wait(&gate, tenant("a")).await;
        let next = wait(&gate, tenant("b")).await;
        gone.abort();
        let _ = gone.await;
        drop(first);
        let slot = next.await.unwrap().expect("b's turn");
        let last = wait(&gate, tenant("c")).await;
        gate.close();
        assert!(last.await.unwrap().is_none(), "a closed gate gives no slot");
        drop(slot);
        assert!(gate.try_acquire(&tenant("c")).is_none());
    }
}
