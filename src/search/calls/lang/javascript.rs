//! JavaScript (and JSX): `this`, classes, object-literal methods, ES module imports.

use super::{Lang, Rules};

pub const LANGS: &[&Lang] = &[&JAVASCRIPT];

pub static JAVASCRIPT: Lang = Lang {
    name: "javascript",
    extensions: &["js", "jsx", "mjs", "cjs"],
    interpreters: &["node", "nodejs", "deno", "bun"],
    grammar: || tree_sitter_javascript::LANGUAGE.into(),
    tags: &[tree_sitter_javascript::TAGS_QUERY],
    query: &[COMMON, JS_ONLY],
    rules: Rules {
        self_names: &["this", "super"],
        ..Rules::NONE
    },
};

/// Patterns the JavaScript and TypeScript grammars share (TypeScript's extends JavaScript's).
pub const COMMON: &str = r#"
(function_declaration name: (identifier) @name) @definition.function
(generator_function_declaration name: (identifier) @name) @definition.function
(method_definition name: (_) @name) @definition.method
(variable_declarator name: (identifier) @name value: [(arrow_function) (function_expression) (generator_function)]) @definition.function
(pair key: (_) @name value: [(arrow_function) (function_expression) (generator_function)]) @definition.method

(call_expression function: (identifier) @name) @reference.call
(call_expression function: (member_expression object: (_) @receiver property: (property_identifier) @name)) @reference.call
(new_expression constructor: (identifier) @name) @reference.new

(import_statement (import_clause (named_imports (import_specifier name: (_) @import.name alias: (_)? @import.alias))) source: (string (string_fragment) @import.module)) @import
(import_statement (import_clause (namespace_import (identifier) @import.alias)) source: (string (string_fragment) @import.module)) @import
(export_statement (export_clause (export_specifier name: (_) @import.name alias: (_) @import.alias)) source: (string (string_fragment) @import.module)?) @import

(variable_declarator name: (identifier) @bind.name value: (new_expression constructor: (identifier) @bind.type))
(assignment_expression left: (member_expression object: (this) property: (property_identifier) @bind.field) right: (new_expression constructor: (identifier) @bind.type))
"#;

const JS_ONLY: &str = r#"
(class_declaration name: (_) @name (class_heritage [(identifier) @base (member_expression property: (property_identifier) @base)])?) @definition.class
(field_definition property: (_) @name value: [(arrow_function) (function_expression) (generator_function)]) @definition.function
"#;
