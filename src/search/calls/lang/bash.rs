//! Bash (and POSIX sh): functions and the commands that call them, in pipelines, command
//! substitutions and conditions. A shell has no types, receivers or qualified names; `source`
//! brings in every function of a script without naming one, so it binds nothing and a command
//! resolves by name: the script's own function, else the one function of that name.

use super::{Lang, Rules};

pub const LANGS: &[&Lang] = &[&BASH];

pub static BASH: Lang = Lang {
    name: "bash",
    extensions: &["sh", "bash"],
    interpreters: &["bash", "sh", "dash", "ksh"],
    grammar: || tree_sitter_bash::LANGUAGE.into(),
    // The crate ships no tags query.
    tags: &[],
    query: &[QUERY],
    rules: Rules::NONE,
};

const QUERY: &str = r#"
(function_definition name: (word) @name) @definition.function

(command name: (command_name (word) @name)) @reference.call
"#;
