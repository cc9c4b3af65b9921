//! Logging: one line per event on stderr, safe to read whatever upstreams send, and not
//! flooded by one operation that warns thousands of times.
//!
//! - **Control characters are escaped.** Messages carry text from upstreams (stderr lines,
//!   error messages, names): a NUL, a carriage return or an escape sequence written raw would
//!   corrupt a log file or drive the terminal. Every control character in a field becomes a
//!   visible escape (`\0`, `\r`, `\u{1b}`), so an event stays one line.
//! - **Repeats are aggregated.** A warning (or error) identical to one logged in the last
//!   [`WINDOW`] is held back and counted; when the window has passed, one line says how many
//!   times it repeated. (Reading the text of a 10,000-page PDF made the PDF parser warn 5,835
//!   times, one line each.)

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::{Context, Filter, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

/// How long an identical warning is counted instead of logged again.
pub(crate) const WINDOW: Duration = Duration::from_secs(5);
/// Distinct warnings tracked at once; past it, warnings pass unaggregated.
const MAX_TRACKED: usize = 256;

/// What a command logs by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// `serve` and the link server: one line per tool call and upstream (re)connection.
    Serving,
    /// `stowage agent`: warnings, but not the upstreams' own start-up retries (the command
    /// waits for its servers and names one that cannot start in its one error line).
    Agent,
    /// Every other command: warnings.
    Other,
}

/// Logs go to stderr so that stdout stays clean for data (`artifacts get`, `transform`).
/// `serve` logs one line per tool call and upstream (re)connections by default.
///
/// The filter comes from `STOWAGE_LOG`, else `RUST_LOG` (the variable every Rust program
/// reads, often set machine-wide: Stowage's own wins when both are set), else the default.
/// A filter that does not parse is said on stderr, not silently replaced. Colour only when
/// stderr is a terminal: hosts capture it into log files, where escape codes are noise.
pub(crate) fn init(role: Role) {
    use std::io::IsTerminal;
    let default = match role {
        Role::Serving => "warn,stowage::call=info,stowage::upstream=info,stowage::links=info",
        Role::Agent => "warn,stowage::upstream=error",
        Role::Other => "warn",
    };
    let chosen =
        ["STOWAGE_LOG", "RUST_LOG"].into_iter().find_map(|var| std::env::var(var).ok().filter(|v| !v.trim().is_empty()).map(|v| (var, v)));
    let filter = match chosen {
        Some((var, value)) => tracing_subscriber::EnvFilter::try_new(&value).unwrap_or_else(|e| {
            eprintln!(
                "stowage: warning: {var}={value:?} is not a log filter ({e}); using {default:?}. Example: {var}=info,stowage::call=debug"
            );
            tracing_subscriber::EnvFilter::new(default)
        }),
        None => tracing_subscriber::EnvFilter::new(default),
    };
    let repeats = Repeats::default();
    let flusher = repeats.clone();
    // A thread of its own: summaries are due even while the runtime is busy or not yet built.
    let _ = std::thread::Builder::new().name("stowage-log-repeats".into()).spawn(move || {
        loop {
            std::thread::sleep(Duration::from_secs(1));
            flusher.flush(Instant::now());
        }
    });
    let fmt = tracing_subscriber::fmt::layer()
        .fmt_fields(escaped_fields())
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .with_filter(repeats);
    // `try_init` also routes the `log` crate's records (the PDF parser's warnings) here.
    let _ = tracing_subscriber::registry().with(filter).with(fmt).try_init();
}

/// Fields written as `name=value` (the message bare), every control character escaped.
fn escaped_fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> + 'static {
    use tracing_subscriber::field::MakeExt;
    tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
        // The `log` bridge's own fields (`log.target`, …) are in the line's metadata already.
        if field.name().starts_with("log.") {
            return Ok(());
        }
        let text = escape(&format!("{value:?}"));
        if field.name() == "message" { w.write_str(&text) } else { write!(w, "{}={text}", field.name()) }
    })
    .delimited(" ")
}

/// `text` with every control character written as a visible escape.
pub(crate) fn escape(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\0' => out.push_str("\\0"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// The per-layer filter that holds back repeated warnings and counts them.
#[derive(Clone, Default)]
struct Repeats {
    seen: Arc<Mutex<HashMap<String, Seen>>>,
}

struct Seen {
    since: Instant,
    held: u64,
    target: String,
}

impl Repeats {
    /// Whether an event with this level, target and text is logged now (false: it repeats one
    /// logged within the window, and is counted).
    fn admit(&self, level: Level, target: &str, text: String, now: Instant) -> bool {
        if level > Level::WARN {
            return true;
        }
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let key = format!("{level} {target} {text}");
        match seen.get_mut(&key) {
            Some(s) if now.duration_since(s.since) < WINDOW => {
                s.held += 1;
                false
            }
            // The window has passed but the flusher has not run yet: this one is logged, and
            // what was held is said by the flusher (whose entry restarts here).
            Some(_) => true,
            None => {
                if seen.len() < MAX_TRACKED {
                    seen.insert(key, Seen { since: now, held: 0, target: target.to_owned() });
                }
                true
            }
        }
    }

    /// Ends the windows that have passed by `now`: one line for each warning that repeated.
    fn flush(&self, now: Instant) {
        let due: Vec<(String, Seen)> = {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            let keys: Vec<String> = seen.iter().filter(|(_, s)| now.duration_since(s.since) >= WINDOW).map(|(k, _)| k.clone()).collect();
            keys.into_iter().filter_map(|k| seen.remove_entry(&k)).collect()
        };
        for (key, s) in due.into_iter().filter(|(_, s)| s.held > 0) {
            // The key is "LEVEL target text": the text is what repeated.
            let text = escape(key.splitn(3, ' ').nth(2).unwrap_or_default().trim_end());
            tracing::warn!(target: "stowage::log", from = %s.target, "repeated {} more times in {} s: {text}", s.held, WINDOW.as_secs());
        }
    }
}

impl<S: Subscriber> Filter<S> for Repeats {
    fn enabled(&self, _meta: &tracing::Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        true
    }

    fn event_enabled(&self, event: &Event<'_>, _cx: &Context<'_, S>) -> bool {
        let level = *event.metadata().level();
        if level > Level::WARN {
            return true;
        }
        let mut text = Text::default();
        event.record(&mut text);
        let target = text.log_target.take().unwrap_or_else(|| event.metadata().target().to_owned());
        self.admit(level, &target, text.fields, Instant::now())
    }
}

/// An event's fields as one string (what makes two events the same), and the `log` bridge's
/// target, which stands for the event's own.
#[derive(Default)]
struct Text {
    fields: String,
    log_target: Option<String>,
}

impl Visit for Text {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "log.target" {
            self.log_target = Some(value.to_owned());
        } else if !field.name().starts_with("log.") {
            let _ = write!(self.fields, "{}={value} ", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => {
                let _ = write!(self.fields, "{value:?} ");
            }
            name if !name.starts_with("log.") => {
                let _ = write!(self.fields, "{name}={value:?} ");
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a subscriber built like [`init`]'s writes, collected.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn subscriber(out: &Captured, repeats: Repeats) -> impl Subscriber + Send + Sync {
        let out = out.clone();
        let fmt = tracing_subscriber::fmt::layer()
            .fmt_fields(escaped_fields())
            .with_ansi(false)
            .without_time()
            .with_writer(move || out.clone())
            .with_filter(repeats);
        tracing_subscriber::registry().with(fmt)
    }

    fn text(out: &Captured) -> String {
        String::from_utf8(out.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn control_characters_from_upstreams_are_escaped() {
        let out = Captured::default();
        tracing::subscriber::with_default(subscriber(&out, Repeats::default()), || {
            let garbage = "ok\0then\r\nfake line \u{1b}[31mred";
            tracing::warn!(target: "stowage::upstream", upstream = %garbage, "stderr: {garbage}");
        });
        let logged = text(&out);
        assert_eq!(logged.lines().count(), 1, "{logged:?}");
        assert!(logged.contains(r"stderr: ok\0then\r\nfake line \u{1b}[31mred"), "{logged:?}");
        assert!(logged.contains(r"upstream=ok\0then"), "{logged:?}");
        assert!(!logged.trim_end_matches('\n').chars().any(char::is_control), "{logged:?}");
        assert_eq!(escape("plain text"), "plain text");
    }

    #[test]
    fn a_warning_repeated_thousands_of_times_is_one_line_and_a_count() {
        let out = Captured::default();
        let repeats = Repeats::default();
        tracing::subscriber::with_default(subscriber(&out, repeats.clone()), || {
            for _ in 0..5_835 {
                tracing::warn!(target: "lopdf::parser_aux", "Could not decode extracted text");
            }
            tracing::warn!(target: "lopdf::parser_aux", "a different warning");
            tracing::info!(target: "stowage::call", "info lines are never held back");
            tracing::info!(target: "stowage::call", "info lines are never held back");
            // The window ends: one line says what was held back.
            repeats.flush(Instant::now() + WINDOW);
        });
        let logged = text(&out);
        assert_eq!(logged.matches("Could not decode extracted text").count(), 2, "{logged}");
        assert!(logged.contains("repeated 5834 more times in 5 s: Could not decode extracted text"), "{logged}");
        assert!(logged.contains("from=lopdf::parser_aux"), "{logged}");
        assert_eq!(logged.matches("a different warning").count(), 1);
        assert_eq!(logged.matches("never held back").count(), 2);
        // A warning seen once and flushed leaves no summary; both windows are over.
        assert!(!logged.contains("repeated 0"), "{logged}");
        assert!(!repeats.seen.lock().unwrap().keys().any(|k| k.starts_with("WARN lopdf")));
    }
}
