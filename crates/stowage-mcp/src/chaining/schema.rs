//! Tools that declare their blobs, and the schema the model is shown for them.
//!
//! Two declarations are read, on top-level `inputSchema` properties:
//! - AWP's `_awp.blob {input: {field: description}, output: {field: description}}` beside the
//!   schema; the tool takes `{url, contentType?}` for an input and `{url, accept?}` for an
//!   output;
//! - an `x-mcp-file` marker on a URI-string property (the pending MCP "File Objects and
//!   Transfer" proposal): `"x-mcp-file": "input"` (or `true`) or `"output"`, optionally
//!   `"x-mcp-accept": "image/png"`; the tool takes the URL string itself.
//!
//! The model sees neither URL: an input blob becomes `{uri, contentType?}` (an `artifact://`
//! URI of an earlier result, or an `https://` URL), an output blob `{accept?, prefix?}`, never
//! required.

use serde_json::{Map, Value, json};

/// How the tool wants a blob field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// AWP: an object with `url` (and `contentType` / `accept`).
    Object,
    /// `x-mcp-file`: the URL string.
    UrlString,
}

/// One declared blob field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobField {
    /// The top-level property of the tool's input schema.
    pub name: String,
    /// What the tool expects in it.
    pub shape: Shape,
    /// Output blobs: the media types the tool declared it writes (`x-mcp-accept`, or the
    /// field's `accept` default), used when the model asks for none.
    pub accept: Option<String>,
}

/// A tool's declared blob fields, by direction.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlobFields {
    /// Fields the tool reads a blob from: the model gives an artifact URI, the gateway a URL.
    pub inputs: Vec<BlobField>,
    /// Fields where the tool is given a URL to write a blob to.
    pub outputs: Vec<BlobField>,
}

impl BlobFields {
    /// Whether the tool declares no blob field at all.
    pub fn is_empty(&self) -> bool {
        self.inputs.is_empty() && self.outputs.is_empty()
    }
}

/// The blob fields `def` (a tool definition) declares; empty when it declares none.
pub fn declared(def: &Value) -> BlobFields {
    let mut fields = BlobFields::default();
    let props = def.pointer("/inputSchema/properties").and_then(Value::as_object);
    let Some(props) = props else { return fields };
    let default_accept =
        |p: &Value| p.get("x-mcp-accept").or_else(|| p.pointer("/properties/accept/default")).and_then(Value::as_str).map(str::to_owned);
    if let Some(blob) = def.pointer("/_awp/blob") {
        for (dir, list) in [("input", &mut fields.inputs), ("output", &mut fields.outputs)] {
            for name in blob.get(dir).and_then(Value::as_object).into_iter().flat_map(Map::keys) {
                if let Some(p) = props.get(name) {
                    list.push(BlobField { name: name.clone(), shape: Shape::Object, accept: default_accept(p) });
                }
            }
        }
    }
    for (name, p) in props {
        let dir = match p.get("x-mcp-file") {
            Some(Value::Bool(true)) => "input",
            Some(Value::String(s)) if s == "input" || s == "output" => s.as_str(),
            _ => continue,
        };
        if fields.inputs.iter().chain(&fields.outputs).any(|f| &f.name == name) {
            continue; // declared both ways: AWP's declaration wins
        }
        let f = BlobField { name: name.clone(), shape: Shape::UrlString, accept: default_accept(p) };
        if dir == "input" { fields.inputs.push(f) } else { fields.outputs.push(f) }
    }
    fields
}

/// The definition the model is shown: blob fields in their model-facing shape.
pub fn llm_facing(def: &Value, fields: &BlobFields) -> Value {
    let mut def = def.clone();
    let Some(schema) = def.get_mut("inputSchema").and_then(Value::as_object_mut) else { return def };
    let outputs: Vec<&str> = fields.outputs.iter().map(|f| f.name.as_str()).collect();
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        for f in &fields.inputs {
            let description = describe(props.get(&f.name), "An artifact to read");
            props.insert(
                f.name.clone(),
                json!({
                    "type": "object",
                    "description": format!("{description} (an artifact:// URI from an earlier tool result, or an https:// URL)"),
                    "properties": {
                        "uri": {"type": "string", "description": "artifact:// URI of an earlier result, or an https:// URL"},
                        "contentType": {"type": "string", "description": "the media type, if known"}
                    },
                    "required": ["uri"]
                }),
            );
        }
        for f in &fields.outputs {
            let description = describe(props.get(&f.name), "Where the tool writes its output");
            props.insert(
                f.name.clone(),
                json!({
                    "type": "object",
                    "description": format!("{description}. Optional: the gateway stores what the tool writes and returns its artifact:// URI."),
                    "properties": {
                        "accept": {"type": "string", "description": "media types accepted for the output, e.g. image/png"},
                        "prefix": {"type": "string", "description": "a file name for the output"}
                    }
                }),
            );
        }
    }
    if let Some(Value::Array(required)) = schema.get_mut("required") {
        required.retain(|r| r.as_str().is_none_or(|r| !outputs.contains(&r)));
    }
    def
}

fn describe(p: Option<&Value>, fallback: &str) -> String {
    p.and_then(|p| p.get("description")).and_then(Value::as_str).unwrap_or(fallback).trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn awp_tool() -> Value {
        json!({
            "name": "remove_background",
            "inputSchema": {"type": "object", "required": ["image", "result"], "properties": {
                "image": {"type": "object", "properties": {"url": {"type": "string"}, "contentType": {"type": "string"}}, "required": ["url"]},
                "result": {"type": "object", "properties": {"url": {"type": "string"}, "accept": {"type": "string", "default": "image/png"}}, "required": ["url"]},
                "strength": {"type": "number"}
            }},
            "_awp": {"blob": {"input": {"image": "Source image"}, "output": {"result": "Image without background"}}}
        })
    }

    #[test]
    fn awp_declarations_are_read_and_shown_as_uri_and_accept() {
        let def = awp_tool();
        let f = declared(&def);
        assert_eq!(f.inputs, vec![BlobField { name: "image".into(), shape: Shape::Object, accept: None }]);
        assert_eq!(f.outputs, vec![BlobField { name: "result".into(), shape: Shape::Object, accept: Some("image/png".into()) }]);
        let llm = llm_facing(&def, &f);
        let props = &llm["inputSchema"]["properties"];
        assert_eq!(props["image"]["required"], json!(["uri"]));
        assert!(props["image"]["properties"].get("url").is_none());
        assert!(props["result"]["properties"].get("url").is_none());
        assert!(props["result"]["properties"].get("accept").is_some());
        assert_eq!(llm["inputSchema"]["required"], json!(["image"]), "an output blob is never required of the model");
        assert_eq!(props["strength"], json!({"type": "number"}), "other properties are untouched");
    }

    #[test]
    fn x_mcp_file_markers_are_read() {
        let def = json!({"name": "t", "inputSchema": {"type": "object", "properties": {
            "src": {"type": "string", "format": "uri", "x-mcp-file": true},
            "dst": {"type": "string", "format": "uri", "x-mcp-file": "output", "x-mcp-accept": "text/plain"},
            "other": {"type": "string", "x-mcp-file": "sideways"}
        }}});
        let f = declared(&def);
        assert_eq!(f.inputs.iter().map(|f| (&*f.name, f.shape)).collect::<Vec<_>>(), vec![("src", Shape::UrlString)]);
        assert_eq!(f.outputs[0].accept.as_deref(), Some("text/plain"));
        assert!(declared(&json!({"name": "plain", "inputSchema": {"type": "object"}})).is_empty());
    }
}
