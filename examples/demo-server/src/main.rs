//! `stowage-demo-server`: the bundled demo MCP server on stdio, for fronting it like any
//! other server (`stowage serve -- stowage-demo-server`) or poking at it with an MCP client.

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if let Err(e) = stowage_demo::serve(tokio::io::stdin(), tokio::io::stdout()).await {
        eprintln!("stowage-demo-server: {e}");
        std::process::exit(1);
    }
}
