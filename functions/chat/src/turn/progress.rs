//! What a streamed turn reports as it goes ([`TurnEvent`]) and where it reports it
//! ([`Progress`]): nowhere for a JSON answer, a channel for a stream, whose closing tells the
//! turn that its client went away. Text is not sent a delta at a time: it gathers in a buffer
//! the receiving end ([`Events`]) takes from at most once per flush interval.

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};

use crate::turn::conversation::ConversationId;

/// What a streamed turn reports as it goes, in order. A turn's events are `Started`, then per
/// model response `StepStarted`, its `TextDelta`s, then for a response with tool calls one
/// `ToolInput` per call and one `ToolOutput` per call (a `show_chart` call's output followed by its
/// `Chart`), and `StepFinished`. The outcome (the
/// [`TurnOutcome`](super::TurnOutcome) or the error) is [`run`](super::run)'s return value, not an event. A turn that pauses
/// reports its waiting calls' `ToolInput` only; they are the response's `pending_approvals`.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEvent {
    Started {
        conversation_id: ConversationId,
        /// A resumed turn's answered calls, decided before it asks the model again: the
        /// outcomes a client showing the paused turn is waiting for. Empty for a new turn.
        decided: Vec<Decided>,
    },
    StepStarted {
        step: u32,
    },
    TextDelta(String),
    ToolInput {
        call_id: String,
        name: String,
        /// The arguments as JSON, or as the text the model wrote when that is not JSON.
        args: Value,
    },
    /// The output as the model sees it (citing tools' rows carry their `cite` ids).
    ToolOutput {
        call_id: String,
        output: Value,
        is_error: bool,
    },
    StepFinished,
    /// A chart the model asked for (`show_chart`), after that call's `ToolOutput`: a Vega-Lite
    /// spec whose data are the rows of the earlier call `call_id` of the same turn.
    Chart {
        /// The `show_chart` call that drew it.
        id: String,
        /// The call whose rows it draws.
        call_id: String,
        spec: Value,
    },
}

/// A waiting call as its answer settled it: what the approved call returned, or that it did
/// not run (declined, superseded or expired).
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    pub call_id: String,
    /// `None` when the call did not run.
    pub output: Option<Value>,
    pub is_error: bool,
}

/// Where a turn reports its [`TurnEvent`]s: nowhere for the JSON route, a channel for a
/// streamed one. The channel's receiver being dropped is how the turn learns that its client
/// went away (the response body holding it was dropped).
#[derive(Debug)]
pub struct Progress {
    tx: Option<Reporter>,
}

/// The sending end of a streamed turn's events.
#[derive(Debug)]
struct Reporter {
    // Unbounded: text deltas are reported from a synchronous callback, and a turn's events are
    // bounded by `LLM_MAX_RESPONSE_BYTES` and the tools' output caps.
    events: mpsc::UnboundedSender<Reported>,
    held: Arc<Mutex<Held>>,
}

/// Text reported and not yet taken by the reader, shared by the two ends.
#[derive(Debug, Default)]
struct Held {
    text: String,
    /// Counts the times `text` went from empty to not: the fill a [`TextReady`] announced is
    /// still there only while this is unchanged.
    fill: u64,
}

/// What goes through the channel, in order: an event, or notice that text waits in the buffer.
#[derive(Debug)]
enum Reported {
    Event(TurnEvent),
    /// Text is held for the reader, to take with [`Events::take`] when it wants to write it.
    Text(TextReady),
}

/// Names one fill of the text buffer, announced by [`Reported::Text`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TextReady(u64);

impl Progress {
    /// A turn nobody watches: it runs as the JSON route always has.
    pub fn none() -> Progress {
        Progress { tx: None }
    }

    /// A streamed turn, and the receiving end of its events (text written as it comes until
    /// [`Events::every`] says otherwise).
    pub fn channel() -> (Progress, Events) {
        let (tx, rx) = mpsc::unbounded_channel();
        let held = Arc::new(Mutex::new(Held::default()));
        let events = Events {
            rx,
            held: Arc::clone(&held),
            announced: None,
            flush: Duration::ZERO,
            text_written: None,
            timer: None,
            ended: false,
        };
        (
            Progress {
                tx: Some(Reporter { events: tx, held }),
            },
            events,
        )
    }

    pub(super) fn is_streamed(&self) -> bool {
        self.tx.is_some()
    }

    /// Reports the event `event` builds; a turn nobody watches builds none (tool outputs are
    /// cloned into their events). A text delta joins the held text ([`text`](Self::text));
    /// any other event goes out after the text held before it, which it takes along.
    pub(crate) fn send(&self, event: impl FnOnce() -> TurnEvent) {
        let Some(tx) = &self.tx else {
            return;
        };
        match event() {
            TurnEvent::TextDelta(delta) => self.text(&delta),
            event => {
                // Sent under the lock, so the reader cannot take text that follows this event
                // before it has read the event.
                let mut held = tx.lock();
                if !held.text.is_empty() {
                    let text = std::mem::take(&mut held.text);
                    let _ = tx.events.send(Reported::Event(TurnEvent::TextDelta(text)));
                }
                // A client gone is noticed by `is_gone`, at the next point the turn can stop.
                let _ = tx.events.send(Reported::Event(event));
            }
        }
    }

    /// Reports a piece of the model's text. It joins the text held for the reader, and only
    /// the first piece of a fill is announced: the reader wakes once per write, not once per
    /// delta. (A message per delta cost an allocation, a channel send and mostly a wake-up of
    /// the body's task for each of a reply's ~100 deltas; with the reading changes of issue 36
    /// a streamed turn's extra CPU fell from 0.35 to 0.25 ms, `docs/benchmarks.md`.)
    pub(crate) fn text(&self, delta: &str) {
        let Some(tx) = &self.tx else {
            return;
        };
        if delta.is_empty() {
            return;
        }
        let mut held = tx.lock();
        if held.text.is_empty() {
            held.fill += 1;
            let _ = tx.events.send(Reported::Text(TextReady(held.fill)));
        }
        held.text.push_str(delta);
    }

    /// Ends a step with `note` after the text streamed in it, and reports that ending: the
    /// step's whole text is then what the client saw, and what is stored as the reply.
    pub(super) fn end_step_with(&self, streamed: &mut String, note: &str) {
        let start = streamed.len();
        if !streamed.is_empty() {
            streamed.push_str("\n\n");
        }
        streamed.push_str(note);
        self.text(&streamed[start..]);
        self.send(|| TurnEvent::StepFinished);
    }

    pub(super) fn is_gone(&self) -> bool {
        self.tx.as_ref().is_some_and(|tx| tx.events.is_closed())
    }

    /// Resolves when the client has gone away; never for a turn nobody watches.
    pub(super) async fn gone(&self) {
        match &self.tx {
            Some(tx) => tx.events.closed().await,
            None => std::future::pending().await,
        }
    }
}

impl Reporter {
    fn lock(&self) -> MutexGuard<'_, Held> {
        lock(&self.held)
    }
}

/// The held text; a panic elsewhere while it was locked leaves a string, still usable.
fn lock(held: &Mutex<Held>) -> MutexGuard<'_, Held> {
    held.lock().unwrap_or_else(|p| p.into_inner())
}

/// The receiving end of a streamed turn, a stream of its events in order. Text deltas come
/// out joined, at most once per `flush` ([`every`](Self::every)): the first after a quiet
/// spell at once, what follows within `flush` as one delta when it is up; any other event
/// comes as it is reported, after the text before it. Dropping it tells the turn its client
/// went away.
#[derive(Debug)]
pub struct Events {
    rx: mpsc::UnboundedReceiver<Reported>,
    held: Arc<Mutex<Held>>,
    /// The fill announced and not yet taken, by this end or by an event.
    announced: Option<TextReady>,
    flush: Duration,
    /// When text last came out.
    text_written: Option<Instant>,
    /// Fires when held text is due. One timer, set again only when the time changes: a timer
    /// made per wait would be registered with the runtime's clock each time, and each
    /// registration wakes its driver.
    timer: Option<Pin<Box<Sleep>>>,
    /// The channel has closed and the text left taken.
    ended: bool,
}

impl Events {
    /// The same events, text coming out at most once per `flush` (`STREAM_FLUSH_MS`; zero:
    /// each time the turn reports some).
    pub fn every(mut self, flush: Duration) -> Self {
        self.flush = flush;
        self
    }

    /// The text of fill `ready`; `None` when the turn has since sent it along with an event
    /// (as a [`TurnEvent::TextDelta`] ahead of that event in the channel): text never
    /// overtakes an event reported before it.
    fn take(&self, ready: TextReady) -> Option<String> {
        let mut held = lock(&self.held);
        (held.fill == ready.0 && !held.text.is_empty()).then(|| std::mem::take(&mut held.text))
    }

    fn text_out(&mut self, text: String) -> Poll<Option<TurnEvent>> {
        self.text_written = Some(Instant::now());
        Poll::Ready(Some(TurnEvent::TextDelta(text)))
    }
}

impl Stream for Events {
    type Item = TurnEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<TurnEvent>> {
        let this = &mut *self;
        while !this.ended {
            match this.rx.poll_recv(cx) {
                Poll::Ready(Some(Reported::Text(ready))) => this.announced = Some(ready),
                Poll::Ready(Some(Reported::Event(TurnEvent::TextDelta(text)))) => {
                    // The announced text, sent ahead of an event: it goes out now, as the
                    // event will.
                    this.announced = None;
                    return this.text_out(text);
                }
                Poll::Ready(Some(Reported::Event(event))) => return Poll::Ready(Some(event)),
                Poll::Ready(None) => {
                    // The turn is over: what it still holds goes out now.
                    this.ended = true;
                    this.announced = None;
                    let rest = std::mem::take(&mut lock(&this.held).text);
                    if !rest.is_empty() {
                        return this.text_out(rest);
                    }
                }
                Poll::Pending => break,
            }
        }
        if this.ended {
            return Poll::Ready(None);
        }
        let Some(ready) = this.announced else {
            return Poll::Pending;
        };
        if let Some(at) = this.text_written
            && at.elapsed() < this.flush
        {
            let due = at + this.flush;
            let timer = this
                .timer
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
            if timer.deadline() != due {
                timer.as_mut().reset(due);
            }
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        this.announced = None;
        match this.take(ready) {
            Some(text) => this.text_out(text),
            // Sent along with an event after all: it is in the channel, whose waker is set.
            None => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn next(events: &mut Events) -> Option<Reported> {
        events.rx.try_recv().ok()
    }

    #[test]
    fn text_is_announced_once_per_fill_and_taken_whole() {
        let (progress, mut events) = Progress::channel();
        progress.text("The ");
        progress.send(|| TurnEvent::TextDelta("answer".into()));
        let Some(Reported::Text(ready)) = next(&mut events) else {
            panic!("the first piece announces the text");
        };
        assert!(next(&mut events).is_none(), "later pieces join it silently");
        assert_eq!(events.take(ready).as_deref(), Some("The answer"));
        assert_eq!(events.take(ready), None, "taken once");

        progress.text("42");
        assert!(matches!(next(&mut events), Some(Reported::Text(_))));
    }

    #[test]
    fn an_event_takes_the_text_before_it_and_text_after_it_waits_its_turn() {
        let (progress, mut events) = Progress::channel();
        progress.text("Let me ");
        progress.text("check.");
        let Some(Reported::Text(first)) = next(&mut events) else {
            panic!("announced");
        };
        progress.send(|| TurnEvent::StepFinished);
        progress.text("Done.");
        // The reader saw the first fill announced, but the event took that text: taking it now
        // must not give the text written after the event.
        assert_eq!(events.take(first), None);
        assert!(matches!(
            next(&mut events),
            Some(Reported::Event(TurnEvent::TextDelta(t))) if t == "Let me check."
        ));
        assert!(matches!(
            next(&mut events),
            Some(Reported::Event(TurnEvent::StepFinished))
        ));
        let Some(Reported::Text(second)) = next(&mut events) else {
            panic!("the text after the event is announced after it");
        };
        assert_eq!(events.take(second).as_deref(), Some("Done."));
    }

    /// The next event the stream gives, as text (`[text]`) or the event's name (`<Event>`);
    /// `None` if it has none ready.
    fn ready(events: &mut Events) -> Option<String> {
        use futures::FutureExt;
        let event = futures::StreamExt::next(events).now_or_never()?;
        Some(match event {
            Some(TurnEvent::TextDelta(text)) => format!("[{text}]"),
            Some(event) => format!("<{event:?}>"),
            None => "<end>".into(),
        })
    }

    fn delta(text: &str) -> impl FnOnce() -> TurnEvent {
        let text = text.to_owned();
        move || TurnEvent::TextDelta(text)
    }

    #[tokio::test(start_paused = true)]
    async fn text_comes_at_once_after_a_pause_then_at_most_once_per_flush() {
        let flush = Duration::from_millis(20);
        let (progress, events) = Progress::channel();
        let mut events = events.every(flush);
        let progress = Arc::new(progress);
        let start = Instant::now();
        progress.send(delta("The "));
        assert_eq!(ready(&mut events).as_deref(), Some("[The ]"), "at once");

        // Words that follow within the flush come together when it is up, as one delta.
        progress.send(delta("answer "));
        let later = Arc::clone(&progress);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            later.send(delta("is "));
        });
        assert_eq!(ready(&mut events), None, "held");
        let next = futures::StreamExt::next(&mut events).await;
        assert_eq!(next, Some(TurnEvent::TextDelta("answer is ".into())));
        assert_eq!(start.elapsed(), flush);

        // After a quiet spell the next word comes at once again.
        tokio::time::sleep(Duration::from_millis(50)).await;
        progress.send(delta("42"));
        assert_eq!(ready(&mut events).as_deref(), Some("[42]"));

        // Anything else comes as it is reported, after the text held before it; text after
        // it waits its turn.
        progress.send(delta("."));
        progress.send(|| TurnEvent::StepFinished);
        progress.send(delta("Next"));
        assert_eq!(ready(&mut events).as_deref(), Some("[.]"));
        assert_eq!(ready(&mut events).as_deref(), Some("<StepFinished>"));
        assert_eq!(ready(&mut events), None, "held: text came out just now");

        // Text held when the turn ends comes out before the stream ends.
        progress.send(delta(" Bye."));
        drop(later_free(progress));
        assert_eq!(ready(&mut events).as_deref(), Some("[Next Bye.]"));
        assert_eq!(ready(&mut events).as_deref(), Some("<end>"));
    }

    /// The last holder of the turn's end, once the spawned task's clone is gone.
    fn later_free(progress: Arc<Progress>) -> Progress {
        Arc::try_unwrap(progress).expect("no other holder")
    }

    #[tokio::test(start_paused = true)]
    async fn a_flush_of_zero_gives_the_text_each_time_it_is_read() {
        let (progress, events) = Progress::channel();
        let mut events = events.every(Duration::ZERO);
        for word in ["a", "b"] {
            progress.send(delta(word));
            assert_eq!(ready(&mut events), Some(format!("[{word}]")));
        }
    }
}
