//! The transform pipeline: turns a tool result into the same shape with heavy parts replaced
//! by compact artifact stubs, plus a report.
#![forbid(unsafe_code)]
