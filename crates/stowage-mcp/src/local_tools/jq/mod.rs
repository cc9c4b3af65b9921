//! `artifact_query`'s `jq`: a jq program run by jaq (the `jaq-core`, `jaq-std` and
//! `jaq-json` crates), within documented limits, so a model's program answers a question
//! about an artifact (a count, a group, a filtered top row) instead of paging through it.
//!
//! A program is the model's input, so it runs fenced in:
//! - it may not define functions (`def`) or load modules (`import`, `include`): with the
//!   built-ins (`map`, `select`, `group_by`, `reduce`, `limit`, …) a data question needs
//!   neither, and without them no program recurses on its own;
//! - the unbounded built-ins (`range`, `repeat`, `recurse`/`..`, `while`, `until`) check a
//!   deadline at every step, so a program that would run past [`TIME_LIMIT`] stops there;
//! - at most [`MAX_OUTPUTS`] results and [`MAX_OUTPUT_BYTES`] bytes of them are kept;
//! - inputs are at most [`MAX_INPUT_BYTES`] and nested at most [`MAX_INPUT_DEPTH`] deep;
//! - `env` answers `{}` and `debug`/`stderr` write nowhere: nothing of the gateway's
//!   environment or log is reachable from a program;
//! - it runs on a thread of its own (a large stack, at the CPU pool's low priority), never on
//!   the shared CPU pool: a program stuck in plain iteration past its deadline (a cross
//!   product of two big arrays) cannot hold the pool, and the caller is answered at the
//!   deadline whatever the thread still does. At most [`MAX_RUNNING`] programs run at once;
//!   one still running past its deadline holds its place until it ends;
//! - `halt` and `halt_error` fail like any error: jaq's own would end the gateway's process.
//!
//! Programs run on our own values ([`value::Val`]) over the artifact read in place
//! ([`doc::Doc`]): the heap a 10 MB query holds is about 2× the artifact's bytes, where
//! jaq's values took 17× (BENCHMARKS.md, "jq on our own values"). The interpreter's hot
//! steps are natives: `select`, `map` and `add` ([`natives`]), and every constant field step
//! (`.status`), which [`rewrite`] turns into a call of one native before compiling.

mod doc;
mod natives;
mod rewrite;
mod value;

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use jaq_core::box_iter::box_once;
use jaq_core::load::{Arena, File, Loader, lex};
use jaq_core::native::{Fun, run, v};
use jaq_core::{Compiler, Ctx, Error, Exn, Vars, data};
use value::{Shape, Val};

use super::ToolError;
use super::input::{self, Format};

/// The longest a program runs before it is stopped.
pub(crate) const TIME_LIMIT: Duration = Duration::from_secs(5);
/// Results kept at most (a stream longer than this is cut, and the answer says so).
pub(crate) const MAX_OUTPUTS: usize = 1_000_000;
/// Bytes of results (as compact JSON) kept at most.
pub(crate) const MAX_OUTPUT_BYTES: usize = 64 << 20;
/// Bytes of input (all artifacts together) a program reads at most.
pub(crate) const MAX_INPUT_BYTES: usize = 64 << 20;
/// How deeply an input's JSON may nest.
pub(crate) const MAX_INPUT_DEPTH: usize = doc::MAX_DEPTH;
/// The longest program text.
pub(crate) const MAX_PROGRAM_CHARS: usize = 4_000;
/// Programs running at once, across the gateway.
pub(crate) const MAX_RUNNING: usize = 2;
/// A runner thread's stack: deep values (built by a program, or walked by `..`) recurse.
const STACK_BYTES: usize = 256 << 20;

type D = Data;

/// What a running program sees: jaq's look-up table of its terms and natives, and the table
/// of keys its field steps read ([`rewrite`]).
struct Data;

impl data::DataT for Data {
    type V<'a> = Val;
    type Data<'a> = Shared<'a>;
}

#[derive(Clone)]
struct Shared<'a> {
    lut: &'a jaq_core::Lut<Data>,
    keys: &'a [Val],
}

impl<'a> data::HasLut<'a, Data> for Shared<'a> {
    fn lut(&self) -> &'a jaq_core::Lut<Data> {
        self.lut
    }
}

thread_local! {
    /// The running program's deadline and stop flag (a runner thread runs one program).
    static FENCE: Cell<Option<(Instant, &'static AtomicBool)>> = const { Cell::new(None) };
    /// The running program's time limit, for its messages.
    static LIMIT: Cell<Duration> = const { Cell::new(TIME_LIMIT) };
}

/// One step of an unbounded built-in: an error once the deadline passed or the caller gave up
/// (and from then on, so `try` cannot resume the loop).
fn step() -> Result<(), Error<Val>> {
    if let Some((deadline, stop)) = FENCE.get()
        && (stop.load(Ordering::Relaxed) || Instant::now() >= deadline)
    {
        stop.store(true, Ordering::Relaxed);
        return Err(Error::str(format!("stopped: the program ran past its time limit ({})", secs(LIMIT.get()))));
    }
    Ok(())
}

/// The natives: jaq's standard ones, with `range` checking the fence, `env` empty, the log
/// and stderr writers inert, and `_stowage_step` for the redefined generators.
fn funs() -> impl Iterator<Item = Fun<D>> {
    let replaced = ["range", "env", "debug_empty", "stderr_empty", "halt"];
    let ours: [Fun<D>; 7] = [
        (rewrite::KEY_NATIVE, v(1), rewrite::key_native()),
        run(("range", v(3), |mut cv| {
            let by = cv.0.pop_var();
            let to = cv.0.pop_var();
            let from = cv.0.pop_var();
            Box::new(range(from, to, by))
        })),
        run(("env", v(0), |_| box_once(Ok(Val::Obj(Default::default()))))),
        run(("debug_empty", v(0), |_| Box::new(std::iter::empty()))),
        run(("stderr_empty", v(0), |_| Box::new(std::iter::empty()))),
        run(("_stowage_step", v(0), |cv| box_once(step().map(|()| cv.1).map_err(Exn::from)))),
        run(("halt", v(1), |_| box_once(Err(Exn::from(Error::str("halt: a program here ends by giving its results, not by halting")))))),
    ];
    jaq_core::funs().chain(jaq_std::funs()).chain(natives::funs()).filter(move |(name, _, _)| !replaced.contains(name)).chain(ours)
}

/// The generators that could run forever, redefined to step the fence (same meaning as
/// jaq's own definitions).
const FENCED_DEFS: &str = r#"
def repeat(f): def rec: f, (_stowage_step | rec); rec;
def recurse(f): def rec: ., (f | _stowage_step | rec); rec;
def recurse: recurse(.[]?);
def recurse(f; cond): recurse(f | select(cond));
def while(cond; update): def rec: if cond then ., (update | _stowage_step | rec) else empty end; rec;
def until(cond; update): def rec: if cond then . else update | _stowage_step | rec end; rec;
"#;

/// `range($from; $to; $by)`, stepping the fence at every value.
fn range<'a>(from: Val, to: Val, by: Val) -> impl Iterator<Item = jaq_core::ValX<'a, Val>> {
    use std::cmp::Ordering::{Equal, Greater, Less};
    let cmp = by.partial_cmp(&Val::from(0isize)).unwrap_or(Equal);
    let mut next: Option<Result<Val, Exn<'a, Val>>> = Some(Ok(from));
    std::iter::from_fn(move || {
        let x = match next.take()? {
            Ok(x) => x,
            Err(e) => return Some(Err(e)),
        };
        let go_on = match cmp {
            Greater => x < to,
            Less => x > to,
            Equal => x != to,
        };
        if !go_on {
            return None;
        }
        if let Err(e) = step() {
            return Some(Err(Exn::from(e)));
        }
        next = Some((x.clone() + by.clone()).map_err(Exn::from));
        Some(Ok(x))
    })
}

/// Checks a program before anything is read: its length, no `def`/`import`/`include`, and
/// that it parses and compiles. The error says where, in one line.
pub(crate) fn check(code: &str) -> Result<(), ToolError> {
    if code.trim().is_empty() {
        return Err(ToolError::bad_request("artifact_query: \"jq\" is empty; give a program such as \".orders | length\""));
    }
    if code.chars().count() > MAX_PROGRAM_CHARS {
        return Err(ToolError::bad_request(format!(
            "artifact_query: the jq program is {} characters; at most {MAX_PROGRAM_CHARS}",
            code.chars().count()
        )));
    }
    let tokens = lex::Lexer::new(code).lex().map_err(|errs| {
        let (expect, found) = &errs[0];
        at_error(code, found, &format!("expected {}", expect.as_str()))
    })?;
    if let Some(word) = forbidden_word(&tokens) {
        return Err(ToolError::bad_request(format!(
            "artifact_query: jq programs here may not use `{word}` (no function definitions or modules); use the built-ins such as map, select, group_by, reduce"
        )));
    }
    compile(code).map(drop)
}

/// The first `def`, `import` or `include` keyword among `tokens`.
fn forbidden_word<'a>(tokens: &[lex::Token<&'a str>]) -> Option<&'a str> {
    tokens.iter().find_map(|lex::Token(s, tok)| match tok {
        lex::Tok::Word if matches!(*s, "def" | "import" | "include") => Some(*s),
        lex::Tok::Block(inner) => forbidden_word(inner),
        lex::Tok::Str(parts) => parts.iter().find_map(|p| match p {
            lex::StrPart::Term(t) => forbidden_word(std::slice::from_ref(t)),
            _ => None,
        }),
        _ => None,
    })
}

/// One line for an error at `piece` (a slice of `code`): the character where it is, and why.
fn at_error(code: &str, piece: &str, why: &str) -> ToolError {
    let at = jaq_core::load::span(code, piece).start.min(code.len());
    let column = code[..at].chars().count();
    let near = stowage_transform::stub::one_line(piece, 20);
    let near = if near.is_empty() { "the end".to_owned() } else { format!("`{near}`") };
    ToolError::bad_request(format!("artifact_query: jq program does not parse at character {column} (near {near}): {why}"))
}

/// A compiled program, and the key table its field steps read ([`rewrite`]).
struct Program {
    filter: jaq_core::Filter<D>,
    keys: Vec<Val>,
}

impl Program {
    /// The program's results on `input`.
    fn run(&self, input: Val) -> impl Iterator<Item = value::ValX<'_>> + '_ {
        let ctx = Ctx::<D>::new(Shared { lut: &self.filter.lut, keys: &self.keys }, Vars::new([]));
        self.filter.id.run((ctx, input))
    }
}

/// The name the rewritten program is defined under (its text is then only this call).
const MAIN: &str = "_stowage_main";

fn compile(code: &str) -> Result<Program, ToolError> {
    // `select`, `map` and `add` are natives here (natives.rs): jaq defines them in jq,
    // several times slower.
    let defs = jaq_core::defs()
        .filter(|d| !(matches!(d.name, "select" | "map") && d.args.len() == 1))
        .chain(jaq_std::defs().filter(|d| !(d.name == "add" && d.args.is_empty())))
        .chain(jaq_json::defs())
        .chain(jaq_core::load::parse(FENCED_DEFS, |p| p.defs()).expect("the fenced definitions parse"));
    // The program's field steps are rewritten ([`rewrite`]); a rewritten term has no text,
    // so it joins the definitions, and the program run is a call of it. A program that does
    // not parse is loaded as written, for jaq's message of where.
    let (main, keys) = match jaq_core::load::parse(code, |p| p.term()) {
        Some(term) => {
            let (body, keys) = rewrite::rewrite(term);
            (Some(jaq_core::load::parse::Def { name: MAIN, args: Vec::new(), body }), keys)
        }
        None => (None, Vec::new()),
    };
    let text = if main.is_some() { MAIN } else { code };
    let mut all: Vec<jaq_core::load::parse::Def<&str>> = defs.collect::<Vec<_>>();
    all.extend(main);
    let loader = Loader::new(all);
    let arena = Arena::default();
    let modules = loader.load(&arena, File { code: text, path: () }).map_err(|errs| {
        let Some((_, e)) = errs.into_iter().next() else { return ToolError::bad_request("artifact_query: jq program does not parse") };
        match e {
            jaq_core::load::Error::Lex(es) => es.first().map_or_else(
                || ToolError::bad_request("artifact_query: jq program does not parse"),
                |(expect, found)| at_error(code, found, &format!("expected {}", expect.as_str())),
            ),
            jaq_core::load::Error::Parse(es) => es.first().map_or_else(
                || ToolError::bad_request("artifact_query: jq program does not parse"),
                |(expect, found)| at_error(code, found, &format!("expected {}", expect.as_str())),
            ),
            jaq_core::load::Error::Io(_) => ToolError::bad_request("artifact_query: jq programs here may not load modules"),
        }
    })?;
    let filter = Compiler::default().with_funs(funs()).compile(modules).map_err(|errs| {
        let first = errs.into_iter().next().and_then(|(_, es)| es.into_iter().next());
        match first {
            Some((name, undefined)) => at_error(code, name, &format!("undefined {} {name}", undefined.as_str())),
            None => ToolError::bad_request("artifact_query: jq program does not compile"),
        }
    })?;
    Ok(Program { filter, keys })
}

/// What a program read: the artifacts' bytes (with their ids), as `format`, and whether
/// several were given (`ids`: the program then sees an array of them).
pub(crate) struct Input {
    pub(crate) docs: Vec<(String, Bytes)>,
    pub(crate) format: Format,
    pub(crate) several: bool,
}

/// What a program gave.
#[derive(Debug)]
pub(crate) struct Output {
    /// Each result, as a value (paged by [`page`] on the runner thread).
    pub(crate) results: Vec<Val>,
    /// Why the results stop early, when they do (a limit), in one line.
    pub(crate) stopped: Option<String>,
}

/// A value the answer pages through, built on the runner thread (jaq's values stay there).
#[derive(Debug)]
pub(crate) enum Paged {
    /// A stream of several results, or the items of one array result: each as compact JSON.
    Items { items: Vec<String>, stream: bool },
    /// The members of one object result: key and value as compact JSON.
    Members(Vec<(String, String)>),
    /// One string result, as its text.
    Text(String),
    /// One number, boolean or null, as JSON.
    Scalar(String),
}

/// Runs `code` over `input` within the limits (see the module docs): the results as the
/// answer pages them, and why they stop early when they do.
pub(crate) async fn run_program(code: String, input: Input) -> Result<(Paged, Option<String>), ToolError> {
    run_within(code, input, TIME_LIMIT).await
}

/// "5 s", "0.3 s".
fn secs(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

/// [`run_program`] with another time limit (tests).
async fn run_within(code: String, input: Input, limit: Duration) -> Result<(Paged, Option<String>), ToolError> {
    static RUNNING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_RUNNING);
    let permit = tokio::time::timeout(limit, RUNNING.acquire())
        .await
        .map_err(|_| ToolError::bad_request("artifact_query: other jq programs are still running past their limit; try again shortly"))?
        .expect("the semaphore is never closed");
    let stop: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
    let stop_flag = Arc::new(StopOnDrop(stop));
    let (tx, rx) = tokio::sync::oneshot::channel();
    let deadline = Instant::now() + limit;
    let guard = stop_flag.clone();
    let spawned = std::thread::Builder::new().name("stowage-jq".into()).stack_size(STACK_BYTES).spawn(move || {
        let _permit = permit;
        let _guard = guard;
        lower_priority();
        FENCE.set(Some((deadline, stop)));
        LIMIT.set(limit);
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| execute(&code, input).map(|o| (page(o.results), o.stopped))));
        let out = out.unwrap_or_else(|_| Err(ToolError::bad_request("artifact_query: the jq program failed inside the interpreter")));
        let _ = tx.send(out);
    });
    if let Err(e) = spawned {
        return Err(ToolError::bad_request(format!("artifact_query: cannot start a jq runner ({e})")));
    }
    match tokio::time::timeout(limit + Duration::from_millis(500), rx).await {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => Err(ToolError::bad_request("artifact_query: the jq runner ended without an answer")),
        Err(_) => {
            stop.store(true, Ordering::Relaxed);
            Err(ToolError::bad_request(format!(
                "artifact_query: the jq program ran past its time limit ({}) and was stopped; narrow it (select first, then group or count)",
                secs(limit)
            )))
        }
    }
}

/// Frees nothing (the flag is `'static`): tells a runner still going that nobody waits.
struct StopOnDrop(&'static AtomicBool);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn lower_priority() {
    #[cfg(unix)]
    {
        use thread_priority::{ThreadPriority, ThreadPriorityValue};
        if let Ok(p) = ThreadPriorityValue::try_from(25u8) {
            let _ = thread_priority::set_current_thread_priority(ThreadPriority::Crossplatform(p));
        }
    }
}

/// Parses the input and runs the program, on the runner thread.
fn execute(code: &str, input: Input) -> Result<Output, ToolError> {
    let filter = compile(code)?;
    let mut values = Vec::with_capacity(input.docs.len());
    for (id, bytes) in &input.docs {
        values.push(read(id, bytes, input.format)?);
    }
    let value = if input.several { values.into_iter().collect::<Val>() } else { values.pop().unwrap_or_default() };
    let mut results = Vec::new();
    let mut bytes = 0usize;
    let mut stopped = None;
    for r in filter.run(value) {
        // Not `jaq_core::unwrap_valr`: it ends the process on `halt` (which is replaced here,
        // but no exception other than an error may reach that path either).
        let r = r.map_err(|e| e.get_err().unwrap_or_else(|_| Error::str("the program tried to halt")));
        match r {
            Ok(v) => {
                bytes += v.json_len();
                results.push(v);
                if results.len() >= MAX_OUTPUTS || bytes > MAX_OUTPUT_BYTES {
                    stopped = Some(format!(
                        "stopped after {} results ({} of JSON): the output limit is {MAX_OUTPUTS} results or {} MiB",
                        results.len(),
                        stowage_core::human_size(bytes as u64),
                        MAX_OUTPUT_BYTES >> 20
                    ));
                    break;
                }
            }
            Err(e) => {
                if FENCE.get().is_some_and(|(_, stop)| stop.load(Ordering::Relaxed)) {
                    stopped = Some(format!(
                        "stopped: the program ran past its time limit ({}); narrow it (select first, then group or count)",
                        secs(LIMIT.get())
                    ));
                    break;
                }
                let what = stowage_transform::stub::one_line(&error_text(e), 300);
                return Err(ToolError::bad_request(format!("artifact_query: the jq program failed: {what}")));
            }
        }
    }
    Ok(Output { results, stopped })
}

/// An error's message: a string as its text, any other value as JSON.
fn error_text(e: Error<Val>) -> String {
    let v = e.into_val();
    match v.as_str_bytes() {
        Some(s) => String::from_utf8_lossy(s).into_owned(),
        None => v.to_json(),
    }
}

/// One input as `format`, as a jq value: read in place (see [`doc`]).
fn read(id: &str, bytes: &Bytes, format: Format) -> Result<Val, ToolError> {
    const TOOL: &str = "artifact_query";
    let not_text = |e: std::str::Utf8Error| {
        ToolError::bad_request(format!("{TOOL}: artifact {id} is not UTF-8 text ({e}); read it with artifact_read, or query it as JSON"))
    };
    let parsed = match format {
        Format::Json => doc::json(bytes.clone()).map_err(|e| {
            if e.to_string().starts_with(doc::TOO_DEEP) {
                ToolError::bad_request(format!(
                    "{TOOL}: artifact {id} nests deeper than {MAX_INPUT_DEPTH} levels (at line {} column {}); jq reads at most that",
                    e.line(),
                    e.column()
                ))
            } else {
                input::not_json(TOOL, id, &e)
            }
        })?,
        Format::Csv | Format::Tsv => {
            let delimiter = if format == Format::Csv { b',' } else { b'\t' };
            std::str::from_utf8(bytes).map_err(not_text)?;
            let reader = input::delimited_reader(TOOL, id, bytes, delimiter)?;
            doc::delimited(bytes.clone(), reader, delimiter).map_err(|e| input::csv_error(TOOL, id, delimiter, &e))?
        }
        Format::Ndjson => doc::ndjson(bytes.clone()).map_err(|(line, e)| {
            let text = String::from_utf8_lossy(bytes);
            let shown = text.lines().nth(line - 1).map(|l| stowage_transform::stub::one_line(l, 80)).unwrap_or_default();
            ToolError::bad_request(format!("{TOOL}: artifact {id} is not NDJSON: line {line} is not one JSON value ({e}): {shown}"))
        })?,
        Format::Lines => doc::lines(bytes.clone()).map_err(not_text)?,
    };
    Ok(Val::of(&std::rc::Rc::new(parsed), 0))
}

/// The results as the answer pages them: one array result by its items, one object by its
/// members, one string by its text; several results as a stream of items.
fn page(mut results: Vec<Val>) -> Paged {
    if results.len() != 1 {
        return Paged::Items { items: results.iter().map(Val::to_json).collect(), stream: true };
    }
    let one = results.pop().expect("one result");
    match one.shape() {
        Shape::Arr => Paged::Items { items: one.items().expect("an array").map(|x| x.to_json()).collect(), stream: false },
        Shape::Obj => Paged::Members(one.fields().expect("an object").map(|(k, v)| (k.to_json(), v.to_json())).collect()),
        Shape::Str => Paged::Text(String::from_utf8_lossy(one.as_str_bytes().expect("a string")).into_owned()),
        _ => Paged::Scalar(one.to_json()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT_IN_TESTS: Duration = Duration::from_millis(300);

    fn run_on(code: &str, doc: &str) -> Result<(Paged, Option<String>), ToolError> {
        run_as(code, doc, Format::Json)
    }

    fn run_as(code: &str, doc: &str, format: Format) -> Result<(Paged, Option<String>), ToolError> {
        check(code)?;
        let input = Input { docs: vec![("t_1".into(), Bytes::copy_from_slice(doc.as_bytes()))], format, several: false };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(run_within(code.into(), input, LIMIT_IN_TESTS))
    }

    #[test]
    fn programs_answer_counts_groups_and_filters() {
        let doc = r#"{"rows": [{"code": "E1", "n": 3}, {"code": "E2", "n": 5}, {"code": "E1", "n": 1}]}"#;
        match run_on(".rows | length", doc).unwrap().0 {
            Paged::Scalar(s) => assert_eq!(s, "3"),
            other => panic!("{other:?}"),
        }
        match run_on("[.rows[] | .code] | group_by(.) | map({(.[0]): length}) | add", doc).unwrap().0 {
            Paged::Members(m) => assert_eq!(m, vec![("\"E1\"".into(), "2".into()), ("\"E2\"".into(), "1".into())]),
            other => panic!("{other:?}"),
        }
        match run_on(".rows[] | select(.n > 2) | .code", doc).unwrap().0 {
            Paged::Items { items, stream } => assert_eq!((items, stream), (vec!["\"E1\"".to_owned(), "\"E2\"".to_owned()], true)),
            other => panic!("{other:?}"),
        }
        match run_on("env", doc).unwrap().0 {
            Paged::Items { items, .. } => panic!("{items:?}"),
            Paged::Members(m) => assert!(m.is_empty(), "the gateway's environment is not a program's"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_programs_say_where_in_one_line() {
        let e = check(".rows | map(.code").unwrap_err();
        assert!(e.message.contains("does not parse at character") && !e.message.contains('\n'), "{e}");
        let e = check(".rows | nosuchfn").unwrap_err();
        assert!(e.message.contains("undefined filter nosuchfn") && e.message.contains("character 8"), "{e}");
        let e = check("def f: f; f").unwrap_err();
        assert!(e.message.contains("may not use `def`"), "{e}");
        let e = check("[.[] | \"\\(def f: 1; f)\"]").unwrap_err();
        assert!(e.message.contains("`def`"), "{e}");
        assert!(check("import \"x\" as x; .").unwrap_err().message.contains("`import`"));
        let e = run_on(".a + 1", r#"{"a": "x"}"#).unwrap_err();
        assert!(e.message.starts_with("artifact_query: the jq program failed: cannot"), "{e}");
    }

    #[test]
    fn runaway_programs_stop_at_the_limit() {
        let started = Instant::now();
        let (out, stopped) = run_on("[range(1e15)] | length", "null").unwrap();
        assert!(stopped.unwrap().contains("ran past its time limit (0.3 s)"), "{out:?}");
        assert!(started.elapsed() < Duration::from_secs(2));
        let (_, stopped) = run_on("last(repeat(1))", "null").unwrap();
        assert!(stopped.is_some());
        // A caught step error does not resume the loop.
        let (_, stopped) = run_on("[limit(3; try repeat(1) catch 0)], (last(range(1e15)) | tostring)", "null").unwrap();
        assert!(stopped.is_some());
        let deep = "[".repeat(5_000) + &"]".repeat(5_000);
        assert!(run_on(".", &deep).unwrap_err().message.contains("nests deeper than 1000"));
    }

    fn scalar(p: (Paged, Option<String>)) -> String {
        match p.0 {
            Paged::Scalar(s) | Paged::Text(s) => s,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn halt_fails_the_program_and_the_gateway_goes_on() {
        // jaq's own `halt` ends the process (`std::process::exit`): here it is an error.
        for code in ["halt", "halt_error", "1, halt_error(1)", "try halt catch ."] {
            match run_on(code, "null") {
                Err(e) => assert!(e.message.contains("not by halting"), "{code}: {e}"),
                Ok((Paged::Items { items, .. }, _)) => assert!(items.iter().any(|i| i.contains("not by halting")), "{code}: {items:?}"),
                Ok(other) => assert!(format!("{other:?}").contains("not by halting"), "{code}: {other:?}"),
            }
        }
    }

    #[test]
    fn csv_tsv_ndjson_and_lines_are_read_in_place_as_rows_values_and_strings() {
        let csv = "id,region,units,name\n1,north,300,\"Lovelace, Ada\"\n2,south,10,Bob\n3,north,260,\"Ann \"\"A\"\"\"\n";
        let code = r#"map(select(.region == "north" and .units > 250)) | {n: length, top: (max_by(.units) | .name), keys: (.[0] | keys)}"#;
        match run_as(code, csv, Format::Csv).unwrap().0 {
            Paged::Members(m) => assert_eq!(
                m,
                [("\"n\"", "2"), ("\"top\"", "\"Lovelace, Ada\""), ("\"keys\"", r#"["id","name","region","units"]"#)]
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(scalar(run_as(".[2].name", csv, Format::Csv).unwrap()), "Ann \"A\"");
        assert_eq!(scalar(run_as("map(.b) | add", "a\tb\nx\t2\ny\t3\n", Format::Tsv).unwrap()), "5");
        assert_eq!(
            scalar(run_as("map(.code) | join(\",\")", "{\"code\":\"E1\"}\n\n{\"code\":\"E2\"}\n", Format::Ndjson).unwrap()),
            "E1,E2"
        );
        let log = "ERROR E1 disk\nINFO ok\r\nERROR E2 net\nERROR E1 disk\n";
        let code = r#"map(select(startswith("ERROR")) | split(" ")[1]) | group_by(.) | map({(.[0]): length}) | add"#;
        match run_as(code, log, Format::Lines).unwrap().0 {
            Paged::Members(m) => assert_eq!(m, [("\"E1\"", "2"), ("\"E2\"", "1")].map(|(k, v)| (k.to_owned(), v.to_owned()))),
            other => panic!("{other:?}"),
        }
        let e = run_as(".", "a,b\n1,2\n3\n", Format::Csv).unwrap_err();
        assert!(e.message.contains("not CSV at line 3") && e.message.contains("1 fields where the header has 2"), "{e}");
        let e = run_as(".", "{\"a\":1}\n{oops\n", Format::Ndjson).unwrap_err();
        assert!(e.message.contains("line 2 is not one JSON value") && !e.message.contains('\n'), "{e}");
        let e = run_on(".", "{\"a\": 1} x").unwrap_err();
        assert!(e.message.contains("is not JSON (trailing characters"), "{e}");
    }

    #[test]
    fn strings_a_program_builds_are_capped() {
        let e = run_on(r#""abc" * 100000000"#, "null").unwrap_err();
        assert!(e.message.contains("larger than jq builds here (64 MiB)"), "{e}");
        assert_eq!(scalar(run_on(r#""ab" * 3"#, "null").unwrap()), "ababab");
    }

    /// jaq's own values (jaq-json's), to check ours against.
    fn jaq_answers(code: &str, doc: &str) -> Vec<String> {
        use jaq_json::Val as J;
        type JD = data::JustLut<J>;
        let defs = jaq_core::defs().chain(jaq_std::defs()).chain(jaq_json::defs());
        let loader = Loader::new(defs);
        let arena = Arena::default();
        let Ok(modules) = loader.load(&arena, File { code, path: () }) else { return vec!["does not compile".into()] };
        let funs = jaq_core::funs::<JD>().chain(jaq_std::funs()).chain(jaq_json::funs());
        let Ok(filter) = Compiler::default().with_funs(funs).compile(modules) else { return vec!["does not compile".into()] };
        let input = jaq_json::read::parse_single(doc.as_bytes()).unwrap();
        let ctx = Ctx::<JD>::new(&filter.lut, Vars::new([]));
        filter
            .id
            .run((ctx, input))
            .map(|r| match r.map_err(|e| e.get_err()) {
                Ok(v) => normal(&v.to_string()),
                Err(Ok(e)) => format!("error: {}", e.into_val()),
                Err(Err(_)) => "halt".into(),
            })
            .collect()
    }

    fn our_answers(code: &str, doc: &str) -> Vec<String> {
        let Ok(filter) = compile(code) else { return vec!["does not compile".into()] };
        let input = read("t_1", &Bytes::copy_from_slice(doc.as_bytes()), Format::Json).unwrap();
        filter
            .run(input)
            .map(|r| match r.map_err(|e| e.get_err()) {
                Ok(v) => normal(&v.to_json()),
                Err(Ok(e)) => format!("error: {}", e.into_val()),
                Err(Err(_)) => "halt".into(),
            })
            .collect()
    }

    /// JSON text with numbers as serde reads them (jaq keeps a decimal's spelling).
    fn normal(json: &str) -> String {
        serde_json::from_str::<serde_json::Value>(json).map_or_else(|_| json.to_owned(), |v| v.to_string())
    }

    #[test]
    fn programs_answer_as_they_do_on_jaqs_own_values() {
        let doc = r#"{"orders": [
            {"id": "O-1", "region": "north", "status": "paid", "total": 120, "tags": ["a", "b"], "lines": [{"sku": "S1", "qty": 2}]},
            {"id": "O-2", "region": "south", "status": "refunded", "total": 35.5, "tags": [], "lines": [{"sku": "S2", "qty": 1}, {"sku": "S1", "qty": 4}]},
            {"id": "O-3", "region": "north", "status": "refunded", "total": 80, "note": "gift \"wrap\"\n", "lines": []},
            {"id": "O-4", "region": "east", "status": "paid", "total": -7, "tags": ["b"], "lines": null}
        ], "meta": {"generated": "2026-11-29", "count": 4, "nested": {"deep": [1, [2, [3]]]}}, "dup": 1, "dup": 2}"#;
        let programs = [
            ".",
            ".orders | length",
            ".orders | map(select(.status == \"refunded\")) | group_by(.region) | map({region: .[0].region, n: length, total: (map(.total) | add)})",
            ".orders[] | .id",
            ".orders[1:3] | map(.id)",
            ".orders[-1].id",
            ".orders[10]",
            ".orders | map(.total) | add, min, max, sort, (add / length)",
            ".orders | sort_by(.total) | map(.id)",
            ".orders | sort_by(.region, -.total) | map(.id)",
            ".orders | unique_by(.region) | map(.region)",
            ".orders | min_by(.total), max_by(.total) | .id",
            "[.orders[] | .lines // [] | .[] | .sku] | unique",
            ".orders | map(.tags | length?)",
            ".orders | map(has(\"note\"))",
            ".orders[0] | keys, keys_unsorted, to_entries, length",
            ".orders[0] | with_entries(.value |= tostring)",
            ".orders[0] | del(.lines) | .extra = 1",
            ".orders[0].lines[0].qty += 10 | .orders[0].lines",
            ".orders | map(.id | ascii_downcase | ltrimstr(\"o-\") | tonumber)",
            ".orders | map(.id | test(\"O-[12]\"))",
            ".orders[2].note | length, explode[0:3], (. / \" \"), @json, @base64, ascii_upcase",
            ".orders[] | select(.tags | index(\"b\")) | .id",
            ".orders | map(.tags) | add | indices(\"b\")",
            ".orders | map(.total) | contains([120]), inside([120, 80, 35.5, -7, 1])",
            ".meta | [paths]",
            ".meta | [paths(type == \"number\")]",
            ".meta.nested | getpath([\"deep\", 1, 1, 0])",
            "[.meta | .. | numbers]",
            ".dup, (keys | length)",
            ".orders | map(.lines) | map(length?)",
            ".orders | .[0] == .[0], .[0] == .[1], .[0] < .[1], ([.[] | .lines] | sort)",
            "{a: 1} + {b: 2} | . * {a: {c: 3}}",
            ".orders | map(.region) | . - [\"north\"]",
            "[.orders[] | .total] | map(. % 7, . * 2, -.)",
            ".orders | first, last | .id",
            "[limit(2; .orders[])] | length",
            ".orders | any(.total > 100), all(.total > 0)",
            ".orders | map(select(.note)) | .[0].note | fromjson? // \"not json\"",
            "\"[1, {\\\"a\\\": 2}]\" | fromjson | .[1].a",
            ".orders | map(tojson) | .[3]",
            ".orders | [.[] | .id] | join(\"|\")",
            ".orders[] | [.id, .region] | @text \"\\(.[0]),\\(.[1])\"",
            ".orders | reduce .[] as $o ({}; .[$o.region] += $o.total)",
            ".orders | [foreach .[] as $o (0; . + 1; [., $o.id])]",
            ".orders | map(.lines) | flatten | length",
            ".orders | to_entries | map(.key)",
            ".orders | map(.total | floor, sqrt?) | length",
            ".missing.deeper, .orders.x?, (.orders | .[\"x\"]?)",
            ".orders[0] | .[\"id\"], .id?",
            ".orders | .[0].id[1:]",
            "[.orders[] | .total] | bsearch(80), (sort | bsearch(80))",
            ".meta | splits(\"x\")?",
            ".orders | map(.status) | group_by(.) | map([.[0], length])",
            "[range(0; 10; 3)], [range(5)]",
            ".orders | map(select(.lines | type == \"array\" and length > 0)) | map(.id)",
            ".orders | [.[] | .total] | @text, @sh",
            ".meta.count + \"x\"",
            ".orders.id",
            "[.orders[] | .total | tostring | ltrimstr(\"-\")]",
            ".orders | transpose? // \"no\"",
            "[.orders[0] | to_entries[] | select(.value | type == \"string\") | .key]",
            ".orders[0] | .tags |= map(. + \"!\")",
            ".orders | map(.id) | .[1:] = [\"z\"]",
            ".orders | (.[0] | objects | length), (.[0].tags | arrays | length)",
            "[.[]?] | length",
            // `select` and `map` are natives: their paths, updates, errors and branches.
            "del(.orders[] | select(.status == \"paid\")) | .orders | map(.id)",
            "(.orders[] | select(.total > 50) | .total) |= . * 2 | [.orders[].total]",
            "[path(.orders[] | select(.tags))], [paths(type == \"number\")]",
            ".orders | map(select(.total > 50, .total < 0) | .id)",
            "(.orders[] | select(.total > 50, .region == \"north\")) |= {id, n: 1} | .orders | map(.id)",
            "(.orders[] | select(.id == \"O-2\") | .status) = \"x\" | .orders[1].status",
            ".orders |= map(select(.total > 0)) | .orders | length",
            "(.orders[] | select(.total > 50)) |= (., {}) | .orders | map(.id)",
            "(.orders[] | select(.total > 50)) |= empty | .orders | map(.id)",
            "try (.orders[] | select(.total | error)) catch .",
            "[.orders[] | select(.lines[0].qty > 1) | .id]",
            "[.orders[] | select(.total > 50) | select(.region == \"north\") | .id]",
            "[label $out | .orders[] | select(if .total < 0 then break $out else true end) | .id]",
            "limit(1; .orders[] | select(.status == \"refunded\")) | .id",
            "try ((.orders[] | select(error(\"bad\"))) |= 1) catch .",
            "to_entries | map(select(.key == \"dup\"))",
            ".meta.count | try map(.) catch .",
            ".meta | map(type), map(.count?)",
            ".orders | map(.tags[]?), map(.id, .total), [map(empty)]",
            ".orders | try map(error(\"e\")) catch .",
            ".orders | try map(.lines[]) catch .",
            "try path(.meta | map(.)) catch .",
            "try ((.meta | map(.)) |= 1) catch .",
            ".orders[0:2] | map(select(true)) | map(.region)",
            "map_values(select(. != null)) | keys",
            ".orders | map(values), map(numbers), [.[] | strings]",
            // Field steps are rewritten into the key native (rewrite.rs): reads, paths, updates.
            "[path(.orders[0].lines[0].sku)], [path(.meta.nested.deep[1][1][0])]",
            ".orders[0][\"id\"], .meta.\"count\", .meta.nested.deep[1][1][0], .orders[1:2][0].id",
            "del(.orders[0].lines) | .orders[0] | keys",
            ".meta.count |= . + 1 | .meta.count += 1 | .meta.count",
            ".meta.missing.x = 1 | .meta.missing",
            "try (.orders[0].id.x) catch ., [.orders[0].id.x?], [.orders[].lines[]?.sku]",
            "{id: .orders[0].id, n: .meta.count}, (.orders[0] | {region, total})",
            "\"\\(.meta.count) orders\", .meta[.meta | keys[0]], getpath([\"meta\", \"count\"])",
            "reduce .orders[] as {region: $r, total: $t} ({}; .[$r] += $t)",
            "(.meta.count, .dup) |= 0 | .meta.count, .dup",
            ".orders[0].lines[0].qty |= empty | .orders[0].lines",
            ".orders | map(.lines[0].sku?), [paths(..) | length] | length",
            ".meta.count as $c | .orders[$c - 1].id",
            "[.orders[] | .lines // [] | .[] | .qty] | add",
        ];
        let differ: Vec<String> = programs
            .iter()
            .filter_map(|code| {
                let (ours, jaqs) = (our_answers(code, doc), jaq_answers(code, doc));
                (ours != jaqs || ours == ["does not compile"]).then(|| format!("{code}\n  ours: {ours:?}\n  jaq:  {jaqs:?}"))
            })
            .collect();
        assert!(differ.is_empty(), "{}", differ.join("\n"));
    }
}
