//! The skills gm serves: `skills/<name>/*.md`, as `skill://<name>/<file>` resources, as
//! SEP-2640 skill entries, and as prompts. Files are read from disk at every use, so an edit
//! to a rule takes effect at the next step. A copy built into the binary stands in when no
//! skills directory is found, and the server says which it used.
//!
//! One file of the gm skill is not on disk: `skill://gm/gm.d.ts` ([`crate::dts`]) is made at
//! every read from the verb registry and the child servers' tools.

use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, OnceLock, Weak};

use serde::Serialize;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::children::Children;
use crate::dts;

/// The heading of the rules section in skills/gm/SKILL.md.
pub const RULES_HEADING: &str = "## The seven rules of a run";

const EMBEDDED: &[(&str, &str)] = &[
    ("gm/SKILL.md", include_str!("../skills/gm/SKILL.md")),
    ("gm/WORKFLOWS.md", include_str!("../skills/gm/WORKFLOWS.md")),
    ("gm-continue/SKILL.md", include_str!("../skills/gm-continue/SKILL.md")),
];

#[derive(Debug, thiserror::Error)]
pub enum SkillError {
    #[error("not a skill URI (expected skill://<skill>/<file>): {0}")]
    BadUri(String),
    #[error("no such skill file: {0}")]
    NotFound(String),
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{RULES_HEADING} not found in skill://gm/SKILL.md, or it does not hold seven numbered rules")]
    NoRules,
}

#[derive(Debug, Clone)]
pub struct Skills {
    /// The skills directory, or `None` when the built-in copy is served.
    dir: Option<PathBuf>,
    /// The worker's child servers, whose tools gm.d.ts declares beside the verbs; unset in the
    /// one-shot CLI, which starts none. Weak: serving their declarations must not keep the
    /// child servers alive past the worker's own handle.
    children: Arc<OnceLock<Weak<Children>>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SkillFile {
    pub uri: String,
    /// The skill's name (its directory).
    pub skill: String,
    /// The file's path inside the skill.
    pub file: String,
    pub size: u64,
    /// `sha256:<hex>` of the file's bytes.
    pub digest: String,
    /// A SKILL.md's frontmatter `name` and `description`: its resource is listed under them
    /// (SEP-2640). `None` for other files, and for a SKILL.md whose frontmatter lacks them.
    pub name: Option<String>,
    pub description: Option<String>,
}

impl Skills {
    /// Finds the skills directory: `$GM_SKILLS_DIR`, then `skills/` beside the binary or one or
    /// two levels up (an install, or `target/<profile>/gm` in a checkout), then the checkout
    /// the binary was built from.
    pub fn locate() -> Self {
        let mut candidates = Vec::new();
        if let Some(dir) = std::env::var_os("GM_SKILLS_DIR") {
            candidates.push(PathBuf::from(dir));
        }
        candidates.extend(gm_actors::builds::running_part_candidates("skills", Path::new(env!("CARGO_MANIFEST_DIR"))));
        let dir = candidates.into_iter().find(|d| d.join("gm/SKILL.md").is_file());
        Self { dir: dir.and_then(|d| d.canonicalize().ok()), children: Arc::default() }
    }

    pub fn at(dir: PathBuf) -> Self {
        Self { dir: Some(dir), children: Arc::default() }
    }

    /// gm.d.ts declares the tools of these child servers from now on. The first call wins:
    /// a worker has one set of child servers, which every session shares.
    pub fn declare_tools_of(&self, children: &Arc<Children>) {
        let _ = self.children.set(Arc::downgrade(children));
    }

    /// The text of `skill://gm/gm.d.ts` now.
    pub fn declarations(&self) -> String {
        let tools = self.children.get().and_then(Weak::upgrade).map(|c| c.tools()).unwrap_or_default();
        dts::generate(&tools)
    }

    /// The skills directory found; `None` when the built-in copy is served.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Where skills are read from, for diagnostics.
    pub fn source(&self) -> String {
        match &self.dir {
            Some(d) => d.display().to_string(),
            None => "built into the binary".into(),
        }
    }

    /// Every skill file, skills sorted by name, SKILL.md first in each; the gm skill's
    /// gm.d.ts as it is now.
    pub fn files(&self) -> Vec<SkillFile> {
        let generated = format!("{}/{}", dts::SKILL, dts::FILE);
        let mut out: Vec<SkillFile> = match &self.dir {
            None => EMBEDDED.iter().map(|(rel, text)| entry(rel, text.as_bytes())).collect(),
            Some(dir) => {
                let mut v = Vec::new();
                for (skill, file) in walk(dir) {
                    let rel = format!("{skill}/{file}");
                    if let Ok(bytes) = std::fs::read(dir.join(&rel)) {
                        v.push(entry(&rel, &bytes));
                    }
                }
                v
            }
        };
        // Generated, never read from disk: a file of that name in the skill is not served.
        out.retain(|f| format!("{}/{}", f.skill, f.file) != generated);
        if out.iter().any(|f| f.skill == dts::SKILL && f.file == "SKILL.md") {
            out.push(entry(&generated, self.declarations().as_bytes()));
        }
        out.sort_by(|a, b| (&a.skill, a.file != "SKILL.md", &a.file).cmp(&(&b.skill, b.file != "SKILL.md", &b.file)));
        out
    }

    /// Names of the skills (directories holding a SKILL.md).
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> =
            self.files().into_iter().filter(|f| f.file == "SKILL.md").map(|f| f.skill).collect();
        names.dedup();
        names
    }

    pub fn read(&self, uri: &str) -> Result<String, SkillError> {
        let rel = parse_uri(uri)?;
        if uri == dts::URI {
            return Ok(self.declarations());
        }
        match &self.dir {
            None => EMBEDDED
                .iter()
                .find(|(r, _)| *r == rel)
                .map(|(_, t)| t.to_string())
                .ok_or_else(|| SkillError::NotFound(uri.into())),
            Some(dir) => {
                let path = dir.join(&rel);
                std::fs::read_to_string(&path).map_err(|source| match source.kind() {
                    std::io::ErrorKind::NotFound => SkillError::NotFound(uri.into()),
                    _ => SkillError::Io { path, source },
                })
            }
        }
    }

    /// The SEP-2640 entry for a skill: its SKILL.md URI, frontmatter, and file manifest.
    pub fn entry(&self, skill: &str) -> Result<Value, SkillError> {
        let uri = format!("skill://{skill}/SKILL.md");
        let text = self.read(&uri)?;
        let resources: Vec<Value> = self
            .files()
            .into_iter()
            .filter(|f| f.skill == skill)
            .map(|f| json!({ "uri": f.uri, "digest": f.digest, "size": f.size }))
            .collect();
        Ok(json!({ "uri": uri, "frontmatter": frontmatter(&text), "resources": resources }))
    }

    /// The seven rules, re-read from skill://gm/SKILL.md.
    pub fn rules(&self) -> Result<Vec<String>, SkillError> {
        parse_rules(&self.read("skill://gm/SKILL.md")?)
    }
}

fn entry(rel: &str, bytes: &[u8]) -> SkillFile {
    let (skill, file) = rel.split_once('/').unwrap_or((rel, ""));
    let front = match file {
        "SKILL.md" => frontmatter(&String::from_utf8_lossy(bytes)),
        _ => Value::Null,
    };
    let field = |key: &str| front.get(key).and_then(Value::as_str).filter(|v| !v.is_empty()).map(str::to_owned);
    SkillFile {
        uri: format!("skill://{rel}"),
        skill: skill.into(),
        file: file.into(),
        size: bytes.len() as u64,
        digest: digest(bytes),
        name: field("name"),
        description: field("description"),
    }
}

/// `sha256:<hex>` of a file's bytes, as skill manifests and resources carry it.
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

/// `(skill, file)` for every regular file under `dir/<skill>/` where `<skill>/SKILL.md` exists.
fn walk(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Ok(skills) = std::fs::read_dir(dir) else { return out };
    for skill in skills.filter_map(Result::ok) {
        let root = skill.path();
        if !root.join("SKILL.md").is_file() {
            continue;
        }
        let name = skill.file_name().to_string_lossy().into_owned();
        for p in crate::walk::files_under(&root) {
            if let Ok(rel) = p.strip_prefix(&root) {
                out.push((name.clone(), rel.to_string_lossy().into_owned()));
            }
        }
    }
    out
}

/// `skill://gm/WORKFLOWS.md` -> `gm/WORKFLOWS.md`, refusing anything that leaves the skill.
fn parse_uri(uri: &str) -> Result<String, SkillError> {
    let rest = uri.strip_prefix("skill://").ok_or_else(|| SkillError::BadUri(uri.into()))?;
    let path = Path::new(rest);
    let clean = path.components().all(|c| matches!(c, Component::Normal(_)));
    if !clean || path.components().count() < 2 {
        return Err(SkillError::BadUri(uri.into()));
    }
    Ok(rest.to_owned())
}

/// The YAML frontmatter's `key: value` lines as a JSON object.
pub fn frontmatter(text: &str) -> Value {
    let mut m = Map::new();
    let mut lines = text.lines();
    if lines.next().map(str::trim) != Some("---") {
        return Value::Object(m);
    }
    for line in lines {
        if line.trim() == "---" {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            let v = v.trim().trim_matches('"').trim_matches('\'');
            m.insert(k.trim().to_owned(), json!(v));
        }
    }
    Value::Object(m)
}

/// The body of a skill file without its frontmatter.
pub fn body(text: &str) -> &str {
    if let Some(rest) = text.strip_prefix("---") {
        if let Some(end) = rest.find("\n---") {
            let after = &rest[end + 4..];
            return after.strip_prefix('\n').unwrap_or(after);
        }
    }
    text
}

/// The numbered lines under [`RULES_HEADING`], up to the next heading.
pub fn parse_rules(text: &str) -> Result<Vec<String>, SkillError> {
    let start = text.find(RULES_HEADING).ok_or(SkillError::NoRules)?;
    let section = &text[start + RULES_HEADING.len()..];
    let section = section.find("\n#").map_or(section, |end| &section[..end]);
    let rules: Vec<String> = section
        .lines()
        .filter_map(|l| {
            let (num, rest) = l.split_once(". ")?;
            num.parse::<u32>().ok()?;
            Some(rest.trim().to_owned())
        })
        .collect();
    if rules.len() != 7 {
        return Err(SkillError::NoRules);
    }
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_skill_holds_exactly_seven_rules() {
        let rules = parse_rules(EMBEDDED[0].1).expect("rules");
        assert_eq!(rules.len(), 7);
        assert!(rules.iter().all(|r| !r.is_empty()));
    }

    #[test]
    fn frontmatter_and_body_are_split() {
        let text = "---\nname: gm\ndescription: \"a b\"\n---\n# Body\n";
        assert_eq!(frontmatter(text), json!({ "name": "gm", "description": "a b" }));
        assert_eq!(body(text), "# Body\n");
    }

    #[test]
    fn uris_that_leave_the_skill_are_refused() {
        assert!(parse_uri("skill://gm/../../etc/passwd").is_err());
        assert!(parse_uri("skill://gm").is_err());
        assert!(parse_uri("file:///etc").is_err());
        assert_eq!(parse_uri("skill://gm/WORKFLOWS.md").expect("ok"), "gm/WORKFLOWS.md");
    }

    #[test]
    fn the_embedded_copy_serves_every_file_with_a_digest() {
        let s = Skills { dir: None, children: Arc::default() };
        let files = s.files();
        assert_eq!(files.len(), 4, "three files and the generated gm.d.ts");
        assert!(files.iter().all(|f| f.digest.starts_with("sha256:") && f.digest.len() == 71));
        assert_eq!(s.names(), ["gm", "gm-continue"]);
    }

    #[test]
    fn a_skill_md_is_named_and_described_by_its_frontmatter() {
        let files = Skills { dir: None, children: Arc::default() }.files();
        let gm = files.iter().find(|f| f.uri == "skill://gm/SKILL.md").expect("gm");
        let front = frontmatter(EMBEDDED[0].1);
        assert_eq!(gm.name.as_deref(), front["name"].as_str());
        assert_eq!(gm.description.as_deref(), front["description"].as_str());
        assert!(gm.description.as_deref().is_some_and(|d| !d.is_empty()));
        let workflows = files.iter().find(|f| f.file == "WORKFLOWS.md").expect("workflows");
        assert_eq!((workflows.name.as_deref(), workflows.description.as_deref()), (None, None));
    }

    #[test]
    fn gm_d_ts_is_served_generated_and_a_file_of_that_name_on_disk_is_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("gm")).expect("gm");
        std::fs::write(dir.path().join("gm/SKILL.md"), "---\nname: gm\n---\n").expect("SKILL.md");
        std::fs::write(dir.path().join("gm/gm.d.ts"), "hand-written").expect("gm.d.ts");
        let s = Skills::at(dir.path().to_owned());
        let text = s.read(dts::URI).expect("gm.d.ts");
        assert_eq!(text, dts::generate(&[]));
        let listed: Vec<SkillFile> = s.files().into_iter().filter(|f| f.uri == dts::URI).collect();
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].size, &listed[0].digest), (text.len() as u64, &digest(text.as_bytes())));
        // Without the gm skill there is nothing to declare.
        std::fs::remove_file(dir.path().join("gm/SKILL.md")).expect("rm");
        assert!(s.files().is_empty());
    }
}
