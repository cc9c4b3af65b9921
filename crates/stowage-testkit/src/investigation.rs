//! What `stowage-hosts-fixture` returns, made from fixed rules: the fixture serves it and the
//! real hosts' tests name exactly what the model must see of it (a needle in a long log, one
//! order among 20,000, the root cause at the end of a long trace).

use serde_json::{Value, json};

/// The line the log's needle sits on (1-based).
pub const NEEDLE_LINE: usize = 14_377;
/// What the needle line says: the fact a model finds only by grep or by reading that page.
pub const NEEDLE: &str = "NEEDLE-4417 refund failed: card issuer timeout after 30000 ms (order O-88213)";
/// The order only a query finds.
pub const RARE_ORDER: &str = "O-17777";
/// The last line of the failing job's trace.
pub const ROOT_CAUSE: &str = "Caused by: QuotaExceeded: disk quota exceeded on /var/data/jobs (job 7731, limit 500 GiB)";

/// The service log `get_log` returns: 20,000 lines, [`NEEDLE`] on line [`NEEDLE_LINE`].
pub fn log_text() -> String {
    let services = ["api", "payments", "search", "auth", "billing"];
    let mut out = String::with_capacity(1_700_000);
    for i in 1..=20_000usize {
        let (h, m, s) = (i / 3600 % 24, i / 60 % 60, i % 60);
        let service = services[i % services.len()];
        if i == NEEDLE_LINE {
            out.push_str(&format!("2026-11-28T{h:02}:{m:02}:{s:02}Z ERROR [{service}] {NEEDLE}\n"));
        } else if i % 97 == 0 {
            out.push_str(&format!(
                "2026-11-28T{h:02}:{m:02}:{s:02}Z WARN  [{service}] slow upstream: {} ms for request r-{i}\n",
                800 + i % 700
            ));
        } else {
            out.push_str(&format!(
                "2026-11-28T{h:02}:{m:02}:{s:02}Z INFO  [{service}] request r-{i} served in {} ms, {} bytes, status 200\n",
                i % 97,
                (i * 37) % 9000 + 120
            ));
        }
    }
    out
}

/// The orders `get_orders` returns; only one has id [`RARE_ORDER`].
pub fn orders() -> Vec<Value> {
    let regions = ["north", "south", "east", "west"];
    (0..20_000usize)
        .map(|i| {
            let id = if i == 12_345 { RARE_ORDER.to_owned() } else { format!("O-{}", 30_000 + i) };
            let customer = if i == 12_345 { "Ada Lovelace".to_owned() } else { format!("customer {}", i % 1_500) };
            json!({"id": id, "customer": customer, "region": regions[i % 4], "units": (i * 37) % 500, "total": ((i * 7919) % 100_000) as f64 / 100.0})
        })
        .collect()
}

/// The trace `run_job` fails with, [`ROOT_CAUSE`] on its last line.
pub fn trace_text() -> String {
    let mut out = String::from("job 7731 failed: java.lang.IllegalStateException: the export did not finish\n");
    let mut depth = 0;
    while out.len() < 40_000 {
        depth += 1;
        out.push_str(&format!(
            "\tat com.example.export.stage{}.Writer.flush(Writer.java:{})\n\tat com.example.export.stage{}.Pipeline.run(Pipeline.java:{})\n",
            depth % 40,
            100 + depth,
            depth % 40,
            200 + depth
        ));
    }
    out.push_str(ROOT_CAUSE);
    out
}
