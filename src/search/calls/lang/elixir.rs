//! Elixir: modules (`defmodule Shop.Repo`, whose functions a call names by the module's last
//! part or whole path: `Repo.save(x)`, `Shop.Repo.save(x)`), `def`/`defp` functions, macros,
//! `alias A.B, as: C` and anonymous functions bound to a variable (`inner = fn x -> .. end`,
//! called as `inner.(x)`). Elixir has no receiver types: a call on a variable (`mod.f()`) may
//! reach any function of the name. A plain `alias A.B` binds `B`, which names the module
//! anyway, and `import` brings in functions without naming them: neither is recorded.

use super::{Lang, Rules};

pub const LANGS: &[&Lang] = &[&ELIXIR];

pub static ELIXIR: Lang = Lang {
    name: "elixir",
    extensions: &["ex", "exs"],
    interpreters: &["elixir"],
    grammar: || tree_sitter_elixir::LANGUAGE.into(),
    // The shipped tags query counts `def`, `defmodule`, `alias` and `if` as calls (its patterns
    // that leave them out are separate, which gm does not read as exclusions).
    tags: &[],
    query: &[QUERY],
    rules: Rules {
        self_names: &["__MODULE__"],
        ..Rules::NONE
    },
};

const QUERY: &str = r#"
(call target: (identifier) @keyword (arguments . (alias) @name) (#any-of? @keyword "defmodule" "defprotocol")) @definition.module
(call target: (identifier) @keyword (arguments . [(identifier) @name (call target: (identifier) @name) (binary_operator left: (call target: (identifier) @name) operator: "when")]) (#any-of? @keyword "def" "defp" "defdelegate" "defguard" "defguardp" "defn" "defnp")) @definition.function
(call target: (identifier) @keyword (arguments . [(identifier) @name (call target: (identifier) @name) (binary_operator left: (call target: (identifier) @name) operator: "when")]) (#any-of? @keyword "defmacro" "defmacrop")) @definition.macro
(binary_operator left: (identifier) @name operator: "=" right: (anonymous_function)) @definition.function

(call target: (identifier) @name (#not-any-of? @name "def" "defp" "defdelegate" "defguard" "defguardp" "defmacro" "defmacrop" "defn" "defnp" "defmodule" "defprotocol" "defimpl" "defstruct" "defexception" "defoverridable" "alias" "import" "require" "use" "case" "cond" "if" "unless" "for" "with" "try" "receive" "quote" "unquote" "unquote_splicing" "raise" "reraise" "throw" "super" "fn")) @reference.call
(call target: (dot left: [(alias) (identifier) (call target: (identifier) @self (#eq? @self "__MODULE__"))] @receiver right: (identifier) @name)) @reference.call
(call target: (dot left: (identifier) @name !right)) @reference.call
(binary_operator operator: "|>" right: (identifier) @name) @reference.call

(call target: (identifier) @keyword (arguments . (alias) @import.module (keywords (pair key: (keyword) @as value: (alias) @import.alias) (#eq? @as "as: "))) (#eq? @keyword "alias")) @import
"#;
