//! How the query tools read a text artifact (`as`): JSON (the default), CSV and TSV rows as
//! objects keyed by the header (the `csv` crate), NDJSON (one JSON value a line), or lines
//! (an array of strings). A file that is not what `as` says is refused with one line naming
//! the first bad record.

use serde_json::{Map, Value};

use super::ToolError;

/// The formats `as` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Json,
    Csv,
    Tsv,
    Ndjson,
    Lines,
}

impl Format {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Csv => "csv",
            Format::Tsv => "tsv",
            Format::Ndjson => "ndjson",
            Format::Lines => "lines",
        }
    }

    /// The format a media type says, when it says one other than JSON.
    pub(crate) fn of_mime(mime: Option<&str>) -> Option<Format> {
        let essence = mime?.split(';').next()?.trim().to_ascii_lowercase();
        match essence.as_str() {
            "text/csv" => Some(Format::Csv),
            "text/tab-separated-values" => Some(Format::Tsv),
            "application/x-ndjson" | "application/ndjson" | "application/jsonl" | "application/x-jsonlines" => Some(Format::Ndjson),
            _ => None,
        }
    }
}

/// The `as` argument of `tool`.
pub(crate) fn format_argument(tool: &str, arguments: &Value) -> Result<Option<Format>, ToolError> {
    Ok(match arguments.get("as") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(match s.to_ascii_lowercase().as_str() {
            "json" => Format::Json,
            "csv" => Format::Csv,
            "tsv" => Format::Tsv,
            "ndjson" | "jsonl" | "jsonlines" => Format::Ndjson,
            "lines" | "text" => Format::Lines,
            other => {
                return Err(ToolError::bad_request(format!(
                    "{tool}: \"as\" must be one of \"json\", \"csv\", \"tsv\", \"ndjson\", \"lines\", not {other:?}"
                )));
            }
        }),
        Some(v) => return Err(ToolError::bad_request(format!("{tool}: \"as\" must be a string such as \"csv\", not {v}"))),
    })
}

/// `text` (artifact `id`'s) read as `format`, for the tools that use serde values.
pub(crate) fn parse(tool: &str, id: &str, text: &str, format: Format) -> Result<Value, ToolError> {
    match format {
        Format::Json => serde_json::from_str(text).map_err(|e| not_json(tool, id, &e)),
        Format::Csv => delimited(tool, id, text, b','),
        Format::Tsv => delimited(tool, id, text, b'\t'),
        Format::Ndjson => ndjson(tool, id, text).map(Value::Array),
        Format::Lines => Ok(Value::Array(lines(text).map(|l| Value::String(l.to_owned())).collect())),
    }
}

/// Why JSON text did not parse, as one line that says what to do instead.
pub(crate) fn not_json(tool: &str, id: &str, e: &serde_json::Error) -> ToolError {
    let hint = if e.line() > 1 && e.classify() == serde_json::error::Category::Syntax {
        "; for one JSON value a line pass \"as\": \"ndjson\", for CSV \"as\": \"csv\", for text \"as\": \"lines\""
    } else {
        "; pass \"as\": \"csv\", \"tsv\", \"ndjson\" or \"lines\" for other text, or use artifact_read"
    };
    ToolError::bad_request(format!("{tool}: artifact {id} is not JSON ({e}){hint}"))
}

/// The lines of `text`, without their line ends (a last empty line is not one).
pub(crate) fn lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
}

/// One JSON value per non-empty line.
pub(crate) fn ndjson(tool: &str, id: &str, text: &str) -> Result<Vec<Value>, ToolError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v = serde_json::from_str(line).map_err(|e| {
            ToolError::bad_request(format!(
                "{tool}: artifact {id} is not NDJSON: line {} is not one JSON value ({e}): {}",
                i + 1,
                stowage_transform::stub::one_line(line, 80)
            ))
        })?;
        out.push(v);
    }
    Ok(out)
}

/// CSV or TSV rows as objects keyed by the header. A field that is a JSON number (no leading
/// zeros: `007` is an id, not seven) becomes a number, the rest stay strings, so a filter like
/// `.amount > 100` compares numbers.
fn delimited(tool: &str, id: &str, text: &str, delimiter: u8) -> Result<Value, ToolError> {
    let mut reader = delimited_reader(tool, id, text.as_bytes(), delimiter)?;
    let headers: Vec<String> = reader.headers().map_err(|e| csv_error(tool, id, delimiter, &e))?.iter().map(str::to_owned).collect();
    let mut rows = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| csv_error(tool, id, delimiter, &e))?;
        let mut row = Map::with_capacity(headers.len());
        for (h, field) in headers.iter().zip(record.iter()) {
            row.insert(h.clone(), field_value(field));
        }
        rows.push(Value::Object(row));
    }
    Ok(Value::Array(rows))
}

/// A CSV or TSV reader over `text` with its header read, or why `text` is not one (it looks
/// like JSON; its header has tabs where commas were asked for).
pub(crate) fn delimited_reader<'t>(tool: &str, id: &str, text: &'t [u8], delimiter: u8) -> Result<csv::Reader<&'t [u8]>, ToolError> {
    let what = if delimiter == b',' { "CSV" } else { "TSV" };
    let trimmed = text.trim_ascii_start();
    if trimmed.starts_with(b"{") || trimmed.starts_with(b"[") {
        return Err(ToolError::bad_request(format!(
            "{tool}: artifact {id} is not {what}: it starts like JSON; leave \"as\" out to read it as JSON"
        )));
    }
    let mut reader = csv::ReaderBuilder::new().delimiter(delimiter).has_headers(true).flexible(false).from_reader(text);
    let headers = reader.byte_headers().map_err(|e| csv_error(tool, id, delimiter, &e))?;
    if headers.len() < 2 && delimiter == b',' && headers.get(0).is_some_and(|h| h.contains(&b'\t')) {
        return Err(ToolError::bad_request(format!(
            "{tool}: artifact {id} is not CSV: its header has tabs, not commas; pass \"as\": \"tsv\""
        )));
    }
    Ok(reader)
}

/// Why a CSV or TSV record did not read, in one line naming it.
pub(crate) fn csv_error(tool: &str, id: &str, delimiter: u8, e: &csv::Error) -> ToolError {
    let what = if delimiter == b',' { "CSV" } else { "TSV" };
    let at = e.position().map(|p| format!(" at line {}", p.line())).unwrap_or_default();
    let why = match e.kind() {
        csv::ErrorKind::UnequalLengths { expected_len, len, .. } => {
            format!("a record has {len} fields where the header has {expected_len}")
        }
        _ => e.to_string(),
    };
    ToolError::bad_request(format!("{tool}: artifact {id} is not {what}{at}: {why}"))
}

/// A CSV field as JSON: a number when it is written as one (without leading zeros or a `+`),
/// else the string.
pub(crate) fn field_value(field: &str) -> Value {
    field_number(field).map_or_else(|| Value::String(field.to_owned()), Value::Number)
}

/// A CSV field's number, when it is written as one (without leading zeros or a `+`).
pub(crate) fn field_number(field: &str) -> Option<serde_json::Number> {
    let b = field.as_bytes();
    let digits = b.strip_prefix(b"-").unwrap_or(b);
    let numeric = !digits.is_empty()
        && digits[0].is_ascii_digit()
        && !(digits.len() > 1 && digits[0] == b'0' && digits[1].is_ascii_digit())
        && b.iter().all(|c| c.is_ascii_digit() || matches!(c, b'-' | b'.' | b'e' | b'E' | b'+'));
    if numeric { serde_json::from_str::<serde_json::Number>(field).ok() } else { None }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn csv_rows_are_objects_with_numbers_typed() {
        let v = parse("q", "t_1", "id,amount,zip,name\n1,10.5,007,\"Lovelace, Ada\"\n2,-3,12345,x\n", Format::Csv).unwrap();
        assert_eq!(
            v,
            json!([{"id": 1, "amount": 10.5, "zip": "007", "name": "Lovelace, Ada"}, {"id": 2, "amount": -3, "zip": 12345, "name": "x"}])
        );
        let v = parse("q", "t_1", "a\tb\n1\tx y\n", Format::Tsv).unwrap();
        assert_eq!(v, json!([{"a": 1, "b": "x y"}]));
    }

    #[test]
    fn a_file_that_is_not_what_as_says_is_refused_naming_the_first_bad_record() {
        let e = parse("q", "t_1", "a,b\n1,2\n3\n4,5\n", Format::Csv).unwrap_err();
        assert!(e.message.contains("not CSV at line 3") && e.message.contains("1 fields where the header has 2"), "{e}");
        let e = parse("q", "t_1", "{\"a\": 1}", Format::Csv).unwrap_err();
        assert!(e.message.contains("starts like JSON"), "{e}");
        let e = parse("q", "t_1", "a\tb\n1\t2\n", Format::Csv).unwrap_err();
        assert!(e.message.contains("\"as\": \"tsv\""), "{e}");
        let e = parse("q", "t_1", "{\"a\":1}\n{oops\n", Format::Ndjson).unwrap_err();
        assert!(e.message.contains("line 2 is not one JSON value") && !e.message.contains('\n'), "{e}");
        assert_eq!(parse("q", "t_1", "x\r\ny\n", Format::Lines).unwrap(), json!(["x", "y"]));
        let e = parse("q", "t_1", "{\"a\":1}\n{\"a\":2}\n", Format::Json).unwrap_err();
        assert!(e.message.contains("ndjson"), "{e}");
    }
}
