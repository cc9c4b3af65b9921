//! `stowage sign-url ID [--ttl D]`: a fresh signed download link, for operators.
//!
//! The artifact outlives its links; this mints a new one for as long as the artifact lives.
//! The link is bound to the artifact's owner, exactly like the links the gateway hands out,
//! and built on the base URL `serve` would use ([`crate::plan::link_base`]): `--public-url`,
//! `links.public_url`, `gateway.listen`, and `http://127.0.0.1:8787` only when none is set.

use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use stowage_core::ArtifactId;
use stowage_links::{LinkSigner, LinksConfig, MAX_TTL, MIN_TTL};
use stowage_store::{Access, ArtifactStore};

#[derive(Debug, Args)]
pub(crate) struct SignUrlArgs {
    /// Artifact id or artifact:// URI.
    pub id: String,
    /// Link lifetime, 1m to 60m (default: links.ttl, 15m).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub ttl: Option<Duration>,
    /// Pick the owner when several hold this id (by default: the owner of any record).
    #[command(flatten)]
    pub owner: super::OwnerArgs,
    /// Base URL of the link: where clients reach the gateway (default: links.public_url, else
    /// gateway.listen, as `serve` does).
    #[arg(long, value_name = "URL")]
    pub public_url: Option<String>,
    /// Print JSON {url, expires_at} instead of the bare URL.
    #[arg(long)]
    pub json: bool,
}

pub(crate) async fn run(
    store: &dyn ArtifactStore,
    links: &LinksConfig,
    listen: &str,
    keys: &crate::wiring::Keys,
    args: SignUrlArgs,
) -> anyhow::Result<()> {
    if let Some(ttl) = args.ttl
        && !(MIN_TTL..=MAX_TTL).contains(&ttl)
    {
        bail!("--ttl {} is out of range; use 1m to 60m", humantime::format_duration(ttl));
    }
    links.validate().map_err(anyhow::Error::msg)?;
    let base = crate::plan::link_base(links, listen, args.public_url.as_deref())?;
    let links = &LinksConfig { public_url: base.url, ..links.clone() };
    let id = ArtifactId::parse_loose(&args.id).with_context(|| format!("{:?} is not an artifact id", args.id))?;
    let access = if args.owner.is_set() { Access::owner_of(&args.owner.scope(None)) } else { Access::Operator };
    let meta = store.meta(&access, &id).await?;
    let signer = LinkSigner::new(keys.ring()?, links);
    let link = signer.link_for(&meta, stowage_links::unix_now(), args.ttl);
    if args.json {
        println!("{}", serde_json::to_string(&link)?);
    } else {
        println!("{}", link.url);
    }
    Ok(())
}
