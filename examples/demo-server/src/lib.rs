//! The demo MCP server that `stowage serve` fronts when no upstream is configured, so that a
//! newcomer sees the whole flow at once: each tool returns one kind of heavy output that a
//! model should never have to read.
//!
//! | tool | returns |
//! |---|---|
//! | `get_report` | a ~300 KB PDF as base64 inside JSON text (the Tableau shape) |
//! | `get_chart` | a native `image` block (PNG, 200×120) |
//! | `get_audio` | a native `audio` block (WAV, 1 s) |
//! | `get_attachment` | an embedded `resource` with a base64 `blob` (PDF) |
//! | `get_report_link` | a `resource_link` to `demo://reports/q3.pdf` (readable as a resource) |
//! | `echo` | its `message` back: small results pass through untouched |
//!
//! It is written with the official Rust SDK, `rmcp`, the way any Rust MCP server would be.
//! `stowage serve` runs it in-process over a pipe ([`serve`]); `stowage-demo-server` runs it
//! on stdio, to be fronted like any other server (`stowage serve -- stowage-demo-server`).

pub mod samples;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rmcp::handler::server::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock as Content, Implementation, ListResourcesResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Resource, ResourceContents, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};

/// The URI of the demo's one resource.
pub const REPORT_URI: &str = "demo://reports/q3.pdf";
const REPORT_BYTES: usize = 120_000;

/// The demo server.
#[derive(Clone)]
pub struct DemoServer {
    tool_router: ToolRouter<DemoServer>,
}

impl Default for DemoServer {
    fn default() -> Self {
        DemoServer { tool_router: Self::tool_router() }
    }
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct EchoArgs {
    /// The text to send back.
    pub message: String,
}

fn report_pdf() -> Vec<u8> {
    samples::pdf(REPORT_BYTES, "Q3 report")
}

#[tool_router]
impl DemoServer {
    #[tool(description = "Quarterly report as a PDF (base64 inside JSON, like Tableau's get_view_pdf)")]
    async fn get_report(&self) -> Result<CallToolResult, ErrorData> {
        let pdf = samples::pdf(300_000, "Q3 report");
        let body = serde_json::json!({"report": "Q3", "filename": "q3-report.pdf", "format": "pdf", "data": STANDARD.encode(&pdf)});
        Ok(CallToolResult::success(vec![Content::text(body.to_string())]))
    }

    #[tool(description = "A chart as a PNG image")]
    async fn get_chart(&self) -> Result<CallToolResult, ErrorData> {
        let png = STANDARD.encode(samples::png(200, 120));
        Ok(CallToolResult::success(vec![Content::text("Revenue by month"), Content::image(png, "image/png")]))
    }

    #[tool(description = "A one-second WAV tone")]
    async fn get_audio(&self) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![Content::audio(STANDARD.encode(samples::wav(1000)), "audio/wav")]))
    }

    #[tool(description = "The report as an embedded resource blob")]
    async fn get_attachment(&self) -> Result<CallToolResult, ErrorData> {
        let blob = ResourceContents::blob(STANDARD.encode(report_pdf()), REPORT_URI).with_mime_type("application/pdf");
        Ok(CallToolResult::success(vec![Content::resource(blob)]))
    }

    #[tool(description = "A resource_link to the report")]
    async fn get_report_link(&self) -> Result<CallToolResult, ErrorData> {
        let link = Resource::new(REPORT_URI, "q3.pdf").with_mime_type("application/pdf").with_size(REPORT_BYTES as u64);
        Ok(CallToolResult::success(vec![Content::resource_link(link)]))
    }

    #[tool(description = "Echoes its message")]
    async fn echo(&self, Parameters(EchoArgs { message }): Parameters<EchoArgs>) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![Content::text(message)]))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for DemoServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_resources().build())
            .with_server_info(Implementation::new("stowage-demo", env!("CARGO_PKG_VERSION")))
            .with_instructions("Demo tools that return heavy content; Stowage turns it into artifact links.")
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let report = Resource::new(REPORT_URI, "q3.pdf").with_mime_type("application/pdf").with_size(REPORT_BYTES as u64);
        Ok(ListResourcesResult::with_all_items(vec![report]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        if request.uri != REPORT_URI {
            return Err(ErrorData::resource_not_found(format!("resource not found: {}", request.uri), None));
        }
        let blob = ResourceContents::blob(STANDARD.encode(report_pdf()), REPORT_URI).with_mime_type("application/pdf");
        Ok(ReadResourceResponse::Complete(ReadResourceResult::new(vec![blob])))
    }
}

/// Serves the demo on a byte pipe until the other end closes.
pub async fn serve<R, W>(reader: R, writer: W) -> Result<(), String>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let running = DemoServer::default().serve((reader, writer)).await.map_err(|e| e.to_string())?;
    running.waiting().await.map_err(|e| e.to_string())?;
    Ok(())
}

/// Starts the demo on a task of the current runtime and returns the client's ends of its pipe:
/// (what the server writes, what it reads). This is how `stowage serve` runs it in-process,
/// with no binary to find on a fresh machine.
pub fn spawn_in_process() -> (tokio::io::ReadHalf<tokio::io::DuplexStream>, tokio::io::WriteHalf<tokio::io::DuplexStream>) {
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    let (their_read, their_write) = tokio::io::split(theirs);
    tokio::spawn(async move {
        if let Err(e) = serve(their_read, their_write).await {
            eprintln!("stowage-demo: the in-process demo server ended: {e}");
        }
    });
    tokio::io::split(ours)
}
