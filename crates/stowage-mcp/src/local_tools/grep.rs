//! The `grep` argument of `artifact_read`, compiled, and its `count`: shared by the text reader (`read.rs`) and
//! the PDF reader (`media.rs`), which `read.rs` hands PDFs to, so neither imports the other
//! for it.

use regex::{Regex, RegexBuilder};
use serde_json::Value;

use super::ToolError;

/// Compiled regexes larger than this are refused: a pattern is the model's input.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// The `grep` argument, compiled.
pub(super) fn grep_argument(arguments: &Value) -> Result<Option<Regex>, ToolError> {
    Ok(match arguments.get("grep") {
        None | Some(Value::Null) => None,
        Some(Value::String(p)) if !p.is_empty() => Some(RegexBuilder::new(p).size_limit(REGEX_SIZE_LIMIT).build().map_err(|e| {
            // The regex crate's message spans lines (the pattern, a caret, the reason).
            let why = e.to_string().lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ");
            ToolError::bad_request(format!(
                "artifact_read: \"grep\" is not a valid regex ({why}); escape special characters like ( [ . * with \\"
            ))
        })?),
        Some(v) => return Err(ToolError::bad_request(format!("artifact_read: \"grep\" must be a non-empty regex string, not {v}"))),
    })
}

/// The `count` argument: `true` answers how many lines match instead of listing them; it
/// needs `grep`.
pub(super) fn count_argument(arguments: &Value, has_grep: bool) -> Result<bool, ToolError> {
    match arguments.get("count") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Ok(false),
        Some(Value::Bool(true)) if has_grep => Ok(true),
        Some(Value::Bool(true)) => {
            Err(ToolError::bad_request("artifact_read: \"count\" goes with \"grep\": give the regex whose matching lines to count"))
        }
        Some(v) => Err(ToolError::bad_request(format!("artifact_read: \"count\" must be true or false, not {v}"))),
    }
}
