//! What `stowage serve` will run, decided and validated in one place: `serve` runs the plan,
//! `check-config` prints it. Both go through [`plan`], so a configuration `check-config`
//! accepts is one `serve` starts with (and `sign-url` mints links on the same base URL).

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use stowage_links::LinksConfig;
use stowage_mcp::GatewayConfig;
use stowage_mcp::config::{SkippedServer, TransportSpec, UpstreamSpec};
use stowage_mcp::run::Mode;

use crate::config::Config;

/// `stowage serve`'s arguments: what the plan is made from, beside the configuration.
// Clap prints these comments as --help, where `[auth]` is a stowage.toml section and a URL is
// an example to type, not a link: rustdoc's link checks do not apply to them.
#[allow(rustdoc::broken_intra_doc_links, rustdoc::bare_urls)]
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Serve one client over stdin/stdout (for hosts that spawn a command) instead of HTTP.
    #[arg(long)]
    pub stdio: bool,
    /// HTTP listen address (default: gateway.listen, 127.0.0.1:8787).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Base URL of download links: where clients reach this gateway, e.g.
    /// https://stowage.example.com (default: links.public_url, else the listen address).
    /// Needed with --listen 0.0.0.0 or [::].
    #[arg(long, value_name = "URL")]
    pub public_url: Option<String>,
    /// A Claude Desktop / Cursor style JSON file with an "mcpServers" object.
    #[arg(long, value_name = "FILE")]
    pub mcp_config: Option<PathBuf>,
    /// Listen on a non-loopback address without [auth] configured. Anyone who can reach the
    /// port can then call your tools and read your artifacts: use only on a trusted network.
    #[arg(long)]
    pub allow_unauthenticated: bool,
    /// Over --stdio, do not start the loopback listener for download links: results carry
    /// artifact:// URIs only.
    #[arg(long)]
    pub no_links: bool,
    /// Do not serve the web playground at / (HTTP only; it is on by default, behind the same
    /// authentication as /mcp).
    #[arg(long)]
    pub no_playground: bool,
    /// One stdio server to wrap, after `--`: `stowage serve -- npx -y some-mcp-server`.
    #[arg(last = true, value_name = "CMD ARGS")]
    pub command: Vec<String>,
}

/// Everything `serve` decided before starting anything.
pub(crate) struct Plan {
    pub mode: Mode,
    /// `[[hosts]]` over the built-in host profiles, with `[transform.image_preview]`.
    pub hosts: Arc<stowage_mcp::hosts::Hosts>,
    /// `[gateway]` with `--listen` applied.
    pub gateway: GatewayConfig,
    pub upstreams: Vec<UpstreamSpec>,
    /// Configured entries that are not served, with why; the others are.
    pub skipped: Vec<SkippedServer>,
    /// Served entries that will not start as things stand (a command that is not there): served
    /// all the same, listed as unavailable until they start, and said by `serve` and
    /// `check-config` in the same words.
    pub warnings: Vec<String>,
    pub auth: Option<Arc<stowage_http::Authenticator>>,
    /// `[links]`, validated, with `public_url` set to the base links are minted on (over
    /// stdio: the one the loopback listener should take).
    pub links_config: LinksConfig,
    pub links: LinksPlan,
    /// Listening beyond loopback without authentication, as `--allow-unauthenticated` allowed.
    pub unauthenticated_exposure: bool,
    /// The variables holding this configuration's secrets, kept from upstream children
    /// ([`crate::wiring::secret_env`]); `check-config` probes commands without them too.
    pub secret_env: Vec<String>,
    /// Serve the web playground at `/` (HTTP only; `--no-playground` turns it off).
    pub playground: bool,
}

/// Where download links point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LinksPlan {
    /// Served on the HTTP listener itself, at this base.
    Http(LinkBase),
    /// Over stdio: a loopback listener of this process, on this URL's port when it is free
    /// (else any free port).
    Loopback { wanted: String },
    /// `--stdio --no-links`: results carry `artifact://` URIs only.
    Off,
}

/// The base URL links are minted on, and which setting gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LinkBase {
    pub url: String,
    pub origin: &'static str,
}

/// Validates the configuration and the `serve` arguments exactly as `serve` needs them.
/// Reads key files and environment variables; creates nothing.
pub(crate) fn plan(config: &Config, keys: &crate::wiring::Keys, args: &ServeArgs) -> anyhow::Result<Plan> {
    let env = |var: &str| std::env::var(var).ok();
    let found = stowage_mcp::config::collect_upstreams_reporting(&config.gateway, args.mcp_config.as_deref(), &args.command, &env)?;
    let auth = stowage_http::Authenticator::new(&config.auth)?;
    let hosts = Arc::new(stowage_mcp::hosts::Hosts::new(&config.hosts, &config.transform.image_preview)?);
    // Links are checked whatever the mode: a bad [links] is a bad config, even on a run that
    // mints none.
    config.links.validate().map_err(anyhow::Error::msg)?;
    // Configured keys come from files and the environment: a missing one fails here, not at
    // the first offload. (The embedded default key is made on first use, by serve.)
    keys.configured()?;
    let mut gateway = config.gateway.clone();
    let mut links_config = config.links.clone();
    let mut unauthenticated_exposure = false;
    let (mode, links) = if args.stdio {
        let links = if args.no_links {
            LinksPlan::Off
        } else {
            let wanted = match &args.public_url {
                Some(url) => {
                    anyhow::ensure!(
                        loopback_url(url),
                        "--public-url {url} cannot be used with --stdio: links over stdio are served on a loopback listener of this process; pass http://127.0.0.1:PORT to choose its port, or leave it out"
                    );
                    url.clone()
                }
                None => links_config.public_url.clone(),
            };
            LinksPlan::Loopback { wanted }
        };
        (Mode::Stdio, links)
    } else {
        if let Some(l) = &args.listen {
            gateway.listen = l.clone();
        }
        unauthenticated_exposure = check_exposure(&gateway.listen, auth.is_some(), args.allow_unauthenticated)?;
        let base = link_base(&config.links, &gateway.listen, args.public_url.as_deref())?;
        links_config.public_url = base.url.clone();
        (Mode::Http { listen: gateway.listen.clone() }, LinksPlan::Http(base))
    };
    let warnings = found.specs.iter().flat_map(|u| missing_command(u).into_iter().chain(argument_warnings(u))).collect();
    Ok(Plan {
        mode,
        hosts,
        gateway,
        upstreams: found.specs,
        skipped: found.skipped,
        warnings,
        auth,
        links_config,
        links,
        unauthenticated_exposure,
        secret_env: crate::wiring::secret_env(config),
        playground: !args.no_playground && !args.stdio,
    })
}

/// The base URL of links minted for a gateway listening on `listen`: `--public-url`, else a
/// configured `links.public_url`, else the listen address when it is not the default one,
/// else the default. Never an address nobody can connect to (`0.0.0.0`, `[::]`): that is an
/// error saying how to name the gateway instead. Used by `serve`, `check-config` and
/// `sign-url`, so all three agree.
pub(crate) fn link_base(links: &LinksConfig, listen: &str, flag: Option<&str>) -> anyhow::Result<LinkBase> {
    let default = LinksConfig::default().public_url;
    let (url, origin) = match flag {
        Some(url) => (url.to_owned(), "--public-url"),
        None if links.public_url != default => (links.public_url.clone(), "links.public_url"),
        None if listen != stowage_mcp::config::DEFAULT_LISTEN => (format!("http://{listen}"), "the listen address"),
        None => (default, "the default"),
    };
    let parsed = url::Url::parse(&url).map_err(|e| anyhow::anyhow!("{origin} {url:?} is not a URL ({e}): use http://HOST:PORT"))?;
    anyhow::ensure!(matches!(parsed.scheme(), "http" | "https"), "{origin} {url:?} must start with http:// or https://");
    let unspecified = match parsed.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_unspecified(),
        Some(url::Host::Ipv6(ip)) => ip.is_unspecified(),
        _ => false,
    };
    if unspecified {
        let port = parsed.port_or_known_default().unwrap_or(8787);
        anyhow::ensure!(
            origin == "the listen address",
            "{origin} {url} is an address no client can connect to: use the name or address clients reach this machine by, e.g. http://HOST:{port}"
        );
        anyhow::bail!(
            "download links would point at {url}, which no client can reach: pass --public-url http://HOST:{port} (the name or address clients use to reach this machine) or set links.public_url in stowage.toml"
        );
    }
    Ok(LinkBase { url: url.trim_end_matches('/').to_owned(), origin })
}

/// The warning for a stdio upstream whose command cannot be found: it is served (as down, so
/// the model sees it and why), and retried, since the user may install it while the host runs.
fn missing_command(u: &UpstreamSpec) -> Option<String> {
    let TransportSpec::Stdio { command, cwd, .. } = &u.transport else { return None };
    (!command_exists(command, cwd.as_deref())).then(|| {
        format!(
            "server {:?}: {command} is not an executable file or on PATH; it is listed as unavailable (calls say why) and started again until it runs",
            u.name
        )
    })
}

/// Extensions of files a server command is commonly given as an argument (a script, a
/// config): an argument ending in one is a path even without a `/`.
const FILE_EXTENSIONS: &[&str] =
    &[".py", ".js", ".mjs", ".cjs", ".ts", ".jar", ".rb", ".sh", ".php", ".pl", ".json", ".toml", ".yaml", ".yml", ".db", ".sqlite"];

/// Warnings for a stdio upstream's arguments that name a file a host would not find: a `~`
/// (hosts pass arguments as they are, no shell expands it), a relative path (a host starts
/// servers from its own working directory, often `/`), or an absolute path that does not
/// exist. The entry is still served: the warning says how to fix it before a host meets it.
fn argument_warnings(u: &UpstreamSpec) -> Vec<String> {
    let TransportSpec::Stdio { args, cwd, .. } = &u.transport else { return Vec::new() };
    let mut out = Vec::new();
    for arg in args {
        // `--config=./x.json`: the value is what may be a path.
        let value = if arg.starts_with('-') { arg.split_once('=').map_or("", |(_, v)| v) } else { arg.as_str() };
        if value.is_empty() || value.contains("://") || value.starts_with('@') {
            continue;
        }
        let path = std::path::Path::new(value);
        if value == "~" || value.starts_with("~/") || value.contains("/~/") {
            out.push(format!(
                "server {:?}: argument {arg:?} has a \"~\", which no shell expands when a host starts the server: give the absolute path",
                u.name
            ));
            continue;
        }
        let path_like = value.contains('/') || FILE_EXTENSIONS.iter().any(|e| value.to_ascii_lowercase().ends_with(e));
        if !path_like {
            continue;
        }
        if path.is_relative() {
            match cwd {
                Some(dir) if !dir.join(path).exists() => {
                    out.push(format!("server {:?}: argument {arg:?} names {}, which does not exist", u.name, dir.join(path).display()))
                }
                Some(_) => {}
                None => out.push(format!(
                    "server {:?}: argument {arg:?} is a relative path, resolved from the working directory a host starts the server in (often /): give the absolute path, or set the entry's cwd",
                    u.name
                )),
            }
        } else if !path.exists() {
            out.push(format!("server {:?}: argument {arg:?} names a file that does not exist", u.name));
        }
    }
    out
}

/// Whether `command` would be found: a path (relative to the entry's `cwd`, else ours) that is
/// a file, or a name on `PATH`.
fn command_exists(command: &str, cwd: Option<&std::path::Path>) -> bool {
    let p = std::path::Path::new(command);
    if p.components().count() > 1 {
        return match cwd {
            Some(dir) if p.is_relative() => dir.join(p).is_file(),
            _ => p.is_file(),
        };
    }
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(command).is_file()))
}

fn loopback_url(url: &str) -> bool {
    match url::Url::parse(url).ok().and_then(|u| u.host().map(|h| h.to_owned())) {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// Refuses to expose an unauthenticated gateway beyond this machine unless told to:
/// `/mcp` runs the user's tools and the store holds their outputs. `Ok(true)`: exposed, as
/// `allowed`; the caller says so loudly.
fn check_exposure(listen: &str, has_auth: bool, allowed: bool) -> anyhow::Result<bool> {
    let host = listen.rsplit_once(':').map_or(listen, |(h, _)| h).trim_start_matches('[').trim_end_matches(']');
    let loopback = host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if loopback || has_auth {
        return Ok(false);
    }
    anyhow::ensure!(
        allowed,
        "refusing to listen on {listen} without authentication: configure [auth] in stowage.toml, listen on 127.0.0.1, or pass --allow-unauthenticated"
    );
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_a_host_would_resolve_wrongly_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("server.py");
        std::fs::write(&script, "").unwrap();
        let spec = |args: &[&str], cwd: Option<&std::path::Path>| {
            let mut u = UpstreamSpec::new(
                "heavy",
                TransportSpec::stdio("python3", args.iter().map(|a| (*a).to_owned()).collect()),
                std::time::Duration::from_secs(30),
            );
            if let TransportSpec::Stdio { cwd: c, .. } = &mut u.transport {
                *c = cwd.map(std::path::Path::to_path_buf);
            }
            u
        };
        let fine = [
            spec(
                &[script.to_str().unwrap(), "-m", "my.module", "--port=8080", "@scope/pkg", "mcp-server-fetch", "https://x.example/a.json"],
                None,
            ),
            spec(&["server.py"], Some(dir.path())),
        ];
        for u in &fine {
            assert_eq!(argument_warnings(u), Vec::<String>::new(), "{u:?}");
        }
        let warned = |args: &[&str], cwd: Option<&std::path::Path>| argument_warnings(&spec(args, cwd));
        let w = warned(&["~/heavy.py"], None);
        assert!(w.len() == 1 && w[0].starts_with("server \"heavy\": argument \"~/heavy.py\" has a \"~\""), "{w:?}");
        assert!(warned(&["//~/heavy.py"], None)[0].contains("no shell expands"));
        let w = warned(&["heavy.py"], None);
        assert!(w[0].contains("relative path") && w[0].contains("often /"), "{w:?}");
        assert!(warned(&["--config=conf/app.toml"], None)[0].contains("\"--config=conf/app.toml\" is a relative path"));
        assert!(warned(&["/nonexistent/server.py"], None)[0].contains("does not exist"));
        assert!(warned(&["missing.py"], Some(dir.path()))[0].contains("missing.py, which does not exist"));
    }

    #[test]
    fn exposure_rules() {
        for addr in ["127.0.0.1:8787", "localhost:1", "[::1]:8787", "127.0.0.2:9"] {
            assert!(!check_exposure(addr, false, false).unwrap(), "{addr}");
        }
        for addr in ["0.0.0.0:8787", "[::]:8787", "192.0.2.10:80"] {
            let err = check_exposure(addr, false, false).unwrap_err().to_string();
            assert!(err.contains("--allow-unauthenticated") && err.contains("[auth]"), "{err}");
            assert!(!check_exposure(addr, true, false).unwrap(), "auth configured");
            assert!(check_exposure(addr, false, true).unwrap(), "explicitly allowed");
        }
    }

    #[test]
    fn the_link_base_follows_flag_then_config_then_listen_then_default() {
        let mut links = LinksConfig::default();
        let base = |links: &LinksConfig, listen: &str, flag: Option<&str>| link_base(links, listen, flag).map(|b| (b.url, b.origin));
        assert_eq!(base(&links, "127.0.0.1:8787", None).unwrap(), ("http://127.0.0.1:8787".into(), "the default"));
        assert_eq!(base(&links, "127.0.0.1:9000", None).unwrap(), ("http://127.0.0.1:9000".into(), "the listen address"));
        assert_eq!(base(&links, "0.0.0.0:1", Some("https://gw.example.com/")).unwrap(), ("https://gw.example.com".into(), "--public-url"));
        links.public_url = "https://files.example.com/stowage".into();
        assert_eq!(base(&links, "0.0.0.0:8787", None).unwrap(), ("https://files.example.com/stowage".into(), "links.public_url"));
        assert_eq!(base(&links, "127.0.0.1:8787", Some("http://10.0.0.5:8787")).unwrap().1, "--public-url");
    }

    #[test]
    fn links_never_point_at_an_unspecified_address() {
        let links = LinksConfig::default();
        for listen in ["0.0.0.0:8787", "[::]:8787"] {
            let err = link_base(&links, listen, None).unwrap_err().to_string();
            assert!(err.contains("which no client can reach") && err.contains("--public-url http://HOST:8787"), "{err}");
            assert!(err.contains("links.public_url"), "{err}");
        }
        let err = link_base(&links, "127.0.0.1:8787", Some("http://0.0.0.0:9")).unwrap_err().to_string();
        assert!(err.starts_with("--public-url http://0.0.0.0:9 is an address no client can connect to"), "{err}");
        let configured = LinksConfig { public_url: "http://[::]:80".into(), ..Default::default() };
        assert!(link_base(&configured, "127.0.0.1:8787", None).unwrap_err().to_string().starts_with("links.public_url"));
        assert!(link_base(&links, "x", Some("ftp://x")).unwrap_err().to_string().contains("must start with http"));
        assert!(link_base(&links, "x", Some("not a url")).unwrap_err().to_string().contains("is not a URL"));
    }

    #[test]
    fn loopback_urls() {
        for (u, ok) in [
            ("http://127.0.0.1:8787", true),
            ("http://localhost:1", true),
            ("http://[::1]:2", true),
            ("https://gw.example.com", false),
            ("http://0.0.0.0:1", false),
        ] {
            assert_eq!(loopback_url(u), ok, "{u}");
        }
    }
}
