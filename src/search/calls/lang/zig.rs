//! Zig: functions, `const T = struct { .. }` (and `union`, `enum`, `opaque`) whose functions
//! are its methods, `const m = @import("file.zig")` with `m.f()`, and a top-level
//! `const f = m.f;` or `const T = m.T;`, which is how Zig code names another file's members
//! (recorded as an import of that name from the module `m` names, found by path). A receiver
//! is typed by its parameter (`self: *Repo`), a declared type (`var c: Cache = .{}`), a struct
//! literal (`Repo{}`) or the `T.init()` constructor convention. Zig has no closures: a local
//! function is a function of a local struct, `Local.f()`.

use super::{Lang, Rules};

pub const LANGS: &[&Lang] = &[&ZIG];

pub static ZIG: Lang = Lang {
    name: "zig",
    extensions: &["zig"],
    interpreters: &[],
    grammar: || tree_sitter_zig::LANGUAGE.into(),
    // The crate ships no tags query.
    tags: &[],
    query: &[QUERY],
    rules: Rules {
        // `self` is an ordinary parameter, typed by its declaration like any other.
        self_names: &[],
        ..Rules::NONE
    },
};

const QUERY: &str = r#"
(variable_declaration (identifier) @name (struct_declaration)) @definition.struct
(variable_declaration (identifier) @name (union_declaration)) @definition.struct
(variable_declaration (identifier) @name (enum_declaration)) @definition.enum
(variable_declaration (identifier) @name (opaque_declaration)) @definition.struct
([(struct_declaration) (union_declaration) (enum_declaration) (opaque_declaration)] (function_declaration name: (identifier) @name) @definition.method)
(function_declaration name: (identifier) @name) @definition.function

(call_expression function: (identifier) @name) @reference.call
(call_expression function: (field_expression object: (_) @receiver member: (identifier) @name)) @reference.call

(variable_declaration (identifier) @import.alias (builtin_function (builtin_identifier) @builtin (arguments . (string (string_content) @import.module) .)) (#eq? @builtin "@import")) @import
(source_file (variable_declaration (identifier) @import.alias (field_expression object: (identifier) @import.module member: (identifier) @import.name)) @import)

(parameter name: (identifier) @bind.name type: [(identifier) @bind.type (pointer_type (identifier) @bind.type)])
(variable_declaration (identifier) @bind.name type: [(identifier) @bind.type (pointer_type (identifier) @bind.type)])
(variable_declaration (identifier) @bind.name (struct_initializer (identifier) @bind.type))
(variable_declaration (identifier) @bind.name (call_expression function: (field_expression object: (identifier) @bind.type member: (identifier) @init)) (#eq? @init "init") (#match? @bind.type "^[A-Z]"))
"#;
