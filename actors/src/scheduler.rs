//! Admission control: at most `max_inflight` verbs run at once, a shell runs with no other verb
//! beside it, and at most `max_inflight` run_code bodies run at once.
//!
//! Verbs and bodies are two pools. A body holds a body slot while it runs and each verb it calls
//! takes a verb slot like any other call, so a body waiting for its own verb never waits on
//! itself: verb slots are held only by verbs, which never wait for a slot of either pool.
//!
//! Calls are admitted in arrival order within a pool: a call that cannot start yet waits, and
//! calls that arrive after it wait behind it, so a shell is never starved by a stream of small
//! calls.
//!
//! The scheduler is a small state behind a lock, not an actor: verbs are admitted from the
//! server's arbiter and from the JS engine threads alike, and a message to an actor on another
//! thread and its answer cost a cross-thread wake-up each (a body's sequential `gm.*` calls went
//! from 13.5 to 45 µs each). The lock is held for a few instructions, never across an await.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

/// Which slots a call takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pool {
    /// A verb (from a tools/call or from a body), or a run-loop step.
    Verb,
    /// A run_code body.
    Body,
}

/// A handle to the scheduler; clones share it.
#[derive(Clone)]
pub struct Scheduler {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scheduler")
    }
}

struct State {
    verbs: Slots,
    bodies: Slots,
}

impl State {
    fn slots(&mut self, pool: Pool) -> &mut Slots {
        match pool {
            Pool::Verb => &mut self.verbs,
            Pool::Body => &mut self.bodies,
        }
    }
}

/// One pool's slots and the calls waiting for them.
struct Slots {
    max: usize,
    running: usize,
    exclusive_running: bool,
    queue: VecDeque<Waiting>,
}

struct Waiting {
    exclusive: bool,
    reply: oneshot::Sender<Permit>,
}

/// The answer to [`Scheduler::try_admit`]: a slot now (the usual case, with no channel in
/// between), or a receiver that gets one when the calls ahead are done.
#[derive(Debug)]
pub enum Admission {
    Now(Permit),
    Queued(oneshot::Receiver<Permit>),
}

impl Admission {
    /// Waits for the slot; `None` if the scheduler went away first.
    pub async fn permit(self) -> Option<Permit> {
        match self {
            Admission::Now(permit) => Some(permit),
            Admission::Queued(rx) => rx.await.ok(),
        }
    }
}

/// A running slot. Dropping it frees the slot.
#[derive(Debug)]
pub struct Permit {
    /// Calls of its pool running when this one was admitted, this one included.
    pub in_flight: usize,
    pool: Pool,
    exclusive: bool,
    scheduler: Scheduler,
    /// False for a permit whose slot was released another way (its caller had gone).
    armed: bool,
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.armed {
            self.scheduler.release(self.pool, self.exclusive);
        }
    }
}

impl Slots {
    fn new(max: usize) -> Self {
        Self { max: max.max(1), running: 0, exclusive_running: false, queue: VecDeque::new() }
    }

    fn can_start(&self, exclusive: bool) -> bool {
        if self.exclusive_running {
            return false;
        }
        if exclusive {
            self.running == 0
        } else {
            self.running < self.max
        }
    }

    /// Takes a slot; returns the calls running now, this one included.
    fn take(&mut self, exclusive: bool) -> usize {
        self.running += 1;
        self.exclusive_running = exclusive;
        self.running
    }

    fn release(&mut self, exclusive: bool) {
        self.running = self.running.saturating_sub(1);
        if exclusive {
            self.exclusive_running = false;
        }
    }

    /// The waiting calls that may start now, in order (stopping at the first that may not),
    /// each with its slot taken and the calls running when it was.
    fn startable(&mut self) -> Vec<(Waiting, usize)> {
        let mut out = Vec::new();
        while let Some(next) = self.queue.front() {
            if !self.can_start(next.exclusive) {
                break;
            }
            let Some(next) = self.queue.pop_front() else { break };
            let in_flight = self.take(next.exclusive);
            out.push((next, in_flight));
        }
        out
    }
}

impl Scheduler {
    /// `max_inflight` verbs and `max_inflight` bodies may run at once.
    pub fn new(max_inflight: usize) -> Self {
        let state = State { verbs: Slots::new(max_inflight), bodies: Slots::new(max_inflight) };
        Self { state: Arc::new(Mutex::new(state)) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Nothing panics while holding the lock; a poisoned one is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks for a slot. `exclusive` calls (a shell) run with nothing else of their pool beside
    /// them.
    pub fn try_admit(&self, pool: Pool, exclusive: bool) -> Admission {
        let mut state = self.lock();
        let slots = state.slots(pool);
        if slots.queue.is_empty() && slots.can_start(exclusive) {
            let in_flight = slots.take(exclusive);
            drop(state);
            return Admission::Now(Permit { in_flight, pool, exclusive, scheduler: self.clone(), armed: true });
        }
        let (tx, rx) = oneshot::channel();
        slots.queue.push_back(Waiting { exclusive, reply: tx });
        Admission::Queued(rx)
    }

    /// Asks for a slot and waits for it. Dropping the future gives up the place in line.
    pub async fn admit(&self, pool: Pool, exclusive: bool) -> Option<Permit> {
        self.try_admit(pool, exclusive).permit().await
    }

    /// Frees a slot and hands the freed room to the calls waiting for it. A waiter that has gone
    /// gives its slot straight back, in this loop (not by dropping its permit, which would take
    /// the lock again from inside this call).
    fn release(&self, pool: Pool, exclusive: bool) {
        let mut freed = vec![exclusive];
        while let Some(exclusive) = freed.pop() {
            let started = {
                let mut state = self.lock();
                let slots = state.slots(pool);
                slots.release(exclusive);
                slots.startable()
            };
            for (next, in_flight) in started {
                let permit =
                    Permit { in_flight, pool, exclusive: next.exclusive, scheduler: self.clone(), armed: true };
                if let Err(mut unwanted) = next.reply.send(permit) {
                    unwanted.armed = false;
                    freed.push(unwanted.exclusive);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Asks for a slot; the receiver holds the permit at once when the call may start now.
    async fn ask(s: &Scheduler, pool: Pool, exclusive: bool) -> oneshot::Receiver<Permit> {
        match s.try_admit(pool, exclusive) {
            Admission::Queued(rx) => rx,
            Admission::Now(permit) => {
                let (tx, rx) = oneshot::channel();
                tx.send(permit).expect("receiver held");
                rx
            }
        }
    }

    async fn verb(s: &Scheduler, exclusive: bool) -> oneshot::Receiver<Permit> {
        ask(s, Pool::Verb, exclusive).await
    }

    #[actix_rt::test]
    async fn a_call_with_a_free_slot_is_admitted_at_once_and_a_full_scheduler_queues_it() {
        let s = Scheduler::new(1);
        let first = s.try_admit(Pool::Verb, false);
        let Admission::Now(permit) = first else { panic!("a free slot admits at once: {first:?}") };
        let second = s.try_admit(Pool::Verb, false);
        assert!(matches!(second, Admission::Queued(_)), "{second:?}");
        drop(permit);
        let permit = second.permit().await.expect("admitted once the first is done");
        assert_eq!(permit.in_flight, 1);
    }

    #[actix_rt::test]
    async fn a_full_scheduler_queues_until_a_slot_is_released() {
        let s = Scheduler::new(2);
        let a = verb(&s, false).await.await.expect("a");
        let b = verb(&s, false).await.await.expect("b");
        assert_eq!((a.in_flight, b.in_flight), (1, 2));
        let mut c = verb(&s, false).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(c.try_recv().is_err(), "third call must wait");
        drop(a);
        let c = c.await.expect("c admitted after release");
        assert_eq!(c.in_flight, 2);
    }

    #[actix_rt::test]
    async fn an_exclusive_call_runs_alone_and_later_calls_wait_behind_it() {
        let s = Scheduler::new(8);
        let a = verb(&s, false).await.await.expect("a");
        let mut shell = verb(&s, true).await;
        let mut after = verb(&s, false).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(shell.try_recv().is_err());
        assert!(after.try_recv().is_err(), "a call behind a waiting shell waits too");
        drop(a);
        let shell = shell.await.expect("shell");
        assert_eq!(shell.in_flight, 1);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(after.try_recv().is_err(), "nothing runs beside a shell");
        drop(shell);
        after.await.expect("after");
    }

    #[actix_rt::test]
    async fn calls_released_together_start_together_with_their_own_in_flight_counts() {
        let s = Scheduler::new(2);
        let shell = verb(&s, true).await.await.expect("shell");
        let b = verb(&s, false).await;
        let c = verb(&s, false).await;
        drop(shell);
        let (b, c) = (b.await.expect("b"), c.await.expect("c"));
        assert_eq!((b.in_flight, c.in_flight), (1, 2));
    }

    #[actix_rt::test]
    async fn full_body_slots_never_keep_their_bodies_verbs_waiting() {
        // Every body slot is taken, as by max-inflight bodies each waiting for a verb of its own:
        // the verbs still start, since bodies hold no verb slot.
        let s = Scheduler::new(2);
        let bodies =
            [ask(&s, Pool::Body, false).await.await.expect("b1"), ask(&s, Pool::Body, false).await.await.expect("b2")];
        let mut third = ask(&s, Pool::Body, false).await;
        let v1 = verb(&s, false).await.await.expect("a verb of body 1");
        let v2 = verb(&s, false).await.await.expect("a verb of body 2");
        assert_eq!((v1.in_flight, v2.in_flight), (1, 2));
        assert!(third.try_recv().is_err(), "a third body waits for a body slot");
        drop(bodies);
        third.await.expect("third body");
    }

    #[actix_rt::test]
    async fn a_waiter_that_went_away_gives_its_slot_to_the_next() {
        let s = Scheduler::new(1);
        let first = verb(&s, false).await.await.expect("first");
        let gone = verb(&s, false).await;
        let mut next = verb(&s, false).await;
        drop(gone);
        drop(first);
        let next = next.try_recv().expect("the slot passed over the caller that went away");
        assert_eq!(next.in_flight, 1);
        drop(next);
        assert!(matches!(s.try_admit(Pool::Verb, true), Admission::Now(_)), "every slot came back");
    }
}
