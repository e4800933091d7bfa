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

use std::collections::VecDeque;

use actix::prelude::*;
use tokio::sync::oneshot;

/// Which slots a call takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pool {
    /// A verb (from a tools/call or from a body), or a run-loop step.
    Verb,
    /// A run_code body.
    Body,
}

pub struct Scheduler {
    verbs: Slots,
    bodies: Slots,
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

/// Ask for a slot. `exclusive` calls (a shell) run with nothing else of their pool beside them.
#[derive(Debug, Message)]
#[rtype(result = "Admission")]
pub struct Admit {
    pub pool: Pool,
    pub exclusive: bool,
}

/// The answer to [`Admit`]: a slot now (the usual case, with no channel in between), or a
/// receiver that gets one when the calls ahead are done.
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

/// Asks `scheduler` for a slot and waits for it; `None` when the scheduler is gone (gm is
/// stopping), in which case the call runs without one.
pub async fn admit(scheduler: &Addr<Scheduler>, pool: Pool, exclusive: bool) -> Option<Permit> {
    match scheduler.send(Admit { pool, exclusive }).await {
        Ok(admission) => admission.permit().await,
        Err(_) => None,
    }
}

#[derive(Debug, Message)]
#[rtype(result = "()")]
struct Release {
    pool: Pool,
    exclusive: bool,
}

/// A running slot. Dropping it frees the slot.
#[derive(Debug)]
pub struct Permit {
    /// Calls of its pool running when this one was admitted, this one included.
    pub in_flight: usize,
    pool: Pool,
    exclusive: bool,
    scheduler: Addr<Scheduler>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.scheduler.do_send(Release { pool: self.pool, exclusive: self.exclusive });
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
        Self { verbs: Slots::new(max_inflight), bodies: Slots::new(max_inflight) }
    }

    fn slots(&mut self, pool: Pool) -> &mut Slots {
        match pool {
            Pool::Verb => &mut self.verbs,
            Pool::Body => &mut self.bodies,
        }
    }

    fn admit_waiting(&mut self, pool: Pool, me: &Addr<Self>) {
        for (next, in_flight) in self.slots(pool).startable() {
            let permit = Permit { in_flight, pool, exclusive: next.exclusive, scheduler: me.clone() };
            // A caller that went away dropped its receiver: the permit comes back and is
            // dropped here, which sends the Release that frees the slot again.
            let _ = next.reply.send(permit);
        }
    }
}

impl Actor for Scheduler {
    type Context = Context<Self>;
}

impl Handler<Admit> for Scheduler {
    type Result = MessageResult<Admit>;
    fn handle(&mut self, msg: Admit, ctx: &mut Context<Self>) -> Self::Result {
        let slots = self.slots(msg.pool);
        if slots.queue.is_empty() && slots.can_start(msg.exclusive) {
            let in_flight = slots.take(msg.exclusive);
            let permit = Permit { in_flight, pool: msg.pool, exclusive: msg.exclusive, scheduler: ctx.address() };
            return MessageResult(Admission::Now(permit));
        }
        let (tx, rx) = oneshot::channel();
        slots.queue.push_back(Waiting { exclusive: msg.exclusive, reply: tx });
        MessageResult(Admission::Queued(rx))
    }
}

impl Handler<Release> for Scheduler {
    type Result = ();
    fn handle(&mut self, msg: Release, ctx: &mut Context<Self>) {
        self.slots(msg.pool).release(msg.exclusive);
        self.admit_waiting(msg.pool, &ctx.address());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Asks for a slot; the receiver holds the permit at once when the call may start now.
    async fn ask(s: &Addr<Scheduler>, pool: Pool, exclusive: bool) -> oneshot::Receiver<Permit> {
        match s.send(Admit { pool, exclusive }).await.expect("scheduler alive") {
            Admission::Queued(rx) => rx,
            Admission::Now(permit) => {
                let (tx, rx) = oneshot::channel();
                tx.send(permit).expect("receiver held");
                rx
            }
        }
    }

    async fn verb(s: &Addr<Scheduler>, exclusive: bool) -> oneshot::Receiver<Permit> {
        ask(s, Pool::Verb, exclusive).await
    }

    #[actix_rt::test]
    async fn a_call_with_a_free_slot_is_admitted_at_once_and_a_full_scheduler_queues_it() {
        let s = Scheduler::new(1).start();
        let first = s.send(Admit { pool: Pool::Verb, exclusive: false }).await.expect("alive");
        let Admission::Now(permit) = first else { panic!("a free slot admits at once: {first:?}") };
        let second = s.send(Admit { pool: Pool::Verb, exclusive: false }).await.expect("alive");
        assert!(matches!(second, Admission::Queued(_)), "{second:?}");
        drop(permit);
        let permit = second.permit().await.expect("admitted once the first is done");
        assert_eq!(permit.in_flight, 1);
    }

    #[actix_rt::test]
    async fn a_full_scheduler_queues_until_a_slot_is_released() {
        let s = Scheduler::new(2).start();
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
        let s = Scheduler::new(8).start();
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
        let s = Scheduler::new(2).start();
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
        let s = Scheduler::new(2).start();
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
}
