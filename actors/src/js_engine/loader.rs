//! Modules from the workspace: files for CommonJS `require()` (run by the prelude) and the
//! resolver and loader of ES `import()`.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use rquickjs::loader::{Loader, Resolver};
use rquickjs::{Ctx, Module};
use serde_json::{json, Value as Json};

use super::slot::RunSlot;

/// Finds and reads a CommonJS module for `require()`.
pub(super) fn read_module(base: &Path, spec: &str, from: &str) -> Json {
    let from = if from.is_empty() { base.to_path_buf() } else { PathBuf::from(from) };
    let wanted = normalize(&from.join(spec));
    let candidates =
        [wanted.clone(), wanted.with_extension("js"), wanted.with_extension("cjs"), wanted.join("index.js")];
    let Some(path) = candidates.iter().find(|p| p.is_file()) else {
        return json!({ "ok": false, "error": {
            "code": "module_not_found",
            "message": format!("cannot find module '{spec}' (looked for {})", wanted.display()),
        }});
    };
    match std::fs::read_to_string(path) {
        Ok(source) => json!({
            "ok": true,
            "path": path.to_string_lossy(),
            "dir": path.parent().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default(),
            "source": source,
        }),
        Err(e) => json!({ "ok": false, "error": {
            "code": "module_unreadable",
            "message": format!("cannot read module {}: {e}", path.display()),
        }}),
    }
}

/// Resolves `import()` specifiers: relative ones from the importing module's directory, or
/// from the workspace for the body itself; absolute paths as they are.
pub(super) struct WorkspaceResolver {
    pub(super) slot: Arc<RunSlot>,
}

impl Resolver for WorkspaceResolver {
    fn resolve<'js>(&mut self, _: &Ctx<'js>, base: &str, name: &str) -> rquickjs::Result<String> {
        let workspace = self.slot.host().map(|h| h.base_dir()).unwrap_or_default();
        let from = Path::new(base);
        let dir = if from.is_absolute() { from.parent().unwrap_or(&workspace).to_path_buf() } else { workspace };
        let path = normalize(&dir.join(name));
        if !path.is_file() {
            return Err(rquickjs::Error::new_resolving_message(base, name, format!("no file at {}", path.display())));
        }
        Ok(path.to_string_lossy().into_owned())
    }
}

pub(super) struct WorkspaceLoader;

impl Loader for WorkspaceLoader {
    fn load<'js>(&mut self, ctx: &Ctx<'js>, name: &str) -> rquickjs::Result<Module<'js, rquickjs::module::Declared>> {
        let source = std::fs::read(name).map_err(|e| rquickjs::Error::new_loading_message(name, e.to_string()))?;
        Module::declare(ctx.clone(), name, source)
    }
}

/// Lexical normalization (`a/./b/../c` -> `a/c`), without touching the disk.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}
