//! Paths as hosts pass them. A host (Claude Desktop, Cursor, VS Code) starts `stowage` with its
//! arguments exactly as written in its JSON, without a shell: `~` is not expanded, and a
//! relative path is relative to a working directory the host chose (often `/`). Both fail far
//! from the cause ("No such file or directory"), so they are refused here with a line that
//! says what happened and what to write instead.

use std::path::{Component, Path, PathBuf};

/// Refuses a path that starts with `~` (`~/x`, `~user/x`): no shell expanded it, and taken as
/// written it names a directory called `~` in the working directory.
pub(crate) fn refuse_unexpanded(given_as: &str, path: &Path, cwd: &Path) -> anyhow::Result<()> {
    let first = path.components().next();
    let tilde = matches!(first, Some(Component::Normal(c)) if c.to_string_lossy().starts_with('~'));
    if tilde {
        let rest: PathBuf = path.components().skip(1).collect();
        let user = first.map(|c| c.as_os_str().to_string_lossy()[1..].to_owned()).unwrap_or_default();
        let home = match user.as_str() {
            "" => dirs::home_dir().unwrap_or_else(|| PathBuf::from("/home/you")),
            user => PathBuf::from("/home").join(user),
        };
        let example = home.join(rest).display().to_string();
        anyhow::bail!(
            "{given_as} {}: `~` was passed as written (hosts start stowage without a shell, which is what expands it; the working directory is {}): write the absolute path, e.g. {example}",
            path.display(),
            cwd.display()
        );
    }
    Ok(())
}

/// A file argument that must exist: `~` refused as above, and a relative path that does not
/// exist named with the working directory it was looked for in.
pub(crate) fn existing_file(given_as: &str, path: &Path) -> anyhow::Result<()> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("?"));
    refuse_unexpanded(given_as, path, &cwd)?;
    if path.is_relative() && !path.exists() {
        anyhow::bail!(
            "{given_as} {}: no such file in the working directory {} (hosts start stowage in a directory of their choosing): write the absolute path",
            path.display(),
            cwd.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tilde_path_names_the_working_directory_and_the_fix() {
        let e = refuse_unexpanded("--mcp-config", Path::new("~/servers.json"), Path::new("/")).unwrap_err().to_string();
        assert!(e.starts_with("--mcp-config ~/servers.json: `~` was passed as written"), "{e}");
        assert!(e.contains("the working directory is /") && e.contains("write the absolute path, e.g. "), "{e}");
        assert!(e.ends_with("servers.json") && !e.contains("~/servers.json, e.g"), "{e}");
        assert!(refuse_unexpanded("--store", Path::new("~bob/store"), Path::new("/")).is_err());
        assert!(refuse_unexpanded("--store", Path::new("/srv/~x"), Path::new("/")).is_ok(), "a ~ inside a path is a name");
        assert!(refuse_unexpanded("--store", Path::new("store"), Path::new("/")).is_ok());
    }

    #[test]
    fn a_missing_relative_file_names_the_working_directory() {
        let e = existing_file("--mcp-config", Path::new("no-such-servers-file.json")).unwrap_err().to_string();
        let cwd = std::env::current_dir().unwrap();
        assert!(e.contains(&format!("no such file in the working directory {}", cwd.display())), "{e}");
        assert!(existing_file("--mcp-config", Path::new("Cargo.toml")).is_ok());
        // An absolute path that does not exist is left to the reader's own error.
        assert!(existing_file("--mcp-config", Path::new("/no/such/file.json")).is_ok());
    }
}
