//! Admission control: at most `max_inflight` calls run at once, and a shell runs alone.
//!
//! Calls are admitted in arrival order: a call that cannot start yet waits, and calls that
//! arrive after it wait behind it, so a shell is never starved by a stream of small calls.

use std::collections::VecDeque;

use actix::prelude::*;
use tokio::sync::oneshot;

pub struct Scheduler {
    max_inflight: usize,
    running: usize,
    exclusive_running: bool,
    queue: VecDeque<Waiting>,
}

struct Waiting {
    exclusive: bool,
    reply: oneshot::Sender<Permit>,
}

/// Ask for a slot. `exclusive` calls (a foreground shell) run with nothing beside them.
#[derive(Debug, Message)]
#[rtype(result = "Admission")]
pub struct Admit {
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

#[derive(Debug, Message)]
#[rtype(result = "()")]
struct Release {
    exclusive: bool,
}

/// A running slot. Dropping it frees the slot.
#[derive(Debug)]
pub struct Permit {
    /// Calls running when this one was admitted, this one included.
    pub in_flight: usize,
    exclusive: bool,
    scheduler: Addr<Scheduler>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.scheduler.do_send(Release { exclusive: self.exclusive });
    }
}

impl Scheduler {
    pub fn new(max_inflight: usize) -> Self {
        Self { max_inflight: max_inflight.max(1), running: 0, exclusive_running: false, queue: VecDeque::new() }
    }

    fn can_start(&self, exclusive: bool) -> bool {
        if self.exclusive_running {
            return false;
        }
        if exclusive {
            self.running == 0
        } else {
            self.running < self.max_inflight
        }
    }

    fn admit_waiting(&mut self, me: &Addr<Self>) {
        while let Some(next) = self.queue.front() {
            if !self.can_start(next.exclusive) {
                break;
            }
            let Some(next) = self.queue.pop_front() else { break };
            self.start(next.exclusive, next.reply, me);
        }
    }

    fn start(&mut self, exclusive: bool, reply: oneshot::Sender<Permit>, me: &Addr<Self>) {
        // A caller that went away drops its receiver; the returned permit is dropped here,
        // which sends the Release that frees the slot again.
        let _ = reply.send(self.permit(exclusive, me));
    }

    fn permit(&mut self, exclusive: bool, me: &Addr<Self>) -> Permit {
        self.running += 1;
        self.exclusive_running = exclusive;
        Permit { in_flight: self.running, exclusive, scheduler: me.clone() }
    }
}

impl Actor for Scheduler {
    type Context = Context<Self>;
}

impl Handler<Admit> for Scheduler {
    type Result = MessageResult<Admit>;
    fn handle(&mut self, msg: Admit, ctx: &mut Context<Self>) -> Self::Result {
        if self.queue.is_empty() && self.can_start(msg.exclusive) {
            return MessageResult(Admission::Now(self.permit(msg.exclusive, &ctx.address())));
        }
        let (tx, rx) = oneshot::channel();
        self.queue.push_back(Waiting { exclusive: msg.exclusive, reply: tx });
        MessageResult(Admission::Queued(rx))
    }
}

impl Handler<Release> for Scheduler {
    type Result = ();
    fn handle(&mut self, msg: Release, ctx: &mut Context<Self>) {
        self.running = self.running.saturating_sub(1);
        if msg.exclusive {
            self.exclusive_running = false;
        }
        self.admit_waiting(&ctx.address());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Asks for a slot; the receiver holds the permit at once when the call may start now.
    async fn admit(s: &Addr<Scheduler>, exclusive: bool) -> oneshot::Receiver<Permit> {
        match s.send(Admit { exclusive }).await.expect("scheduler alive") {
            Admission::Queued(rx) => rx,
            Admission::Now(permit) => {
                let (tx, rx) = oneshot::channel();
                tx.send(permit).expect("receiver held");
                rx
            }
        }
    }

    #[actix_rt::test]
    async fn a_call_with_a_free_slot_is_admitted_at_once_and_a_full_scheduler_queues_it() {
        let s = Scheduler::new(1).start();
        let first = s.send(Admit { exclusive: false }).await.expect("alive");
        let Admission::Now(permit) = first else { panic!("a free slot admits at once: {first:?}") };
        let second = s.send(Admit { exclusive: false }).await.expect("alive");
        assert!(matches!(second, Admission::Queued(_)), "{second:?}");
        drop(permit);
        let permit = second.permit().await.expect("admitted once the first is done");
        assert_eq!(permit.in_flight, 1);
    }

    #[actix_rt::test]
    async fn a_full_scheduler_queues_until_a_slot_is_released() {
        let s = Scheduler::new(2).start();
        let a = admit(&s, false).await.await.expect("a");
        let b = admit(&s, false).await.await.expect("b");
        assert_eq!((a.in_flight, b.in_flight), (1, 2));
        let mut c = admit(&s, false).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(c.try_recv().is_err(), "third call must wait");
        drop(a);
        let c = c.await.expect("c admitted after release");
        assert_eq!(c.in_flight, 2);
    }

    #[actix_rt::test]
    async fn an_exclusive_call_runs_alone_and_later_calls_wait_behind_it() {
        let s = Scheduler::new(8).start();
        let a = admit(&s, false).await.await.expect("a");
        let mut shell = admit(&s, true).await;
        let mut after = admit(&s, false).await;
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
}
